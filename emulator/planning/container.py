"""One host's container, described once for every engine.

The planner (`emulator.planning.plan`) builds a `ContainerSpec` per host; each engine translates it once:
`emulator.backend.docker.container_options` into docker-py's arguments, `emulator.planning.compose.service`
into a compose service. tests/unit/test_container.py checks that both translations use every field,
so a field added here cannot be forgotten by one engine.

Pure data: no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace

from emulator.jobspec.sizes import MIN_SHM

MIB = 1024**2
GIB = 1024**3

# /dev/shm when the host has no memory limit to take half of (see `default_shm_bytes`).
FALLBACK_SHM = 1 * GIB

# -1 in a `Ulimit`: no limit.
UNLIMITED = -1

# How an engine is asked for GPUs by id: NVIDIA's device driver and the `gpu` capability (what
# `docker run --gpus '"device=0,1"'` sends), with `compute` (CUDA) and `utility` (nvidia-smi, which
# the training toolkit counts GPUs with), the driver capabilities NVIDIA's CUDA images ask for.
GPU_DRIVER = "nvidia"
GPU_CAPABILITIES = ("gpu", "compute", "utility")


@dataclass(frozen=True)
class Mount:
    """A bind mount: an absolute host path onto a container path."""

    source: str
    target: str
    read_only: bool


@dataclass(frozen=True)
class Ulimit:
    """A resource limit (`ulimit`); -1 is unlimited."""

    name: str
    soft: int
    hard: int


@dataclass(frozen=True)
class PortBinding:
    """A container port published on one address of this machine (`docker run -p IP:PORT:CPORT`)."""

    host_ip: str
    host_port: int
    container_port: int

    def spec(self) -> str:
        """`ip:port:container_port`, the form both `docker run -p` and compose's `ports` take."""
        return f"{self.host_ip}:{self.host_port}:{self.container_port}"


@dataclass(frozen=True)
class Device:
    """A host device node given to the container (`/dev/fuse`, say; GPUs are `ContainerSpec.gpus`)."""

    source: str
    target: str
    permissions: str = "rwm"

    def spec(self) -> str:
        """`source:target:permissions`, the form both `docker run --device` and compose take."""
        return f"{self.source}:{self.target}:{self.permissions}"


# What MPI and NCCL in a framework container need: locked memory unlimited (their transports pin
# buffers) and a 64 MiB stack, the `--ulimit memlock=-1 --ulimit stack=67108864` NVIDIA's framework
# containers are documented to run with (https://docs.nvidia.com/deeplearning/frameworks/user-guide/index.html).
MPI_ULIMITS = (Ulimit("memlock", UNLIMITED, UNLIMITED), Ulimit("stack", 64 * MIB, 64 * MIB))


@dataclass(frozen=True)
class ContainerSpec:
    """Everything an engine needs to create one host's container, apart from the job's network."""

    image: str
    command: tuple[str, ...]
    # None: the image's own ENTRYPOINT.
    entrypoint: tuple[str, ...] | None
    name: str
    hostname: str
    # Names the host answers to on the job's network.
    aliases: tuple[str, ...]
    # The other hosts, each written into /etc/hosts with its fixed address (the engine knows the
    # addresses: Docker picks the subnet at run time, compose derives one from the job name).
    extra_hosts: tuple[str, ...]
    # A tiny init as PID 1 forwards SIGTERM to `train`, so stopping a job takes a moment, not the
    # whole grace period (PID 1 ignores signals it installs no handler for).
    init: bool
    labels: Mapping[str, str]
    environment: Mapping[str, str] = field(repr=False)  # secrets: see emulator/planning/secrets.py
    mounts: tuple[Mount, ...] = ()
    # The memory limit in bytes, swap included (an instance has none); None = no limit.
    memory_bytes: int | None = None
    # The size of /dev/shm (a tmpfs) in bytes.
    shm_bytes: int = FALLBACK_SHM
    ulimits: tuple[Ulimit, ...] = MPI_ULIMITS
    devices: tuple[Device, ...] = ()
    # The GPUs the engine's GPU runtime gives the host, by device id (an index or a UUID of this
    # machine's GPUs: Docker's DeviceRequests, compose's `deploy.resources.reservations.devices`);
    # empty: none (emulator/planning/hardware.py decides which host gets which).
    gpus: tuple[str, ...] = ()
    # Ports published on this machine: debugpy's on the host `--debug-host` names (emulator.planning.debug_host).
    ports: tuple[PortBinding, ...] = ()
    # Where the host may run, as swarm placement constraints (`node.labels.role==gpu`): its instance
    # group's `placement`. One machine has nowhere else to put it.
    placement: tuple[str, ...] = ()
    # The containers on the job's network (by host name) whose addresses are its DNS servers: the
    # job's AWS gateway (emulator/run/job_aws.py). Docker's embedded resolver still answers the hosts'
    # names itself and asks these for every other name.
    dns: tuple[str, ...] = ()

    def without_ulimits(self, refused: Collection[Ulimit]) -> ContainerSpec:
        """This container without the ulimits an engine refuses (emulator/backend/ulimits.py)."""
        return replace(self, ulimits=tuple(u for u in self.ulimits if u not in refused)) if refused else self


def default_shm_bytes(memory_bytes: int | None) -> int:
    """/dev/shm's size when the job gives no `shm_size`: half the host's memory limit, else 1 GiB.

    Half, because that is the size Linux gives a tmpfs such as an instance's own /dev/shm by default
    (https://docs.kernel.org/filesystems/tmpfs.html: "The default is half of your physical RAM");
    Docker's 64 MiB is too little for several processes sharing tensors (DataLoader workers, NCCL and
    gloo, MPI's shared-memory transport). A tmpfs takes memory only as files are written, and those
    pages count against the container's memory limit, so a large figure reserves nothing. A host
    without a limit gets 1 GiB: room for a few workers' batches, without promising the machine.
    """
    if memory_bytes is None:
        return FALLBACK_SHM
    return max(MIN_SHM, memory_bytes // 2)
