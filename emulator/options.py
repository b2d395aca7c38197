"""How a job is run: the choices every front end makes for a run, as one frozen value.

The CLI builds a `RunOptions` from its flags, the Python `Job`, the pytest plugin and the SDK session's
driver from their arguments, and all of them hand it to `emulator.api.run` (which hands it to
`emulator.run.runner.run_job`) by value. What a run talks to rather than what it is asked to do (the
engine, the reporter that prints, the clock, the image builders) is passed beside it, not in it: a
`RunOptions` is plain data that can be compared, printed and reused for another run
(`dataclasses.replace(options, keep=True)` makes a changed copy).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from emulator.jobspec.faults import Injection
from emulator.jobspec.hardware_modes import CpuMode, GpuMode
from emulator.planning.debug_host import DebugTarget
from emulator.planning.plan import MemoryLimit

# The service's: "SageMaker sends the algorithm the SIGTERM signal, which delays job termination for
# 120 seconds" when a job is stopped or reaches MaxRuntimeInSeconds (CreateTrainingJob's
# StoppingCondition, https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_StoppingCondition.html).
# A script that exits on SIGTERM (Python's default) ends at once; only one that saves its work first
# uses the time. Configurable with --grace.
DEFAULT_GRACE = 120.0


@dataclass(frozen=True)
class RunOptions:
    """The options of one run; every field's default is what `hetero-emu run` does without the flag."""

    host_order: str = "spec"
    """"spec": the hosts are numbered algo-1..N in the spec's group order; "shuffled": in an order
    drawn from `seed` (`--host-order`), to catch a script that assumes which group comes first."""

    seed: int | None = None
    """The seed of a shuffled order (`--seed`), to replay one; None draws a new seed, printed and
    stored in job.json. A seed without host_order "shuffled" is a UsageError."""

    keep: bool = False
    """Leave every job's containers and network in place, stopped, for `hetero-emu exec` and
    `docker cp`, until `hetero-emu clean` (`--keep`). Default: removed when the run ends."""

    keep_on_failure: bool = False
    """As `keep`, but only for a job that ends Failed because a host failed (`--keep-on-failure`);
    a Stopped job, or one whose engine stopped answering, is still removed."""

    grace: float = DEFAULT_GRACE
    """Seconds a host is given between SIGTERM and SIGKILL when the job stops it (`--grace`):
    another host failed, max_run ran out, Ctrl-C or `hetero-emu stop`."""

    build_image: bool = True
    """Build the default or a framework image when the engine lacks it; False (`--no-build`): a
    missing image is ImageMissing (exit code 3) and nothing is built."""

    memory: MemoryLimit = "instance"
    """Each container's memory limit (`--memory`): "instance", the memory of its instance type;
    "none", no limit; or a number of bytes for every host."""

    gpus: GpuMode | None = None
    """How hosts of GPU instance types get GPUs (`--gpus`; docs/gpus.md): "real" this machine's,
    each host its own; "share" the same, round robin when there are too few; "emulate" the type's
    count and model through an emulated nvidia-smi, without CUDA; "none"; "auto" real where the
    engine has GPUs, else none. None: the spec's `gpus`, else "auto"."""

    cpus: CpuMode = "instance"
    """What the training toolkit counts as the host's CPUs (`--cpus`): "instance", its type's vCPUs
    (SM_NUM_CPUS as on the service; the script still sees this machine's cores); "machine", this
    machine's cores."""

    debug: DebugTarget | None = None
    """The host whose entry point runs under debugpy, published on 127.0.0.1 (`--debug-host`,
    `--debug-port`, `--debug-wait`); None: no debugger."""

    created: datetime | None = None
    """The job's CreationTime when it was asked for before the run began (the SDK session's
    CreateTrainingJob); None: the run's start."""

    inject: tuple[Injection, ...] | None = None
    """The spot interruptions and platform errors the run causes on purpose (`--interrupt-at`,
    `--inject`; emulator/jobspec/faults.py), each when the hosts have run that long in all. None: the
    spec's `inject`."""

    images: Mapping[str, str] | None = None
    """ECR image names to the local images that stand in for them (`emulator.aws.ecr_images`):
    an image the engine has under the name wins, then this table, then a framework image. None:
    the built-in table, DEFAULT_IMAGE_MAP."""
