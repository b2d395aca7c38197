"""From a checked spec to the plan, for `run` and `render` alike: the seed of a shuffled host order,
the hardware each host gets on the engine's machine, and the plan itself. Pure: what the engine has
(its machine, whether it has an image) is handed in, so a plan can be made, printed and diffed
without one."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Protocol

from emulator.errors import EnvironmentProblem, UsageError
from emulator.jobspec import JobSpec
from emulator.jobspec.hardware_modes import CpuMode, GpuMode, parse_gpu_mode
from emulator.planning import hardware
from emulator.planning.debug_host import DebugTarget
from emulator.planning.hardware import Hardware, Machine
from emulator.planning.plan import MemoryLimit, Plan, assign_hosts, make_plan, memory_limit


class PlanOptions(Protocol):
    """What of a run's options its plan is made with: `emulator.options.RunOptions` has them all. A
    protocol rather than RunOptions itself, because the options sit a layer above the plan (they name
    its types) and the plan imports nothing from above it (tests/unit/test_layers.py)."""

    @property
    def host_order(self) -> str: ...
    @property
    def seed(self) -> int | None: ...
    @property
    def memory(self) -> MemoryLimit: ...
    @property
    def debug(self) -> DebugTarget | None: ...
    @property
    def gpus(self) -> GpuMode | None: ...
    @property
    def cpus(self) -> CpuMode: ...


def prepare(spec: JobSpec, options: PlanOptions, machine: Machine, job_name: str,
            job_dir: Path | None = None) -> Plan:
    """The plan of `spec` (its image already chosen: `emulator.aws.ecr_images.with_image`) as `options`
    say (host order and seed, memory, debug target, GPUs and vCPUs) on `machine`; `job_dir` defaults
    to the output path's job folder (render gives its own)."""
    return make_plan(spec, job_name, options.host_order, options.seed, job_dir=job_dir, memory=options.memory,
                     debug=options.debug, hardware=choose_hardware(spec, options, job_name, options.seed, machine))


def choose_seed(host_order: str, seed: int | None) -> int | None:
    """A shuffled order always has a seed, printed and stored, so a surprising order can be replayed."""
    if seed is not None and host_order != "shuffled":
        # Silently ignoring it would let a user believe they replayed a shuffled order.
        raise UsageError(f"a seed ({seed}) only applies to --host-order shuffled",
                         hint=f"add --host-order shuffled to replay seed {seed}")
    if host_order == "shuffled" and seed is None:
        return random.SystemRandom().randrange(1, 2**31)
    return seed


def choose_hardware(spec: JobSpec, options: PlanOptions, job_name: str, seed: int | None,
                    machine: Machine) -> Hardware:
    """How the hosts get their types' GPUs and vCPUs on `machine` (emulator/planning/hardware.py), with what
    what the machine cannot give them as its notes and warnings; a GPU mode the engine cannot serve, or too few GPUs,
    is an EnvironmentProblem before anything starts."""
    mode = options.gpus or parse_gpu_mode(spec.gpus or "auto")
    groups = assign_hosts(spec, options.host_order, seed)
    hosts = sorted(((h, g.instance_type) for g in groups for h in g.hosts), key=lambda pair: int(pair[0][5:]))
    try:
        chosen = hardware.resolve(mode, options.cpus, job_name, hosts, machine)
    except hardware.GpuShortage as err:
        needs = ", ".join(f"{h} {hardware.gpu_count(kind)}" for h, kind in hosts if hardware.gpu_count(kind))
        raise EnvironmentProblem(f"the job needs {err.needed} GPUs ({needs}); this machine has {err.present}",
                                 hint="--gpus share hands them out round robin (hosts then share GPUs); "
                                 "--gpus emulate shows each host its type's GPUs without CUDA") from None
    except ValueError as err:
        raise EnvironmentProblem(f"--gpus {mode}: {err}", hint=machine.gpu_hint) from None
    limits = {kind: memory_limit(options.memory, kind) for _, kind in hosts}
    return hardware.cannot_give(chosen, hosts, machine, limits)
