"""The plan: a pure, deterministic function from a validated spec to what the backend must create.

No I/O, no clock, no randomness except the seed passed in. The plan holds every host's name, group,
mounts, environment, labels and the exact bytes of its /opt/ml/input/config files, so it can be
printed (`render`), diffed, golden-tested and executed by any backend.
"""

from __future__ import annotations

import ipaddress
import os
import random
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from emulator.jobspec import JobSpec, TrainingInput, hyperparameters, instance_types
from emulator.jobspec.model import INPUT_DATA
from emulator.jobspec.placement import constraints
from emulator.jobspec.sizes import parse_size
from emulator.planning import contract, debug_host, hooks, sm_debugger, wheelhouse_mount
from emulator.planning import hardware as hardware_hooks
from emulator.planning.container import ContainerSpec, Mount, PortBinding, default_shm_bytes
from emulator.planning.debug_host import DebugTarget
from emulator.planning.hardware import NO_HARDWARE, Hardware
from emulator.planning.secrets import mask_environment

LABEL_PREFIX = "io.hetero-emu"
LABEL_MANAGED = f"{LABEL_PREFIX}.managed"
LABEL_JOB = f"{LABEL_PREFIX}.job"
LABEL_HOST = f"{LABEL_PREFIX}.host"
LABEL_GROUP = f"{LABEL_PREFIX}.group"
LABEL_INSTANCE_TYPE = f"{LABEL_PREFIX}.instance-type"
LABEL_JOB_DIR = f"{LABEL_PREFIX}.job-dir"
# Added by the Docker backend, not the plan (which stays pure): the driver process that made it.
LABEL_DRIVER = f"{LABEL_PREFIX}.driver"

HOST_ORDERS = ("spec", "shuffled")
OPT_ML = "/opt/ml"
CHECKPOINTS = "/opt/ml/checkpoints"
# The per-job SSH keys of an MPI distribution (emulator/planning/sshkeys.py): in the job folder, and where
# root's ssh, sshd and the toolkit's paramiko look for them on the distribution's hosts.
SSH_FOLDER = "ssh"
SSH_TARGET = "/root/.ssh"
# A warm pool's persistent cache on each host, and where its folders are in the job folder
# (https://docs.aws.amazon.com/sagemaker/latest/dg/train-warm-pools.html, Using persistent cache).
WARM_POOL_CACHE = "/opt/ml/sagemaker/warmpoolcache"
WARM_POOL_FOLDER = "warm-pool"
# A TensorBoard local path outside /opt/ml: the host folder mounted there.
TENSORBOARD_FOLDER = "tensorboard"

__all__ = ["Mount"]  # re-exported: the plan's mounts are `emulator.planning.container.Mount`s

@dataclass(frozen=True)
class GroupPlan:
    name: str
    instance_type: str
    hosts: tuple[str, ...]


@dataclass(frozen=True)
class HostPlan:
    """Everything one container gets."""

    name: str
    group: str
    instance_type: str
    host_dir: str
    channels: tuple[str, ...]
    # channel -> files of that channel this host gets (S3 keys: relative to the channel's source,
    # links followed), staged as hard links to the files they name in a folder of their own
    # (`share_dir`) and mounted read-only there: the share of a ShardedByS3Key channel, the one file
    # of a single-file channel (so the channel's folder is read-only too), or every file of a folder
    # whose symlinks leave it (`TrainingInput.links_out`: a plain bind mount would show them dangling)
    # or that the job writes into while it runs (`TrainingInput.snapshot`: a mount would show it).
    shards: Mapping[str, tuple[str, ...]]
    # path relative to the host's /opt/ml -> file content
    files: Mapping[str, str]
    # Pipe channel -> the files (keys, in order) streamed into its FIFOs on this host: the same list
    # File mode would stage (a ShardedByS3Key channel's share). Neither mounted nor staged:
    # `emulator.run.pipes` feeds them at /opt/ml/input/data/<channel>_<epoch>.
    pipes: Mapping[str, tuple[str, ...]]
    # The container itself, for any engine: image, mounts, environment, limits...
    container: ContainerSpec


@dataclass(frozen=True)
class JobAws:
    """AWS inside the job (emulator/run/job_aws.py): the gateway's container on the job's network, the
    folder of the files it and the hosts get, and the folder of the endpoint's Unix socket."""

    gateway: HostPlan
    files_dir: str
    socket_dir: str


@dataclass(frozen=True)
class Plan:
    job_name: str
    image: str
    network: str
    job_dir: str
    host_order: str
    seed: int | None
    groups: tuple[GroupPlan, ...]
    hosts: tuple[HostPlan, ...]
    entrypoint: tuple[str, ...] | None
    command: tuple[str, ...]
    max_run: int
    network_isolation: bool
    labels: Mapping[str, str]
    # The host folder of the requirements.txt's wheels (emulator.planning.wheelhouse_mount), mounted read-only on
    # every host; None when the toolkit installs no requirements.txt. The runner builds it first.
    wheelhouse: str | None
    spec: JobSpec = field(compare=False, repr=False)
    # The job's SSH key folder (`SSH_FOLDER`), which staging fills and the hosts of an MPI
    # distribution mount at `SSH_TARGET`; None when the job runs no MPI.
    ssh_dir: str | None = None
    # The host whose script runs under debugpy (`run --debug-host`), None without.
    debug: DebugTarget | None = None
    # How the hosts get their instance types' GPUs and vCPUs on this machine (emulator/planning/hardware.py).
    hardware: Hardware = NO_HARDWARE
    # The folder staging fills with the start-up hook and the emulated nvidia-smi (emulator/planning/hooks.py),
    # which hosts mount; None when no host needs them.
    hook_dir: str | None = None
    # The job's AWS (emulator/run/job_aws.py): None when the job is kept from AWS (network isolation) or
    # the engine has no gateway for it.
    aws: JobAws | None = None

    def host(self, name: str) -> HostPlan:
        return next(h for h in self.hosts if h.name == name)

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON-ready data (the spec is left out: it is the input, not the plan).

        For people to read (plan.json): secret environment values are masked (emulator.planning.secrets);
        the plan object itself keeps the real values, which the containers need."""
        data = asdict(self)
        data.pop("spec")
        for host in data["hosts"]:
            host["container"]["environment"] = mask_environment(host["container"]["environment"])
        return _jsonable(data)  # type: ignore[no-any-return]


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


# --------------------------------------------------------------------------------------------------


def job_name_from(spec: JobSpec, now: datetime) -> str:
    """The SDK's `name_from_base`: base name + '-%Y-%m-%d-%H-%M-%S-%f'[:-3], 63 chars at most."""
    if spec.job_name:
        return spec.job_name
    stamp = now.strftime("%Y-%m-%d-%H-%M-%S-%f")[:-3]
    base = spec.base_job_name[: 63 - len(stamp) - 1]
    return f"{base}-{stamp}"


def assign_hosts(spec: JobSpec, host_order: str = "spec", seed: int | None = None) -> tuple[GroupPlan, ...]:
    """Number hosts algo-1..N across groups and give each group its hosts.

    "spec": contiguous in spec order (group 1 gets algo-1..k). "shuffled": a seeded permutation, so a
    group may get ["algo-3", "algo-1"], as the real service may do; scripts that assume algo-1 is in
    the first group fail here on a laptop rather than on a cluster.
    """
    if host_order not in HOST_ORDERS:
        raise ValueError(f"host_order must be one of {HOST_ORDERS}, got {host_order!r}")
    names = host_names(spec.host_count)
    if host_order == "shuffled":
        random.Random(seed).shuffle(names)
    groups = []
    start = 0
    for group in spec.instance_groups:
        hosts = tuple(names[start : start + group.instance_count])
        start += group.instance_count
        groups.append(GroupPlan(group.instance_group_name, group.instance_type, hosts))
    return tuple(groups)


def host_names(count: int) -> list[str]:
    """algo-1..algo-N: the service's host names, numbered across groups, with no random suffix."""
    return [f"algo-{i}" for i in range(1, count + 1)]


def shard(files: tuple[str, ...], hosts: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """ShardedByS3Key: each host gets a disjoint share of the (sorted) files; together all of them.

    Round-robin over the sorted keys, as S3 key sharding spreads objects evenly across the hosts that
    receive the channel; a host may get none when there are fewer files than hosts.
    """
    return {host: files[i :: len(hosts)] for i, host in enumerate(hosts)}


def container_name(job_name: str, host: str) -> str:
    return f"{job_name}-{host}"


def network_name(job_name: str) -> str:
    return f"hetero-emu-{job_name}"


@dataclass(frozen=True)
class HostLayout:
    """One host's place in the cluster, laid out before the contract is asked for its files."""

    name: str
    group: GroupPlan
    channels: tuple[str, ...]
    shards: Mapping[str, tuple[str, ...]]  # as HostPlan.shards
    pipes: Mapping[str, tuple[str, ...]]  # as HostPlan.pipes


def lay_out_hosts(spec: JobSpec, groups: tuple[GroupPlan, ...]) -> tuple[HostLayout, ...]:
    """Every host of `groups` in number order (algo-2 before algo-10), with its group, the channels
    it receives and, for each staged channel, the files it gets."""
    # Which hosts receive each channel, and each sharded channel's share per host.
    channel_hosts: dict[str, tuple[str, ...]] = {}
    for name, channel in spec.inputs.items():
        wanted = channel.instance_groups or tuple(g.name for g in groups)
        channel_hosts[name] = tuple(h for g in groups if g.name in wanted for h in g.hosts)
    shares = {
        name: shard(channel.files, channel_hosts[name])
        for name, channel in spec.inputs.items()
        if channel.distribution == "ShardedByS3Key"
    }
    group_of = {host: group for group in groups for host in group.hosts}
    layout = []
    for host in host_names(spec.host_count):
        if host not in group_of:
            continue
        channels = tuple(name for name in spec.inputs if host in channel_hosts[name])
        files = {name: shares[name][host] if name in shares else spec.inputs[name].files for name in channels}
        piped = {name for name in channels if spec.channel_mode(name) == "Pipe"}
        host_shards = {
            name: files[name]
            for name in channels
            if name not in piped and (name in shares or spec.inputs[name].single_file or spec.inputs[name].links_out
                                      or spec.inputs[name].copied or spec.inputs[name].key_prefix
                                      or spec.inputs[name].snapshot)
        }
        host_pipes = {name: files[name] for name in channels if name in piped}
        layout.append(HostLayout(host, group_of[host], channels, host_shards, host_pipes))
    return tuple(layout)


def make_plan(
    spec: JobSpec,
    job_name: str,
    host_order: str = "spec",
    seed: int | None = None,
    job_dir: Path | None = None,
    memory: MemoryLimit = "instance",
    wheel_cache: Path | None = None,
    debug: DebugTarget | None = None,
    hardware: Hardware = NO_HARDWARE,
) -> Plan:
    """Spec -> plan. Pure: the same arguments always give an equal plan.

    `job_dir` defaults to `<output_path>/<job_name>`; `render -o DIR` passes DIR. `memory` is each
    host's memory limit: its instance type's memory (default), "none", or a number of bytes.
    `wheel_cache` is where the wheelhouse of a requirements.txt goes (default: the cache folder), one
    per (requirements, image). `debug` names the host
    whose script runs under debugpy: only its container gets the hook, its variables and the port.
    `hardware` is how each host gets its type's GPUs and vCPUs (`emulator.planning.hardware.resolve`, which
    knows the machine; default: no GPU, this machine's cores).

    The hosts are laid out first (names, groups, order, channels, shares); then each host's container
    is built (`_host_container`, its mounts `_host_mounts`) from what the job shares (`_JobParts`), and
    the contract is asked once per host for that host's /opt/ml files.
    """
    groups = assign_hosts(spec, host_order, seed)
    layout = lay_out_hosts(spec, groups)
    cluster = [(g.name, g.instance_type, g.hosts) for g in groups]
    job_dir = job_dir if job_dir is not None else spec.output_path / job_name
    wheels = None
    if spec.requirements is not None:
        root = wheel_cache if wheel_cache is not None else wheelhouse_mount.cache_root()
        wheels = str(wheelhouse_mount.location(spec.requirements, root, spec.image_uri))
    entrypoint, command = launch_command(spec)
    ssh_groups = mpi_groups(spec)
    ssh_dir = job_dir / SSH_FOLDER if ssh_groups else None
    job = _JobParts(spec, job_name, job_dir, {LABEL_MANAGED: "true", LABEL_JOB: job_name, LABEL_JOB_DIR: str(job_dir)},
                    job_environment(spec, job_name), entrypoint, command, wheels,
                    ssh_dir, ssh_groups, memory, debug, hardware)
    hosts = tuple(
        HostPlan(
            name=slot.name,
            group=slot.group.name,
            instance_type=slot.group.instance_type,
            host_dir=str(job_dir / "hosts" / slot.name),
            channels=slot.channels,
            shards=slot.shards,
            pipes=slot.pipes,
            files=contract.host_files(spec, job_name, cluster, slot.name, slot.channels),
            container=_host_container(job, slot, layout),
        )
        for slot in layout
    )
    return Plan(
        job_name=job_name,
        image=spec.image_uri,
        network=network_name(job_name),
        job_dir=str(job_dir),
        host_order=host_order,
        seed=seed if host_order == "shuffled" else None,
        groups=groups,
        hosts=hosts,
        entrypoint=entrypoint,
        command=command,
        max_run=spec.max_run,
        network_isolation=spec.enable_network_isolation,
        labels=job.labels,
        wheelhouse=wheels,
        spec=spec,
        ssh_dir=str(ssh_dir) if ssh_dir is not None else None,
        debug=debug,
        hardware=hardware,
        hook_dir=str(job_dir / hooks.FOLDER) if any(_hook_mounts(job, slot) for slot in layout) else None,
    )


def job_environment(spec: JobSpec, job_name: str) -> dict[str, str]:
    """The variables every host gets: pip's for the wheelhouse, the spec's, then the service's own."""
    return {
        # Before the spec's own variables, so a spec that sets PIP_* itself keeps its values.
        **wheelhouse_mount.environment(spec.requirements),
        **spec.environment,
        "TRAINING_JOB_NAME": job_name,
        "TRAINING_JOB_ARN": contract.training_job_arn(job_name, spec.region),
        "AWS_REGION": spec.region,
        "AWS_DEFAULT_REGION": spec.region,
    }


def launch_command(spec: JobSpec) -> tuple[tuple[str, ...] | None, tuple[str, ...]]:
    """(entrypoint, command) every host's container starts with: the spec's container_entry_point and
    container_arguments, else the image's own entrypoint with the single argument "train"."""
    if spec.container_entry_point is not None:
        return spec.container_entry_point, spec.container_arguments or ()
    # The service starts the image with the single argument "train".
    # https://docs.aws.amazon.com/sagemaker/latest/dg/your-algorithms-training-algo-dockerfile.html
    return None, spec.container_arguments or ("train",)


@dataclass(frozen=True)
class _JobParts:
    """What `make_plan` works out once for the job and every host's container shares."""

    spec: JobSpec
    job_name: str
    job_dir: Path
    labels: Mapping[str, str]
    environment: dict[str, str]
    entrypoint: tuple[str, ...] | None
    command: tuple[str, ...]
    wheels: str | None
    ssh_dir: Path | None
    ssh_groups: tuple[str, ...]
    memory: MemoryLimit
    debug: DebugTarget | None
    hardware: Hardware


def _host_mounts(job: _JobParts, slot: HostLayout) -> list[Mount]:
    """One host's mounts: its /opt/ml, the channels, the wheelhouse and the MPI keys."""
    spec, host_dir = job.spec, job.job_dir / "hosts" / slot.name
    # /opt/ml/input/data itself is read-only too, not only each channel below it, so a script
    # cannot add a file or folder beside the channels either (docs/outputs.md, "Your data and the
    # job folder": "writing, renaming, deleting or adding a file or folder anywhere under
    # /opt/ml/input/data fails with EROFS"); the
    # toolkit only reads there. The staged folder already holds an empty mount point per
    # channel, and the engine mounts parents first (moby daemon/volumes.go sortMounts orders
    # by destination depth), so each channel is mounted onto the read-only parent.
    mounts = [Mount(str(host_dir), OPT_ML, read_only=False),
              Mount(str(host_dir / "input" / "data"), INPUT_DATA, read_only=True)]
    if spec.checkpoint_local_path != CHECKPOINTS:
        mounts.append(Mount(str(host_dir / "checkpoints"), spec.checkpoint_local_path, read_only=False))
    board = tensorboard_folder(spec)
    if board == TENSORBOARD_FOLDER:  # a local path outside /opt/ml
        mounts.append(Mount(str(host_dir / board), spec.tensorboard_local_path, read_only=False))
    for debugger_folder in sm_debugger.mounted(spec):  # a Debugger local path outside /opt/ml
        mounts.append(Mount(str(host_dir / debugger_folder.folder), debugger_folder.local_path, read_only=False))
    for name in slot.channels:
        if name in slot.pipes:
            continue  # its FIFOs are made in the host's input/data folder, mounted above
        channel = spec.inputs[name]
        source = share_dir(str(job.job_dir), name, channel, slot.name) if name in slot.shards else channel.source
        mounts.append(Mount(str(source), f"{INPUT_DATA}/{name}", read_only=not channel.copied))
    if job.wheels is not None:
        mounts.append(Mount(job.wheels, wheelhouse_mount.CONTAINER_PATH, read_only=True))
    if job.ssh_dir is not None and slot.group.name in job.ssh_groups:
        # Read-only: a script cannot swap the keys that let every distribution host log into it.
        mounts.append(Mount(str(job.ssh_dir), SSH_TARGET, read_only=True))
    if spec.keep_alive_period_in_seconds > 0:
        # The warm pool's persistent cache, kept for a later job that reuses the pool (emulator/run/warm_pools.py).
        mounts.append(Mount(str(job.job_dir / WARM_POOL_FOLDER / slot.name), WARM_POOL_CACHE, read_only=False))
    return mounts


def _host_container(job: _JobParts, slot: HostLayout, layout: Sequence[HostLayout]) -> ContainerSpec:
    """One host's container: the job's image and command, the host's names, mounts and limits, and
    the debugger's hook, variables and port on the debugged host."""
    spec, host, group = job.spec, slot.name, slot.group
    mounts = [*_host_mounts(job, slot), *_hook_mounts(job, slot)]
    host_environment: Mapping[str, str] = _hardware_environment(job, slot)
    ports: tuple[PortBinding, ...] = ()
    if job.debug is not None and job.debug.host == host:
        host_environment = debug_host.host_environment(spec, job.debug, dict(host_environment))
        ports = (debug_host.published_port(job.debug),)
    memory_bytes = memory_limit(job.memory, group.instance_type)
    return ContainerSpec(
        image=spec.image_uri,
        command=job.command,
        entrypoint=job.entrypoint,
        name=container_name(job.job_name, host),
        hostname=host,
        aliases=(host,),
        extra_hosts=tuple(other.name for other in layout if other.name != host),
        init=True,
        labels={**job.labels, LABEL_HOST: host, LABEL_GROUP: group.name, LABEL_INSTANCE_TYPE: group.instance_type},
        environment=host_environment,
        mounts=tuple(mounts),
        memory_bytes=memory_bytes,
        shm_bytes=spec.shm_size if spec.shm_size is not None else default_shm_bytes(memory_bytes),
        ports=ports,
        placement=constraints(spec.group(group.name).placement),
        gpus=job.hardware.host_gpus(host) if job.hardware.gpus in ("real", "share") else (),
    )


def _hook_mounts(job: _JobParts, slot: HostLayout) -> list[Mount]:
    """The staged hook files a host mounts (emulator/planning/hooks.py): the start-up hook's folder on the
    debugged host and where the toolkit's vCPU count is the type's, and the emulated nvidia-smi where
    NVIDIA's runtime would put the real one."""
    folder = job.job_dir / hooks.FOLDER
    mounts = []
    debugged = job.debug is not None and job.debug.host == slot.name
    if debugged or hardware_hooks.uses_hook(job.hardware, slot.group.instance_type):
        mounts.append(Mount(str(folder), hooks.TARGET, read_only=True))
    if hardware_hooks.emulates_gpus(job.hardware, slot.name):
        mounts.append(Mount(str(folder / "nvidia-smi"), hooks.NVIDIA_SMI_TARGET, read_only=True))
    return mounts


def _hardware_environment(job: _JobParts, slot: HostLayout) -> dict[str, str]:
    """The job's variables with the host's hardware ones; the start-up hook first on PYTHONPATH for
    the toolkit's vCPU count."""
    environment = {**job.environment,
                   **hardware_hooks.host_environment(job.hardware, slot.name, slot.group.instance_type)}
    if hardware_hooks.uses_hook(job.hardware, slot.group.instance_type):
        return hooks.on_pythonpath(environment)
    return environment


def mpi_hosts(plan: Plan) -> list[str]:
    """The hosts `mpirun` links, the first being where the toolkit runs it (the distribution's first
    host: sagemaker_training/environment.py `master_hostname`); empty without an MPI distribution."""
    return [h for g in plan.groups if g.name in mpi_groups(plan.spec) for h in g.hosts]


def mpi_groups(spec: JobSpec) -> tuple[str, ...]:
    """The groups whose hosts the toolkit links with `mpirun` over SSH: the distribution's instance
    groups (every group when it names none), when the distribution runs over MPI; else none."""
    if spec.distribution is None or not hyperparameters.launches_over_mpi(spec.distribution):
        return ()
    return spec.distribution.instance_groups or tuple(g.instance_group_name for g in spec.instance_groups)


MemoryLimit = int | Literal["instance", "none"]
GIB = 1024**3
# Below this a Python interpreter and the toolkit cannot even start: a typo such as "512" (bytes)
# would only give a confusing OOM, so parse_memory refuses it.
MIN_MEMORY = 6 * 1024**2


def memory_limit(memory: MemoryLimit, instance_type: str) -> int | None:
    """A host's memory limit in bytes. By default the instance type's memory, so that a script that
    would run out of memory on the real instance is OOM-killed here too (the host machine's own
    memory still bounds everything: a 61 GiB limit on a 24 GiB machine limits nothing)."""
    if memory == "none":
        return None
    if memory == "instance":
        figures = instance_types.lookup(instance_type)
        return int(figures.memory_gib * GIB) if figures else None
    return memory


def parse_memory(text: str) -> MemoryLimit:
    """`--memory` values: "instance", "none", or a size as docker takes it (512m, 2g, 1.5g)."""
    value = text.strip().lower()
    if value in ("instance", "none"):
        return value  # type: ignore[return-value]
    try:
        size = parse_size(text)
    except ValueError as err:
        raise ValueError(str(err).replace("512m or 2g", "512m, 2g, 'instance' or 'none'")) from None
    if size < MIN_MEMORY:
        raise ValueError(f"{text!r} is less than {MIN_MEMORY // 1024**2} MiB: too little to start a host")
    return size


def network_members(plan: Plan) -> tuple[HostPlan, ...]:
    """Every container on the job's network that gets a fixed address: the hosts, then the job's AWS
    gateway if it has one."""
    return plan.hosts + ((plan.aws.gateway,) if plan.aws is not None else ())


def host_addresses(subnet: str, gateway: str | None, hosts: Sequence[str]) -> dict[str, str]:
    """The first free addresses of the subnet (skipping the gateway), one per host, in order.

    Every host gets a fixed address and an /etc/hosts entry for every other host, because the
    engine's DNS forgets a container once it exits while the toolkit keeps resolving every algo-N.
    """
    free = (str(a) for a in ipaddress.ip_network(subnet).hosts() if str(a) != gateway)
    return {host: next(free) for host in hosts}


def tensorboard_folder(spec: JobSpec) -> str | None:
    """Where a host's TensorBoard files are in its folder (`hosts/algo-N/...`), synced to the
    TensorBoard output path while it runs; None without a TensorBoardOutputConfig. A local path
    under /opt/ml is that folder of the host's /opt/ml; one outside it is mounted from
    TENSORBOARD_FOLDER."""
    if spec.tensorboard_output_path is None:
        return None
    local = os.path.normpath(spec.tensorboard_local_path)
    return local[len(OPT_ML) + 1:] if local.startswith(OPT_ML + "/") else TENSORBOARD_FOLDER


def staging_dir(job_dir: str, channel: str, host: str) -> Path:
    """Where a host's share of a sharded channel is staged (hard links), inside the job's folder."""
    return Path(job_dir) / ".staging" / channel / host


# The folder name of a share every host of a FullyReplicated channel mounts (host names are algo-N).
EVERY_HOST = "all-hosts"


def share_dir(job_dir: str, name: str, channel: TrainingInput, host: str) -> Path:
    """Where `host` finds a staged channel: its own share of a ShardedByS3Key channel or its own copy
    of a copied one (`TrainingInput.copied`), or the one share all hosts of a FullyReplicated channel
    mount (staged once, however many hosts)."""
    own = channel.distribution == "ShardedByS3Key" or channel.copied
    return staging_dir(job_dir, name, host if own else EVERY_HOST)


def summary(plan: Plan) -> str:
    """A human-readable summary of the plan."""
    lines = [
        f"job {plan.job_name}",
        f"  image    {plan.image}",
        f"  network  {plan.network}{' (isolated)' if plan.network_isolation else ''}",
        f"  command  {' '.join((*(plan.entrypoint or ()), *plan.command))}",
        f"  output   {plan.job_dir}",
        f"  hosts    {len(plan.hosts)} (order: {plan.host_order}"
        + (f", seed {plan.seed})" if plan.seed is not None else ")"),
    ]
    if plan.wheelhouse is not None:
        variables = " ".join(f"{k}={v}" for k, v in wheelhouse_mount.environment(plan.spec.requirements).items())
        lines.append(f"  wheels   requirements.txt: {plan.wheelhouse} -> {wheelhouse_mount.CONTAINER_PATH} "
                     f"(read-only), {variables}")
    if plan.debug is not None:
        lines.append(f"  debug    {plan.debug.host}: its entry point under debugpy, port {debug_host.DEBUGPY_PORT} "
                     f"published on {debug_host.LOCALHOST}:{plan.debug.port}"
                     + (", waits for the debugger to attach" if plan.debug.wait else ""))
    if plan.hardware.devices:
        kind = {"emulate": "emulated GPUs (no CUDA)", "real": "GPUs by device id", "share": "GPUs by device id, shared"}
        lines.append(f"  gpus     {kind.get(plan.hardware.gpus, plan.hardware.gpus)}: " + "; ".join(
            f"{host} {len(ids)}" + (f" ({','.join(ids)})" if plan.hardware.gpus != "emulate" else "")
            for host, ids in plan.hardware.devices.items()))
    for group in plan.groups:
        lines.append(f"  group {group.name} ({group.instance_type}): {', '.join(group.hosts) or '-'}")
    for host in plan.hosts:
        lines.append(f"  {host.name:<8} {host.group:<20} channels: {', '.join(host.channels) or '-'}")
        for name, files in host.shards.items():
            if name in plan.spec.inputs and plan.spec.inputs[name].distribution == "ShardedByS3Key":
                lines.append(f"           shard {name}: {len(files)} file(s)")
        for name, files in host.pipes.items():
            lines.append(f"           pipe {name}: {len(files)} file(s) streamed to {INPUT_DATA}/{name}_<epoch>")
    return "\n".join(lines)

