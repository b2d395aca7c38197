"""The library API: what every front end (the `hetero-emu` CLI, the Python `Job`, the SDK session and
the pytest plugin) does with a job, in one place. Front ends parse their input and print;
this module loads and checks specs, picks the engine by name from `emulator.backend.registry`, and
runs, renders, describes, stops, lists and cleans; it builds images, and saves and loads them for
a CI cache (`image_key`, `save_image`, `load_image`: docs/ci.md).

Engine-facing calls take `engine=` (a registered name, "docker" by default). A job is named either by
its job name (found by the engine's labels while its containers exist, else in the local record of
`emulator.state.job_records`) or by its output folder.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from emulator.aws import services
from emulator.backend import Backend, ExecIO, Resource
from emulator.backend.images import ImageKey, archive_problem
from emulator.backend.liveness import driver_alive
from emulator.backend.networks import NetworkStuck
from emulator.backend.registry import engine
from emulator.defaults import DEFAULT_ENGINE
from emulator.errors import (
    ApiError,
    DockerUnavailable,
    EmulatorError,
    EnvironmentProblem,
    ImageMissing,
    NotRunning,
    Problem,
    SpecError,
    UsageError,
)
from emulator.jobs.control import stop as stop
from emulator.jobs.service import TrainingJobs, job_json_text
from emulator.jobspec import (
    JOB_NAME_PATTERN,
    JobSpec,
    folder_problem,
    request,
    s3,
    spec_warnings,
    validate,
)
from emulator.jobspec.hardware_modes import CpuMode, GpuMode
from emulator.jobspec.model import DEFAULT_REGION
from emulator.jobspec.placement import with_placement
from emulator.jobspec.probes import DISK
from emulator.options import RunOptions
from emulator.planning import compose, contract
from emulator.planning.debug_host import DebugTarget
from emulator.planning.hardware import Machine
from emulator.planning.plan import (
    LABEL_HOST,
    LABEL_JOB_DIR,
    MemoryLimit,
    Plan,
    container_name,
    job_name_from,
)
from emulator.planning.prepare import choose_seed, prepare
from emulator.reports.console import ConsoleReporter, Reporter
from emulator.reports.progress import StepReporter, as_step_reporter
from emulator.result import JobResult, Status
from emulator.run import debugger, hostfiles, job_aws, prebuild, staging, warm_pools, wheelhouse
from emulator.run import metrics as metrics_module
from emulator.run.runner import run_job, ulimit_warnings, ulimits_matter
from emulator.run.tail import LogTail
from emulator.state import blocking, job_records
from emulator.training_images import frameworks, huggingface
from emulator.training_images.ecr_images import DEFAULT_IMAGE_MAP, with_image
from emulator.training_images.image_recipes import DEFAULT_VARIANT, load_recipe
from emulator.tuning import request as tuning_rules
from emulator.tuning import service as tuning_service
from emulator.tuning import trials
from emulator.tuning.from_spec import tuning_name, tuning_request
from emulator.tuning.ranges import parse_parameter_ranges
from emulator.tuning.service import TuningJobs

# How often `logs --follow` reads the log files and asks whether the job has ended.
FOLLOW_INTERVAL = 0.25


def load(spec_path: Path | str, *, job_name: str | None = None, output_path: Path | None = None,
         s3_root: Path | str | None = None, shm_size: str | int | None = None) -> JobSpec:
    """Read and check a job file (`_load_file`). `s3_root` is the folder s3://bucket/key URIs map to
    (<s3_root>/bucket/key), above $HETERO_EMU_S3_ROOT, the spec's local_s3_root and the default
    (`emulator.jobspec.s3`)."""
    with s3.given_root(s3_root):
        return _load_file(spec_path, job_name=job_name, output_path=output_path, shm_size=shm_size)


def _load_file(spec_path: Path | str, *, job_name: str | None = None, output_path: Path | None = None,
               shm_size: str | int | None = None) -> JobSpec:
    """Read and check a job file: a YAML spec, or a CreateTrainingJob request (JSON or YAML), told apart
    by its content. `job_name`, `output_path` and `shm_size` override the file's (as the CLI options do).
    Every problem is reported at once (SpecError, exit code 2)."""
    overrides: dict[str, Any] = {}
    if job_name:
        overrides["job_name"] = job_name
    if output_path is not None:
        overrides["output_path"] = str(Path(output_path).resolve())
    if shm_size is not None:
        overrides["shm_size"] = shm_size
    path = Path(spec_path)
    return _from_raw(request.read_input(path), path.resolve().parent, str(path), overrides)


def load_mapping(raw: Mapping[str, Any], *, base_dir: Path | str, job_name: str | None = None,
                 output_path: Path | None = None, source: str = "the mapping") -> JobSpec:
    """Check a spec, or a CreateTrainingJob request, given as a mapping (told apart as in a file);
    relative paths resolve against `base_dir`. `job_name` and `output_path` override the mapping's."""
    overrides: dict[str, Any] = {"job_name": job_name} if job_name else {}
    if output_path is not None:
        overrides["output_path"] = str(Path(output_path).resolve())
    return _from_raw(raw, Path(base_dir).resolve(), source, overrides)


def _from_raw(raw: Any, base_dir: Path, source: str, overrides: Mapping[str, Any]) -> JobSpec:
    # The rules probe the paths the job names through the probes they are given: here the real disk.
    if request.is_request(raw):
        return request.validate_request(raw, base_dir, source, overrides, probes=DISK)
    return validate({**raw, **overrides} if isinstance(raw, dict) else raw, base_dir=base_dir, source=source,
                    probes=DISK)


def relocate(spec: JobSpec, *, job_name: str, output_path: Path) -> JobSpec:
    """A checked spec under another job name and output folder (what `load`'s overrides do for a file;
    the pytest plugin runs a user's JobSpec in the test's own folder this way). The folder is checked
    as a spec's output_path is: the job must not write into the code or data it reads."""
    if not JOB_NAME_PATTERN.fullmatch(job_name) or len(job_name) > 63:
        raise UsageError(f"job name {job_name!r} is not a SageMaker job name",
                         hint="letters, digits and single hyphens, at most 63 characters")
    out = Path(output_path).resolve()
    reader = _reader_above(spec, out)
    if reader is not None:
        raise UsageError(f"output folder {out} is inside {reader[0]} ({reader[1]})",
                         hint="the job would write into the code or data it reads: keep them apart")
    return replace(spec, job_name=job_name, output_path=out, output_s3_uri=None)


def _reader_above(spec: JobSpec, out: Path) -> tuple[str, Path] | None:
    """The field (and folder) of the first code, checkpoint or channel folder `out` lies in, if any."""
    readers = [("source_dir", spec.source_dir), ("checkpoint_s3_uri", spec.checkpoint_s3_uri)]
    readers += [(f"inputs.{name}", channel.source) for name, channel in spec.inputs.items()]
    return next(((name, read) for name, read in readers if read is not None and out.is_relative_to(read)), None)


def as_request(spec: JobSpec, *, job_name: str | None = None) -> dict[str, Any]:
    """The CreateTrainingJob request a spec corresponds to (`render --as-request`): the job name is the
    spec's, else `job_name`, else one made from the base name as a run would."""
    name = job_name or job_name_from(spec, datetime.now(timezone.utc))
    return request.request_from_spec(spec, name)


# Node labels per instance group name (`--placement GROUP:KEY=VALUE`), over the spec's own `placement`.
GroupPlacement = Mapping[str, Mapping[str, str]]


def run(spec: JobSpec, options: RunOptions | None = None, *, engine_name: str = DEFAULT_ENGINE,
        placement: GroupPlacement | None = None, reporter: Reporter | None = None) -> JobResult:
    """Run one job in the foreground with the service's lifecycle on the engine called `engine_name`;
    returns its result (status, hosts, artifacts). `options` (`emulator.options.RunOptions`; default:
    `hetero-emu run`'s defaults) say how: host order and seed, keep and keep_on_failure (a Failed
    job's stopped containers and network stay, for `exec_in_host` and `docker cp`, until `clean`),
    grace, build_image (False: a missing default image is ImageMissing, exit code 3), memory, debug
    (that host's entry point runs under debugpy, published on 127.0.0.1; README: Debugging a host).
    `reporter` prints the run (default: an `emulator.reports.console.ConsoleReporter`).
    `placement` adds node labels to groups' `placement` (`emulator.jobspec.placement.with_placement`:
    UsageError for an unknown group or label, before the engine is asked); only the swarm engine uses them.
    What the spec allows but probably does not mean (`emulator.jobspec.spec_warnings`) is reported as
    warnings first."""
    spec = with_placement(spec, placement or {})
    backend = engine(engine_name)
    builder = backend.images.build_default_image if backend.capabilities.builds_images else None
    reporter = reporter or ConsoleReporter()
    for problem in spec_warnings(spec):
        reporter.warn(str(problem))
    # The endpoint a job's hosts reach AWS through (aws: in the spec), starting jobs on the same engine.
    aws_endpoint = functools.partial(services.serve_job_endpoint, engine_name=engine_name)
    return run_job(spec, options or RunOptions(), backend=backend, image_builder=builder, reporter=reporter,
                   aws_endpoint=aws_endpoint)


def render(spec: JobSpec, out: Path, *, host_order: str = "spec", seed: int | None = None,
           memory: MemoryLimit = "instance", progress: Callable[[str], None] | None = None,
           engine_name: str | None = None, warn: Callable[[str], None] = lambda message: None,
           debug: DebugTarget | None = None, placement: GroupPlacement | None = None,
           compose_template: Path | str | None = None, gpus: GpuMode | None = None,
           cpus: CpuMode = "instance") -> Plan:
    """Write `out/plan.json`, `out/compose.yaml`, `out/hosts/algo-N/` (each host's /opt/ml) and the
    cluster's diagram `out/cluster.dot` (and `out/cluster.svg` when Graphviz is installed, else a
    `warn` line saying how to get it) without an engine; returns the plan. A requirements.txt's
    wheelhouse is built too (its lines to `progress`, as is a long staging's count of files), as
    compose.yaml mounts it. With `engine_name`, the engine of that name is asked, if one answers, which
    ulimits it cannot give, and those are left out (and warned about) as `run` leaves them out, so that
    the compose project starts on it. What the spec allows but probably does not mean
    (`emulator.jobspec.spec_warnings`) goes to `warn` too, as `run` reports it. With `debug`, that host's service
    runs its entry point under debugpy as `run --debug-host` does (the port is not checked: nothing runs).
    `placement` adds node labels to groups' `placement` as `run`'s does (plan.json shows the constraints).
    `compose_template` is the compose template compose.yaml is filled from (default: the package's
    compose-templates/compose.yaml); one that cannot be used is a UsageError before anything is written.
    `gpus` and `cpus` are `run`'s `--gpus` and `--cpus`: the engine, when one answers, says which GPUs
    it has, so compose.yaml asks for the device ids a run would get."""
    spec = with_placement(spec, placement or {})
    out = out.resolve()
    check_render_target(spec, out)
    template = compose.load_template(compose_template)
    for problem in spec_warnings(spec):
        warn(str(problem))
    seed = choose_seed(host_order, seed)
    if debug is not None:
        debugger.check_target(spec, debug)
    # An ECR name runs as its stand-in unless the engine (when one answers) has it: compose.yaml names
    # the image a run would start.
    spec = with_image(spec, DEFAULT_IMAGE_MAP, lambda name: _engine_has(engine_name or DEFAULT_ENGINE, name))
    for line in spec.image_notes:
        warn(line)
    job_name = job_name_from(spec, datetime.now(timezone.utc))
    options = RunOptions(host_order=host_order, seed=seed, memory=memory, debug=debug, gpus=gpus, cpus=cpus)
    plan = prepare(spec, options, _machine(engine_name or DEFAULT_ENGINE), job_name, job_dir=out)
    for line in plan.hardware.warnings:  # what a script may trip on (no CUDA, shared GPUs); plan.json has the rest
        warn(line)
    progress = progress or ConsoleReporter().info
    if spec.requirements is not None and plan.wheelhouse is not None:
        _render_wheelhouse(plan, engine_name or DEFAULT_ENGINE, progress, warn)
    if engine_name is not None:
        plan = _within_engine_limits(plan, engine_name, warn)
    if out.exists():
        out.rmdir()  # empty (checked above): stage() creates it afresh
    staging.stage(plan, progress)
    (out / "plan.json").write_text(contract.dumps(plan.to_dict()))
    (out / "compose.yaml").write_text(compose.compose_yaml(plan, template))
    # Imported here: the graphviz package is needed by render alone, not by every command's startup.
    from emulator.reports import diagram

    note = diagram.write(plan, out)
    if note is not None:
        warn(note)
    return plan


def _machine(engine_name: str) -> Machine:
    """The engine's machine, or this one without a GPU runtime when no engine answers (render needs none)."""
    try:
        return engine(engine_name).machine()
    except EmulatorError:
        return Machine(os.cpu_count() or 1, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def _engine_has(engine_name: str, image: str) -> bool:
    try:
        return engine(engine_name).images.present(image)
    except EmulatorError:
        return False


def _render_wheelhouse(plan: Plan, engine_name: str, progress: Callable[[str], None],
                       warn: Callable[[str], None]) -> None:
    """The wheelhouse compose.yaml mounts, resolved in the job's image as a run resolves it; when no
    engine answers or the image is not built, a warning says so and the rest is still written."""
    assert plan.spec.requirements is not None and plan.wheelhouse is not None
    backend = engine(engine_name)
    why = None
    try:
        backend.ping()
        if not backend.images.present(plan.image):
            why = f"image {plan.image} is not in the engine"
        else:
            images = backend.images
            wheelhouse.ensure(plan.spec.requirements, Path(plan.wheelhouse), images.image_id(plan.image), progress,
                              lambda code, out, lines, shown: images.build_wheelhouse(plan.image, code, out, lines,
                                                                                      shown), warn=warn)
    except DockerUnavailable as err:
        why = err.message
    if why is not None:
        warn(f"requirements.txt: the wheelhouse compose.yaml mounts ({plan.wheelhouse}) was not built: {why} "
             "(pip resolves the file in the job's image); build the image and render again")


def _within_engine_limits(plan: Plan, engine_name: str, warn: Callable[[str], None]) -> Plan:
    """The plan without the ulimits the engine refuses; as planned when no engine answers."""
    backend = engine(engine_name)
    if not backend.capabilities.probes_ulimits:
        return plan
    try:
        backend.ping()
        refused = backend.refused_ulimits(plan, plan.hosts[0].container.ulimits if plan.hosts else ())
    except EmulatorError:
        return plan  # no engine here: render needs none
    for note in ulimit_warnings(refused) if ulimits_matter(plan) else ():
        warn(note)
    return replace(plan, hosts=tuple(replace(h, container=h.container.without_ulimits(refused)) for h in plan.hosts))


def check_render_target(spec: JobSpec, out: Path) -> None:
    """-o must be a folder render can make, outside everything the job reads: render copies the code
    and the checkpoints and links the channels' files under it, so -o inside source_dir would copy
    itself forever (RecursionError) and inside a channel would write into the user's data."""
    reader = _reader_above(spec, out)
    if reader is not None:
        raise UsageError(f"-o {out} is inside {reader[0]} ({reader[1]})",
                         hint="render copies the code, checkpoints and channel files under -o: "
                         "choose a folder outside the job's code and data")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"-o {out} exists and is not an empty folder", hint="render into a new folder")
    # An existing (empty) -o is removed and made again, so its parent must be writable too.
    problem = folder_problem(out.parent if out.exists() else out)
    if problem is not None:
        raise UsageError(f"-o: {problem[0]}", hint=problem[1] or "choose another folder")


def check_engine(*, engine_name: str = DEFAULT_ENGINE) -> None:
    """Raise DockerUnavailable unless the engine called `engine_name` answers (the pytest plugin asks
    once per session, to skip or fail its tests with the reason)."""
    engine(engine_name).ping()


def job_folder(job: str, *, engine_name: str = DEFAULT_ENGINE, ask_engine: bool = True) -> Path:
    """The output folder of a job given by folder or by name: the engine's labels while its containers
    exist, else the local record of jobs run on this machine."""
    folder = Path(job)
    if (folder / "logs").is_dir():
        return folder
    record = job_records.find(job)
    if record is not None and record.job_dir.is_dir():
        return record.job_dir
    if ask_engine:
        blocking.may_block()  # a round trip to the engine
        containers = [r for r in engine(engine_name).find(job) if r.kind == "container"]
        if containers and containers[0].labels.get(LABEL_JOB_DIR):
            return Path(containers[0].labels[LABEL_JOB_DIR])
    raise UsageError(f"no job {job!r}: not a job folder, not in the record of jobs run here, not in the engine",
                     hint="give the job's output folder (<output_path>/<job_name>); `hetero-emu ps` lists "
                     "running jobs")


@dataclass(frozen=True)
class Description:
    """A job as DescribeTrainingJob describes it: `doc`, and `text`, its job.json as written (None
    while the job runs: the doc is then its record's name, status and transitions)."""

    folder: Path
    doc: dict[str, Any]
    text: str | None


def description(job: str, *, engine_name: str = DEFAULT_ENGINE, warm_pool: bool = True) -> Description:
    """The job's description by the jobs layer (`TrainingJobs.description`, what DescribeTrainingJob
    answers through boto3 plus what the emulator adds), the same whichever front end made the job and
    whichever asks; with its job.json as written once it has ended. A folder no record of this
    machine points at (a job run elsewhere, a record that could not be written) is described by its
    job.json alone, or while it runs by its name and folder."""
    folder = job_folder(job, engine_name=engine_name)
    text = job_json_text(folder) or None
    jobs = TrainingJobs(folder, region=DEFAULT_REGION, engine_name=engine_name)
    record = jobs.record(folder.name)
    if record is not None and record.job_dir.resolve() == folder.resolve():
        doc = jobs.description(jobs.checked(record))
        if not warm_pool:
            doc.pop("WarmPoolStatus", None)
        return Description(folder, doc, text)
    # The warm pool's status changes after job.json is written (reused, expired): as it is now.
    pool = warm_pools.status(folder.name) if warm_pool else None
    if text:
        described = json.loads(text)
        return Description(folder, {**described, "WarmPoolStatus": pool} if pool else described, text)
    return Description(folder, {"TrainingJobName": folder.name, "TrainingJobStatus": Status.IN_PROGRESS,
                                **({"WarmPoolStatus": pool} if pool else {}),
                                "Emulator": {"JobDir": str(folder)}}, None)


def describe(job: str, *, engine_name: str = DEFAULT_ENGINE, warm_pool: bool = True) -> dict[str, Any]:
    """DescribeTrainingJob's answer for a job (its job.json); a job still running has none yet, and gets
    its record's name, status, transitions and folder. `warm_pool=False` leaves WarmPoolStatus out (for
    a caller that adds it itself)."""
    return description(job, engine_name=engine_name, warm_pool=warm_pool).doc


def job_metrics(job: str, *, engine_name: str = DEFAULT_ENGINE) -> list[metrics_module.Sample]:
    """Every value a job's metric definitions took from its hosts' lines so far (running or ended), in
    time order (emulator/run/metrics.py)."""
    return metrics_module.read(job_folder(job, engine_name=engine_name))


@dataclass(frozen=True)
class HostLog:
    host: str
    group: str  # "?" when the host's resourceconfig.json says nothing usable
    path: Path


def logs(job: str, *, host: str | None = None, engine_name: str = DEFAULT_ENGINE) -> list[HostLog]:
    """Each host's log file of a job (running or ended), in host order; `host` picks one."""
    folder = job_folder(job, engine_name=engine_name)
    log_dir = _log_dir(folder, host)
    groups = hostfiles.host_groups(folder)
    files = sorted(log_dir.glob("algo-*.log"), key=lambda p: contract.host_sort_key(p.stem))
    return [HostLog(p.stem, groups.get(p.stem, "?"), p) for p in files if host in (None, p.stem)]


def _log_dir(folder: Path, host: str | None) -> Path:
    """The job's logs/ folder, after checking that `host` (if given) is one of its hosts."""
    log_dir = folder / "logs"
    if not log_dir.is_dir():
        raise UsageError(f"no logs folder at {log_dir}", hint="give a job's output folder (<output_path>/<job_name>)")
    known = sorted({p.name for p in folder.glob("hosts/algo-*")} | {p.stem for p in log_dir.glob("algo-*.log")},
                   key=contract.host_sort_key)
    if host is not None and host not in known:
        raise UsageError(f"job {folder.name} has no host {host!r}; its hosts: {', '.join(known) or 'none'}",
                         hint="--host takes a host name such as algo-1")
    return log_dir


class LogFollower:
    """`logs --follow`: a job's host log lines as the driver writes them, from the start of each file,
    until the job ends. The job has ended when its job.json or its record says so, or when its driver
    is gone (killed or crashed: nothing will write the files any more), so a dead run never makes
    the follower wait forever. `ended` says how it ended once `lines()` is exhausted."""

    def __init__(self, job: str, *, host: str | None = None, engine_name: str = DEFAULT_ENGINE,
                 interval: float = FOLLOW_INTERVAL, sleep: Callable[[float], None] | None = None) -> None:
        self.folder = job_folder(job, engine_name=engine_name)
        self.host = host
        self.engine_name = engine_name
        self.interval = interval
        self.sleep = sleep
        self.tail = LogTail(_log_dir(self.folder, host), self._group_of)
        self._groups = hostfiles.host_groups(self.folder)
        self.ended: str | None = None  # Completed | Failed | Stopped | "gone"
        self._backend: Backend | None = None  # asked only when the job's record cannot tell

    def _engine(self) -> Backend:
        if self._backend is None:
            self._backend = engine(self.engine_name)
        return self._backend

    def hosts(self) -> list[tuple[str, str]]:
        """(host, group) of each host followed, in host order (for the prefixes)."""
        self._groups = hostfiles.host_groups(self.folder)
        names = set(self._groups) | set(self.tail.hosts())
        return [(h, self._group_of(h)) for h in sorted(names, key=contract.host_sort_key) if self.host in (None, h)]

    def _group_of(self, host: str) -> str:
        if host not in self._groups:
            self._groups = hostfiles.host_groups(self.folder)  # staged after the follow began
        return self._groups.get(host, "?")

    def lines(self) -> Iterator[tuple[str, str, str]]:
        """(host, group, line) of every line written so far, then of every line as it is written."""
        while True:
            # Asked before the read: everything written before the end is read by the final poll.
            self.ended = job_end(self.folder, self._engine)
            batch = self.tail.poll(final=self.ended is not None)
            yield from (entry for entry in batch if self.host in (None, entry[0]))
            if self.ended is not None:
                return
            (self.sleep or time.sleep)(self.interval)


def job_end(folder: Path, backend: Callable[[], Backend]) -> str | None:
    """How the job in `folder` ended (its final TrainingJobStatus, or "gone" when its driver died
    before saying), None while it runs. `backend` gives the engine to ask when the job's files and
    record cannot tell (called only then)."""
    text = job_json_text(folder)
    try:
        status = json.loads(text).get("TrainingJobStatus") if text else None
    except (ValueError, AttributeError):
        status = None  # being written right now: the next look finds it whole
    if isinstance(status, str) and status != Status.IN_PROGRESS:
        return status
    record = job_records.find(folder.name)
    if record is not None and record.job_dir.resolve() == folder.resolve():
        if record.status != Status.IN_PROGRESS:
            return record.status
        alive = driver_alive(record.driver) if record.driver else None
        if alive is not None:
            return None if alive else "gone"
    # No word from the driver itself (a record from another machine, or none): the job runs while
    # its containers exist.
    try:
        running = any(r.kind == "container" for r in backend().find(folder.name))
    except DockerUnavailable:
        running = False
    return None if running else "gone"


def exec_in_host(job: str, host: str, command: Sequence[str], io: ExecIO, *,
                 engine_name: str = DEFAULT_ENGINE) -> int:
    """Run `command` in a host of a job (`hetero-emu exec`); returns its exit code. A running host
    runs it itself; a stopped one (kept by --keep or --keep-on-failure) runs it in a copy (see
    `Backend.exec_in`). A job whose containers are gone raises NotRunning (exit code 3)."""
    if not command:
        raise UsageError("no command to run", hint=f"hetero-emu exec {job} {host} -- bash")
    name = Path(job).name if (Path(job) / "logs").is_dir() else job
    backend = engine(engine_name)
    hosts = {r.labels.get(LABEL_HOST, ""): r for r in backend.find(name)
             if r.kind == "container" and r.name == container_name(name, r.labels.get(LABEL_HOST, ""))}
    if not hosts:
        folder = job_folder(job, engine_name=engine_name, ask_engine=False)  # unknown: UsageError (exit 2)
        status = job_end(folder, lambda: backend)
        if status is None:
            raise NotRunning(f"job {name} has no containers right now (it is starting or tearing down)",
                             hint="`hetero-emu ps` lists a job's containers while they exist")
        ended = "its driver is gone" if status == "gone" else f"it is {status}"
        raise NotRunning(f"job {name} is not running ({ended}): its containers were removed, there is no "
                         f"{host} to run a command in",
                         hint=f"its hosts' files are under {folder / 'hosts'}; `hetero-emu run --keep-on-failure` "
                         "(or --keep) keeps a job's containers for exec")
    if host not in hosts:
        raise UsageError(f"job {name} has no host {host!r}; its hosts: "
                         f"{', '.join(sorted(hosts, key=contract.host_sort_key))}",
                         hint=f"hetero-emu exec {name} algo-1 -- CMD")
    return backend.exec_in(hosts[host], command, io)


def ps(*, engine_name: str = DEFAULT_ENGINE) -> list[Resource]:
    """The containers and networks of emulated jobs, found by their labels."""
    return engine(engine_name).find()


def pools() -> list[warm_pools.Pool]:
    """The warm pools a matching job would reuse now (emulator/run/warm_pools.py); expired ones are ended."""
    return warm_pools.available()


def end_pools(job: str | None = None) -> list[warm_pools.Pool]:
    """End the Available warm pools (of one job, or all) and remove their cache folders."""
    return warm_pools.terminate(job)


def clean(job: str | None = None, *, everything: bool = False,
          engine_name: str = DEFAULT_ENGINE) -> tuple[list[Resource], list[str]]:
    """Remove the containers and networks of jobs whose driver is gone (all of one job with `job`,
    every job's with `everything`); returns what was removed and the running jobs left alone. A
    network the engine will not remove until it restarts (moby#42119) is not an error: it is left
    out of what was removed, and `ps` (or `stuck_networks`) lists it with the fix."""
    backend = engine(engine_name)
    found = backend.find(job)
    chosen = [r for r in found if job is not None or everything or r.orphaned]
    skipped = sorted({r.job for r in found if r not in chosen})
    try:
        backend.remove_resources(chosen)
    except NetworkStuck as err:
        chosen = [r for r in chosen if not (r.kind == "network" and r.name in err.networks)]
    if job is None:
        # A killed driver's AWS endpoint socket folder (emulator/run/job_aws.py): nothing listens there now.
        for folder in job_aws.stale_socket_dirs():
            shutil.rmtree(folder, ignore_errors=True)
    return chosen, skipped


def stuck_networks(job: str | None = None, *, engine_name: str = DEFAULT_ENGINE) -> list[Resource]:
    """The networks of emulated jobs that the engine will not remove until it restarts (moby#42119):
    they hold only their name and their subnet, and block no later job or `clean`."""
    return [r for r in engine(engine_name).find(job) if r.stuck]


def build_image(*, variant: str = DEFAULT_VARIANT, rebuild: bool = False,
                progress: StepReporter | Callable[[str], None] = lambda message: None, verbose: bool = False,
                framework: str | None = None, python: str | None = None, for_file: Path | str | None = None,
                s3_root: Path | str | None = None) -> Any:
    """Build the image of a recipe in images/ (default: the training image) in the Docker engine
    (offline; skipped when up to date). Returns the build report (image, built, seconds, size_bytes,
    waited_seconds). `progress` gets one line per step (an `emulator.reports.progress.StepPrinter` draws them
    live); the tools' output goes to a log file it names, and to `progress` too when `verbose`.
    `framework` ("pytorch:1.11") builds that framework's image instead, on the Python nearest to
    `python` ("py38"; default: the newest the SDK lists for that version), saying so when it differs
    (`emulator.training_images.frameworks`). `for_file` (a YAML spec or a CreateTrainingJob request,
    checked as `run` checks it, its S3 URIs under `s3_root`) builds the image that job would run
    (`emulator.run.prebuild`)."""
    if for_file is not None:
        if framework is not None or python is not None or variant != DEFAULT_VARIANT:
            raise UsageError("--for names the image by its job: it goes without --variant, --framework and --python",
                             hint="hetero-emu image build --for job.yaml")
        return prebuild.build_for(load(for_file, s3_root=s3_root).image_uri, rebuild=rebuild, progress=progress,
                                  verbose=verbose)
    steps = as_step_reporter(progress, verbose)
    target = _image_target(variant, framework, python, steps)
    if isinstance(target, str):
        return prebuild.engine_images().build_recipe_image(target, steps, rebuild=rebuild)
    return prebuild.engine_images().build_framework_image(target, steps, rebuild=rebuild)


def _image_target(variant: str, framework: str | None, python: str | None,
                  steps: StepReporter | None = None) -> str | frameworks.FrameworkImage:
    """The image `image build` options name: a recipe's variant, or the framework image of `framework`
    on the Python nearest `python` (said to `steps`). Usage errors before the engine is asked."""
    if framework is not None:
        # huggingface-pytorch:4.36 is a Hugging Face image.
        target = huggingface.build_target(framework, python) or frameworks.choose(
            *frameworks.parse_framework(framework), python)
        for line in (target.python_note() if target.substituted else None, target.horovod_missing()):
            if line is not None and steps is not None:
                steps.info(line)
        return target
    if python is not None:
        raise UsageError("--python goes with --framework", hint="e.g. --framework pytorch:1.11 --python py38")
    load_recipe(variant)  # an unknown variant is a usage error
    return variant


def image_key(*, variant: str = DEFAULT_VARIANT, framework: str | None = None, python: str | None = None,
              engine_name: str = DEFAULT_ENGINE) -> ImageKey:
    """The cache key of the image `build_image` with these options builds: its tag and its recipe's
    hash, from the recipe files alone (the engine is not asked, nothing is built), so a CI job knows
    which saved archive it needs before it restores its cache."""
    return engine(engine_name).images.key(_image_target(variant, framework, python))


@dataclass(frozen=True)
class SavedImage:
    """What `save_image` did: `archive` (named by `key`) was written, or was there already (`written`
    False); `removed` are the archives of the same image under older keys it deleted."""

    key: ImageKey
    archive: Path
    written: bool
    size_bytes: int
    seconds: float
    removed: tuple[Path, ...]


def save_image(folder: Path | str, *, variant: str = DEFAULT_VARIANT, framework: str | None = None,
               python: str | None = None, progress: StepReporter | Callable[[str], None] = lambda message: None,
               engine_name: str = DEFAULT_ENGINE) -> SavedImage:
    """Save the image `build_image` with these options builds into `folder`, as `<key>.tar`
    (`image_key`), for a CI cache to keep: nothing to write when that file is there already (a cache
    restored under this key), and the same image's archives of older keys removed so the cache holds
    one. ImageMissing unless the engine has the image up to date (build it first)."""
    started = time.monotonic()
    steps = as_step_reporter(progress, False)
    target = _image_target(variant, framework, python, steps)
    images = prebuild.engine_images(engine_name)
    key = images.key(target)
    if not key.up_to_date(images.labels(key.image)):
        raise ImageMissing(f"the Docker engine has no up-to-date {key.image} to save (recipe {key.recipe[:12]})",
                           hint="build it first: hetero-emu image build" + _options_text(variant, framework, python))
    out = Path(folder)
    archive = out / key.file_name
    try:
        out.mkdir(parents=True, exist_ok=True)
        stale = tuple(sorted(p for p in out.iterdir() if key.stale_name(p.name)))
    except OSError as exc:
        raise EnvironmentProblem(f"cannot use {out} as the folder of saved images: {exc.strerror}") from None
    for old in stale:
        old.unlink(missing_ok=True)
        steps.info(f"removed {old.name}: {key.image} of an older recipe")
    if archive.is_file():
        steps.info(f"{archive} is there already (key {key.text}): nothing to write")
        return SavedImage(key, archive, False, archive.stat().st_size, time.monotonic() - started, stale)
    # Written beside and renamed: a job killed mid-save leaves no archive a later load would take.
    partial = archive.with_name(archive.name + ".partial")
    try:
        size = images.save(key.image, partial)
        partial.replace(archive)
    finally:
        partial.unlink(missing_ok=True)
    return SavedImage(key, archive, True, size, time.monotonic() - started, stale)


@dataclass(frozen=True)
class LoadedImage:
    """What `load_image` did: `archive` None when the folder had none of this key (a cache miss); else
    the images it held (`loaded`), and whether the image of `key` is now up to date (`image build` then
    has nothing to do)."""

    key: ImageKey
    archive: Path | None
    loaded: tuple[str, ...]
    up_to_date: bool
    seconds: float


def load_image(path: Path | str, *, variant: str = DEFAULT_VARIANT, framework: str | None = None,
               python: str | None = None, progress: StepReporter | Callable[[str], None] = lambda message: None,
               engine_name: str = DEFAULT_ENGINE) -> LoadedImage:
    """Load the image `build_image` with these options builds, from an archive `save_image` wrote.
    `path` is that archive (a .tar file), or the folder `save_image` wrote into, where the archive of
    this key is taken and none is a cache miss, said and not failed (the folder may not exist: a
    cache that restored nothing). The image loaded carries the label a build puts on it, so `image
    build` finds it up to date and builds nothing. UsageError for a missing or wrong file (one that
    does not hold this image)."""
    started = time.monotonic()
    steps = as_step_reporter(progress, False)
    target = _image_target(variant, framework, python, steps)
    given = Path(path)
    images = engine(engine_name).images
    key = images.key(target)
    if given.is_dir() or (given.suffix != ".tar" and not given.exists()):
        archive = given / key.file_name
        if not archive.is_file():
            steps.info(f"no saved {key.image} of key {key.text} in {given}: `hetero-emu image build` builds it")
            return LoadedImage(key, None, (), False, time.monotonic() - started)
    else:
        archive = given
    problem = archive_problem(archive)
    if problem is not None:
        raise UsageError(problem, hint="give an archive `hetero-emu image save` wrote, or the folder it wrote into")
    images = prebuild.engine_images(engine_name)
    loaded = images.load(archive)
    up_to_date = key.up_to_date(images.labels(key.image))
    if key.image not in loaded:
        raise UsageError(f"{archive} holds {', '.join(loaded) or 'no named image'}, not {key.image}",
                         hint="load it with the options it was saved with (`image key` with them names its file)")
    if not up_to_date:
        steps.info(f"{key.image} from {archive} is of another recipe than this hetero-emu's: "
                   "`hetero-emu image build` builds it again")
    return LoadedImage(key, archive, loaded, up_to_date, time.monotonic() - started)


def _options_text(variant: str, framework: str | None, python: str | None) -> str:
    """The `image build` options that name the same image, for a hint."""
    given = [("--variant", variant if variant != DEFAULT_VARIANT else None), ("--framework", framework),
             ("--python", python)]
    return "".join(f" {option} {value}" for option, value in given if value is not None)


# -- hyperparameter tuning jobs (docs/tuning.md) ------------------------------------------------------


def tuning_jobs(*, engine_name: str = DEFAULT_ENGINE, s3_root: Path | None = None, base_dir: Path | None = None,
                max_parallel: int | None = None) -> TuningJobs:
    """The tuning layer's service on this machine's jobs: the trials run on `engine_name`, S3 URIs
    on `s3_root` (else the S3 root a spec would get), relative paths from `base_dir`."""
    if s3_root is None:
        chosen = s3.choose_root(None)
        if not chosen.named:  # the default root, made at its first use as the SDK sessions make it
            chosen.path.mkdir(parents=True, exist_ok=True)
        s3_root = chosen.path
    training = TrainingJobs(s3_root, region=DEFAULT_REGION, engine_name=engine_name, base_dir=base_dir)
    return TuningJobs(training, max_parallel=max_parallel)


def tune(spec: JobSpec, config: Mapping[str, Any], *, warm_start: Mapping[str, Any] | None = None,
         name: str | None = None, engine_name: str = DEFAULT_ENGINE, max_parallel: int | None = None) -> str:
    """Start a tuning job of the spec's job (CreateHyperParameterTuningJob with the spec's job as its
    TrainingJobDefinition and `config` as its HyperParameterTuningJobConfig); its name. It runs on its
    own (`tuning_description` and `stop_tuning` find it by name). A request the service would refuse
    is a SpecError naming the `tuning` section."""
    name = name or tuning_name(spec, datetime.now(timezone.utc))
    asked = tuning_request(spec, name, config, warm_start)
    refused = _tuning_problems(asked)
    if refused:  # each its own problem (create would join them in one message)
        raise SpecError(refused)
    # The spec's root when it is there; else the default, made as the SDK sessions make it (a spec that
    # names no s3:// location needs none, but the trials' checks ask for one).
    root = spec.s3_root if spec.s3_root is not None and spec.s3_root.is_dir() else None
    service = tuning_jobs(engine_name=engine_name, s3_root=root,
                          base_dir=spec.spec_dir, max_parallel=max_parallel)
    try:
        service.create(asked)
    except ApiError as err:
        raise SpecError([Problem("tuning", err.message)]) from None
    return name


def check_tuning(spec: JobSpec) -> None:
    """The spec's `tuning:` section by the rules CreateHyperParameterTuningJob's request meets
    (emulator/tuning/request.py: the objective among the metric definitions, a range's bounds, Grid's
    ranges, Hyperband's settings, ...) and its ranges' own checks, without an engine: `validate` and
    `tune` report the same problems. A SpecError naming `tuning` for each; nothing without a section."""
    if spec.tuning is None:
        return
    refused = _tuning_problems(tuning_request(spec, "validate", spec.tuning.config, spec.tuning.warm_start))
    if refused:
        raise SpecError(refused)


def _tuning_problems(asked: Mapping[str, Any]) -> list[Problem]:
    """What CreateHyperParameterTuningJob would refuse in `asked`: the request's rules, then each
    definition's ranges; a Problem naming `tuning` for each."""
    found = tuning_rules.problems(asked)
    if not found:
        for definition in trials.definitions(asked):
            try:
                parse_parameter_ranges(trials.ranges_of(asked, definition))
            except ApiError as err:
                found.append(err.message)
    return [Problem("tuning", message, TUNING_HINT) for message in found]


# The hint of a `tuning:` section whose request the service would refuse.
TUNING_HINT = "the rule CreateHyperParameterTuningJob's request breaks; docs/tuning.md lists the section's keys"


def tuning_description(name: str) -> dict[str, Any]:
    """DescribeHyperParameterTuningJob's answer for the tuning job `name`, with its trials (each a
    ListTrainingJobsForHyperParameterTuningJob row, in the order they were created) under
    `TrainingJobSummaries`; UsageError if no tuning job of that name ran here."""
    service = tuning_jobs()
    record = service.record(name)
    if record is None:
        raise UsageError(f"no tuning job named {name!r} on this machine",
                         hint="`hetero-emu tune SPEC` starts one; ListHyperParameterTuningJobs lists them")
    described = tuning_service.with_trials(record)
    # What the emulator adds, as a training job's description has it under `Emulator`: where the
    # tuning job's tuning.json and tuning.svg are, its warnings, why it ended.
    emulated = {k: v for k, v in (("Folder", record.get("Folder")), ("Notes", record.get("Notes")),
                                  ("StatusMessage", record.get("StatusMessage"))) if v}
    if emulated:
        described["Emulator"] = emulated
    return described


def is_tuning_job(name: str) -> bool:
    """Whether a tuning job of this name ran here."""
    return tuning_jobs().record(name) is not None


def stop_tuning(name: str) -> None:
    """StopHyperParameterTuningJob: every running trial is stopped and the tuning job ends Stopped."""
    try:
        tuning_jobs().stop({"HyperParameterTuningJobName": name})
    except ApiError as err:
        raise UsageError(f"tuning job {name}: {err.message}") from None


def follow_tuning(name: str, on_trial: Callable[[dict[str, Any]], None], *, poll: float = 0.5,
                  stop: Callable[[], bool] = lambda: False) -> dict[str, Any]:
    """Wait for the tuning job `name` to end, handing `on_trial` each trial's row as the trial ends
    (in the order they end); its final description (`tuning_description`). `stop`: asked at each look;
    once it says True the tuning job is stopped (StopHyperParameterTuningJob) and followed to its end."""
    shown: set[str] = set()
    stopping = False
    while True:
        described = tuning_description(name)
        for row in described.get("TrainingJobSummaries") or []:
            trial = str(row.get("TrainingJobName"))
            if trial not in shown and row.get("TrainingJobStatus") not in ("InProgress", "Stopping"):
                shown.add(trial)
                on_trial(row)
        if described.get("HyperParameterTuningJobStatus") in tuning_service.FINAL:
            return described
        if not stopping and stop():
            stopping = True
            with contextlib.suppress(UsageError):  # it ended meanwhile
                stop_tuning(name)
        time.sleep(poll)
