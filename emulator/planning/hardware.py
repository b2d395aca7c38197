"""What each host's instance type gives it on this machine: its GPUs (real ones, emulated ones or
none), the vCPU count the training toolkit reads, and what this machine cannot give.

On the service the training toolkit asks the host itself: `SM_NUM_GPUS` is the count of lines
`nvidia-smi --list-gpus` prints and `SM_NUM_CPUS` is `multiprocessing.cpu_count()`
(aws/sagemaker-training-toolkit, src/sagemaker_training/environment.py `num_gpus`, `num_cpus`). The
GPU count also decides the MPI processes per host when `processes_per_host` is not given and the
processes `torchrun` starts per node (runner.py `_get_by_runner_type`: `default_processes_per_host`).
So a host here sees what its instance type has:

- **GPUs** (`--gpus`, the spec's `gpus`, `EmulatorSession(gpus=...)`):
  - `real`: the engine's own GPUs (NVIDIA's container runtime), each GPU host its type's count by
    device id, never one another host has, in host order; too few is an error before anything starts.
  - `share`: as `real`, but when the machine has fewer GPUs than the hosts need they are handed out
    round robin, so hosts share them.
  - `emulate`: no device at all, but an `nvidia-smi` (emulator/data/instance/nvidia-smi,
    emulator/planning/hooks.py) that
    answers as the type's GPUs would, so the toolkit and the launchers start the processes they
    start on the service; CUDA is not there (`torch.cuda.is_available()` stays False).
  - `none`: no GPU anywhere; scripts take their CPU path.
  - `auto` (the default): `real` when the engine has a GPU runtime and GPUs, else `none`.
  CPU instance types never get a GPU.
- **vCPUs** (`--cpus`): `instance` (the default) makes the toolkit's `multiprocessing.cpu_count()`
  answer the type's vCPUs in its own `train` process only (the start-up hook,
  emulator/data/startup/sitecustomize.py), so `SM_NUM_CPUS` is what the service gives while the
  script's own `os.cpu_count()` still counts this machine's cores; `machine` leaves it alone.

Pure: the machine comes in as a `Machine`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from emulator.jobspec import instance_types
from emulator.jobspec.hardware_modes import CpuMode, GpuMode

# The variables the emulated nvidia-smi and the hook read (set per host by the plan).
GPUS_VARIABLE = "HETERO_EMU_GPUS"
GPU_MODEL_VARIABLE = "HETERO_EMU_GPU_MODEL"
GPU_MEMORY_VARIABLE = "HETERO_EMU_GPU_MEMORY_MIB"
CPUS_VARIABLE = "HETERO_EMU_CPU_COUNT"

GIB = 1024**3


class GpuShortage(Exception):
    """More GPUs are needed than the machine has (and `share` was not asked for)."""

    def __init__(self, needed: int, present: int) -> None:
        super().__init__(f"the job's GPU hosts need {needed} GPUs; this machine has {present}")
        self.needed = needed
        self.present = present


@dataclass(frozen=True)
class Machine:
    """What the engine's machine has: cores, memory, and the ids of the GPUs its GPU runtime gives
    containers (`DeviceRequests` ids: indexes or UUIDs), empty without one."""

    cpus: int
    memory_bytes: int
    gpu_runtime: bool = False
    gpus: tuple[str, ...] = ()
    # Whether two hosts may be given one GPU (`--gpus share`): not on a swarm, which reserves each whole.
    can_share: bool = True
    # Why this engine gives no GPU, and what to set up for real GPUs on it: said with a refusal.
    no_gpu: str = "the Docker engine has no GPU runtime (NVIDIA's container toolkit)"
    gpu_hint: str = ("install NVIDIA's container toolkit and register its runtime with Docker "
                     "(`nvidia-ctk runtime configure --runtime=docker`, then restart dockerd); "
                     "or run with --gpus emulate or --gpus none")


@dataclass(frozen=True)
class Hardware:
    """A job's choice, once the machine is known: how GPUs and vCPUs are given, and which GPU ids each
    host gets (`real` and `share`: the engine's ids; `emulate`: made-up UUIDs)."""

    gpus: Literal["none", "emulate", "real", "share"] = "none"
    cpus: CpuMode = "instance"
    devices: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # What this machine cannot give the hosts (`cannot_give`), said once per job on the console; the
    # warnings are what a script may trip on (CUDA that is not there, GPUs shared).
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    def host_gpus(self, host: str) -> tuple[str, ...]:
        return self.devices.get(host, ())


NO_HARDWARE = Hardware(cpus="machine")


def gpu_count(instance_type: str) -> int:
    figures = instance_types.lookup(instance_type)
    return figures.gpus if figures is not None else 0


def resolve(gpus: GpuMode, cpus: CpuMode, job_name: str, hosts: Sequence[tuple[str, str]],
            machine: Machine) -> Hardware:
    """The job's `Hardware` for its (host, instance type) pairs in host order on `machine`.

    Raises GpuShortage when `real` needs more GPUs than the machine has, and ValueError when `real`
    or `share` is asked of a machine without a GPU runtime or GPUs."""
    warnings: list[str] = []
    wanted = [(host, gpu_count(kind)) for host, kind in hosts if gpu_count(kind)]
    if gpus == "auto":
        gpus = "real" if wanted and machine.gpu_runtime and machine.gpus else "none"
    if gpus in ("real", "share"):
        if gpus == "share" and not machine.can_share:
            raise ValueError("--gpus share: this engine cannot give one GPU to two hosts")
        if not machine.gpu_runtime:
            raise ValueError(machine.no_gpu)
        if not machine.gpus:
            raise ValueError("the Docker engine's GPU runtime finds no GPU on this machine")
        devices, shared = assign_devices(wanted, machine.gpus, share=gpus == "share")
        if shared:
            warnings.append(f"the GPU hosts need {sum(n for _, n in wanted)} GPUs and this machine has "
                         f"{len(machine.gpus)}: they share them round robin (--gpus share)")
        return Hardware(gpus, cpus, devices, warnings=tuple(warnings))
    if gpus == "emulate":
        devices = {host: emulated_uuids(job_name, host, count) for host, count in wanted}
        return Hardware("emulate", cpus, devices)
    return Hardware("none", cpus, {})


def assign_devices(wanted: Sequence[tuple[str, int]], present: Sequence[str],
                   share: bool) -> tuple[dict[str, tuple[str, ...]], bool]:
    """Each host its count of GPU ids, in host order, no id given twice; with `share`, when there are
    too few, the ids round robin (some hosts then share GPUs). Returns the ids per host and whether
    any is shared. Raises GpuShortage without `share` when there are too few."""
    needed = sum(count for _, count in wanted)
    if needed > len(present) and not share:
        raise GpuShortage(needed, len(present))
    devices: dict[str, tuple[str, ...]] = {}
    next_id = 0
    for host, count in wanted:
        ids = []
        for _ in range(count):
            ids.append(present[next_id % len(present)])
            next_id += 1
        # A host never gets one GPU twice, even when the ids wrap around.
        devices[host] = tuple(dict.fromkeys(ids))
    return devices, needed > len(present)


def emulated_uuids(job_name: str, host: str, count: int) -> tuple[str, ...]:
    """`count` GPU UUIDs in nvidia-smi's form (GPU-8-4-4-4-12 hex), the same for the same job and host."""
    uuids = []
    for index in range(count):
        digest = hashlib.sha256(f"{job_name}/{host}/{index}".encode()).hexdigest()
        uuids.append(f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}")
    return tuple(uuids)


def host_environment(hardware: Hardware, host: str, instance_type: str) -> dict[str, str]:
    """The variables a host gets for its hardware: the emulated GPUs' for nvidia-smi, and the
    instance's vCPUs for the hook."""
    figures = instance_types.lookup(instance_type)
    variables: dict[str, str] = {}
    if hardware.gpus == "emulate" and figures is not None and hardware.host_gpus(host):
        variables[GPUS_VARIABLE] = ",".join(hardware.host_gpus(host))
        variables[GPU_MODEL_VARIABLE] = figures.gpu_model or "NVIDIA GPU"
        variables[GPU_MEMORY_VARIABLE] = str(int(figures.gpu_memory_gib * 1024 // figures.gpus))
        # The service's GPU images set this (NVIDIA's CUDA base images do: every GPU of the instance);
        # CUDA_VISIBLE_DEVICES is left unset, as the service leaves it (docs/gpus.md).
        variables["NVIDIA_VISIBLE_DEVICES"] = "all"
    if hardware.cpus == "instance" and figures is not None:
        variables[CPUS_VARIABLE] = str(figures.vcpus)
    return variables


def uses_hook(hardware: Hardware, instance_type: str) -> bool:
    """Whether a host needs the start-up hook for its vCPU count (emulator/planning/hooks.py)."""
    return hardware.cpus == "instance" and instance_types.lookup(instance_type) is not None


def emulates_gpus(hardware: Hardware, host: str) -> bool:
    return hardware.gpus == "emulate" and bool(hardware.host_gpus(host))


def cannot_give(hardware: Hardware, hosts: Sequence[tuple[str, str]], machine: Machine,
                memory_limits: Mapping[str, int | None]) -> Hardware:
    """`hardware` with what the hosts' instance types have and this machine cannot give them, one
    line per kind, for the console and job.json: memory above the machine's own, vCPUs above its
    cores, a GPU type without a GPU (notes); GPUs without CUDA (a warning: a script may trip on it)."""
    lines, warnings = [], list(hardware.warnings)
    kinds = dict.fromkeys(kind for _, kind in hosts)
    big = [kind for kind in kinds if (memory_limits.get(kind) or 0) > machine.memory_bytes]
    if big:
        shown = ", ".join(f"{kind} {_gib(memory_limits[kind] or 0)}" for kind in big)
        lines.append(f"this machine cannot give the memory: {shown} GiB per host; it has {_gib(machine.memory_bytes)} "
                     "GiB for every host together (a host runs out of memory here before it would on the service)")
    many = [kind for kind in kinds
            if (figures := instance_types.lookup(kind)) is not None and figures.vcpus > machine.cpus]
    if many:
        told = "the toolkit's SM_NUM_CPUS says the type's count" if hardware.cpus == "instance" else \
            f"SM_NUM_CPUS says {machine.cpus} (--cpus machine)"
        shown = ", ".join(f"{kind} {instance_types.lookup(kind).vcpus}" for kind in many)  # type: ignore[union-attr]
        lines.append(f"this machine cannot give the vCPUs: {shown}; it has {machine.cpus} cores for every host "
                     f"together ({told})")
    gpu_kinds = [kind for kind in kinds if gpu_count(kind)]
    if gpu_kinds and hardware.gpus == "emulate":
        warnings.append("this machine cannot give CUDA: the GPUs of " + ", ".join(gpu_kinds) + " are emulated "
                     "(nvidia-smi and SM_NUM_GPUS show the type's GPUs, torch.cuda.is_available() is False): a "
                     "script that moves tensors to cuda fails here")
    elif gpu_kinds and hardware.gpus == "none":
        lines.append("this machine gives no GPU to " + ", ".join(gpu_kinds) + " (SM_NUM_GPUS is 0: scripts take their "
                     "CPU path, and "
                     "MPI and torchrun start 1 process per host where the service starts one per GPU; "
                     "--gpus emulate shows the type's GPUs through an emulated nvidia-smi, without CUDA)")
    return replace(hardware, notes=(*hardware.notes, *lines), warnings=tuple(warnings))


def _gib(size: int) -> str:
    return f"{size / GIB:g}" if size % GIB == 0 else f"{size / GIB:.1f}"
