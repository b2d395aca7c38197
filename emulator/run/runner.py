"""Run a plan on a backend with the service's lifecycle, not local mode's (README: How SageMaker concepts
map; When things go wrong).

- The job completes when every host has exited 0; a host that exits 0 early stops nobody.
- The first host to exit non-zero fails the job: the others get SIGTERM, then SIGKILL after a grace
  period. FailureReason is worded as the service words it; the host and its group are the emulator's
  own note beside it (JobResult.failed_host, job.json Emulator.FailedHost).
- max_run exceeded (the hosts' running time, across attempts): every host is stopped with the grace
  period (the service's 120 s); Stopping meanwhile, then Stopped with MaxRuntimeExceeded, artifacts
  uploaded.
- A spot interruption or a platform error the run injects (emulator/run/attempts.py): every host is
  stopped (Interrupted) or lost, then the job starts again on new hosts with the checkpoints
  restored, as the service restarts a spot job or retries one with a RetryStrategy; a spot job past
  MaxWaitTimeInSeconds is Stopping, then Stopped with MaxWaitTimeExceeded.
- Ctrl-C / SIGTERM: every host is stopped; Stopping, then Stopped.
- Artifacts are collected whatever the outcome; containers and network are removed in a `finally`
  (unless keep=True, or keep_on_failure=True and the job Failed: then they stay, stopped, for
  `hetero-emu exec` and `docker cp`, until `hetero-emu clean`).

What a run is asked to do comes in one `emulator.options.RunOptions`; what it talks to (the engine,
the reporter, the clock, the image builders) comes beside it.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from emulator.backend import Backend, ContainerState, Resource
from emulator.errors import (
    DockerUnavailable,
    EmulatorError,
    Interrupted,
    JobFolderTaken,
    UsageError,
)
from emulator.jobspec import JobSpec, faults
from emulator.options import RunOptions
from emulator.planning import debug_host, secrets
from emulator.planning.container import Ulimit
from emulator.planning.plan import Plan, job_name_from, mpi_hosts
from emulator.planning.prepare import choose_seed, prepare
from emulator.reports.console import ConsoleReporter, Reporter
from emulator.result import JobResult, SecondaryStatus, Status
from emulator.run import (
    artifacts,
    attempts,
    checkpoints,
    debugger,
    job_aws,
    outputs,
    pipes,
    staging,
    warm_pools,
)
from emulator.run.journal import FINAL_MESSAGES, StatusJournal
from emulator.run.logs import LogCollector
from emulator.run.mpi_wait import WorkerWait
from emulator.run.preflight import Preflight
from emulator.training_images.ecr_images import DEFAULT_IMAGE_MAP, python_note, with_image
from emulator.training_images.frameworks import FrameworkImage
from emulator.training_images.launchers import required_launchers

if TYPE_CHECKING:
    from emulator.reports.timeline import Span

POLL_SECONDS = 0.2
NAME_ATTEMPTS = 20
# FailureReason of a job whose platform error was not retried (or was, to the last attempt).
INTERNAL_ERROR = "InternalServerError: We encountered an internal error. Please try again."
# The StatusMessage of the Interrupted and Restarting transitions.
SPOT_INTERRUPTED = "Training job interrupted: the spot instances were reclaimed"
RETRY_RESTARTING = "Restarting the training job after an internal error"
# Once every host has exited, its output stream still delivers what the engine buffered (at most a
# few MB); one that has not ended by then never will. An engine that stopped answering gets less.
STREAM_END_TIMEOUT = 30.0
# A host whose engine exit time is this much before the driver's SIGTERM had exited on its own.
OWN_EXIT_MARGIN = 0.05
LOST_ENGINE_STREAM_TIMEOUT = 0.5


@dataclass
class HostsOutcome:
    """How the hosts' part of a run ended, filled in as it goes: an interrupt or a lost engine keeps
    what was set before it (the start of hosts that never started is the run's)."""

    start: datetime  # TrainingStartTime
    t0: float  # time.monotonic() at `start`: the hosts' seconds count from it
    status: Status = Status.FAILED
    secondary: SecondaryStatus = SecondaryStatus.FAILED  # the status, or MaxRuntimeExceeded
    reason: str | None = None  # FailureReason, when the run knows it before the hosts' results
    lost: DockerUnavailable | None = None  # the engine stopped answering


@dataclass(frozen=True)
class Collected:
    """The artifacts of a run: the model and output archives (or folders), when packing them ended,
    and how long it took."""

    model: Path | None
    output: Path | None
    packed: datetime
    packing: float


def ulimits_matter(plan: Plan) -> bool:
    """Whether the ulimits an engine refuses deserve a warning: only a distributed job pins memory
    (MPI, NCCL), so telling every other job would be noise. The one place this is decided, for `run`
    on every engine and for `render` (emulator.api)."""
    return bool(required_launchers(plan.spec))


def ulimit_warnings(refused: Iterable[Ulimit]) -> list[str]:
    """One warning per ulimit the engine refuses (it runs the hosts with its own default instead)."""
    return [f"the Docker engine may not raise ulimit {u.name} to {'unlimited' if u.hard < 0 else u.hard} (its own "
            f"limit is lower): hosts keep the engine's default, which MPI or NCCL pinning memory may find too small"
            for u in sorted(refused, key=lambda u: u.name)]


STOP_MARKER = ".stop-requested"


def stop_requested(plan: Plan) -> bool:
    """`hetero-emu stop` drops this file in the job folder before it signals the hosts, so the
    driver reports Stopped (StopTrainingJob) instead of blaming the first host that got SIGTERM."""
    return (Path(plan.job_dir) / STOP_MARKER).exists()


def request_stop(job_dir: Path) -> None:
    (job_dir / STOP_MARKER).touch()


def run_job(
    spec: JobSpec,
    options: RunOptions | None = None,
    *,
    backend: Backend | None = None,
    reporter: Reporter | None = None,
    now: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
    image_builder: Callable[[Reporter], object] | None = None,
    framework_builder: Callable[[FrameworkImage, Reporter], object] | None = None,
    aws_endpoint: job_aws.EndpointServer | None = None,
) -> JobResult:
    """Plan and run one job as `options` say (`emulator.options.RunOptions`; default: `hetero-emu run`'s
    defaults); returns its JobResult (the caller maps status to an exit code). A debug target with an
    unknown host or a taken port ends the run before the engine is asked. `backend`: the engine
    (default: the registry's default one, whose own image builder then builds a missing default
    image); `image_builder` and `framework_builder` build a missing default or framework image; `now`
    is the clock of the job's times; `aws_endpoint` makes the endpoint a job's hosts reach AWS through
    (emulator/run/job_aws.py; `api.run` gives emulator/aws/services.py's)."""
    options = options or RunOptions()
    if backend is None:
        from emulator.backend.registry import engine

        backend = engine()
        if image_builder is None and backend.capabilities.builds_images:
            image_builder = backend.images.build_default_image
    if framework_builder is None and backend.capabilities.builds_images:
        framework_builder = backend.images.build_framework_image
    if backend.capabilities.aws_gateway and aws_endpoint is not None and not spec.enable_network_isolation:
        # Staging the job's AWS files makes its certificates with cryptography, ~35 ms to import:
        # imported while the engine answers what it has (below) instead of while staging.
        # Not a daemon: a run that fails at once (no engine, a port in use) must not leave the interpreter
        # to end under a thread inside cryptography's native import, which then aborts the process
        # ("FATAL: exception not rethrown", exit -6); the exit waits for the import instead (~35 ms).
        threading.Thread(target=importlib.import_module, args=("emulator.run.job_ca",),
                         name="preload-job-aws").start()
    images = DEFAULT_IMAGE_MAP if options.images is None else options.images
    spec = with_image(spec, images, backend.images.present)
    seed = choose_seed(options.host_order, options.seed)
    options = replace(options, seed=seed)
    if options.inject and (found := faults.problems(options.inject, spec.max_run, spec.use_spot_instances)):
        raise UsageError(f"--inject/--interrupt-at {found[0]}",
                         hint="an interruption needs a managed spot job (use_spot_instances: true, max_wait), "
                         "each time below max_run")
    debug = options.debug
    if debug is not None:
        debugger.check_target(spec, debug)
        debugger.check_port_free(debug)
    reporter = reporter or ConsoleReporter()
    # The engine answers (and is what it should be: a swarm's manager) before it is asked what it has.
    backend.ping()
    machine = backend.machine()
    for attempt in range(NAME_ATTEMPTS):
        job_name = job_name_from(spec, now())
        plan = prepare(spec, options, machine, job_name)
        if backend.capabilities.aws_gateway and aws_endpoint is not None:
            # The hosts reach the emulator's AWS (an isolated job's: none), through the endpoint the
            # caller hands the run (`api.run` gives one; a bare run_job, a test's, runs without AWS).
            plan = job_aws.with_aws(plan, socket_in_job_folder=backend.capabilities.aws_socket_in_job_folder)
        reporter.set_hosts([(h.name, h.group) for h in plan.hosts])
        try:
            return Run(plan, backend, reporter, options, now, image_builder, framework_builder,
                       aws_endpoint).execute()
        except JobFolderTaken:
            # Two runs of one spec started in the same millisecond drew the same generated name
            # (the SDK's timestamp has millisecond resolution): the later one takes the next name.
            # Nothing was created yet: the job folder is the first thing a run claims.
            if spec.job_name is not None or attempt == NAME_ATTEMPTS - 1:
                raise
            time.sleep(0.002)
    raise AssertionError("unreachable")


class Run:
    """One execution of a plan. `execute()` always tears down what it created."""

    def __init__(
        self,
        plan: Plan,
        backend: Backend,
        reporter: Reporter,
        options: RunOptions,
        now: Callable[[], datetime],
        image_builder: Callable[[Reporter], object] | None = None,
        framework_builder: Callable[[FrameworkImage, Reporter], object] | None = None,
        aws_endpoint: job_aws.EndpointServer | None = None,
    ) -> None:
        self.plan = plan
        self.backend = backend
        self.reporter = reporter
        self.options = options
        self.now = now
        self.image_builder = image_builder
        self.aws_endpoint = aws_endpoint
        self.framework_builder = framework_builder
        self.names = [h.container.name for h in plan.hosts]
        self.gateway: str | None = None  # the job's AWS gateway's container while it runs
        self.gateway_stopping: threading.Thread | None = None  # its kill, while it goes on (`stop_gateway`)
        self.gateway_beside: job_aws.GatewayOutput | None = None  # made, to be started with the hosts
        self.masker = secrets.Masker(*(h.container.environment for h in plan.hosts))
        self.host_of = {h.container.name: h for h in plan.hosts}
        self.exit_codes: dict[str, int | None] = {}
        self.exit_times: dict[str, float] = {}
        # The engine's own start and exit times of each exited host, for the timeline.
        self.engine_times: dict[str, tuple[float | None, float | None]] = {}
        self.oom: set[str] = set()
        self.stopped_by_us: set[str] = set()
        self.first_failed: str | None = None
        self.errors: dict[str, str] = {}
        # Only what this run created is removed: a name another run holds is never touched.
        self.created: list[str] = []
        self.created_network = False
        self.started = False
        # The run leaves its containers and network in place: --keep, or --keep-on-failure on a failure.
        self.kept = options.keep
        self.began: datetime | None = None  # staging began: the start of the total time
        # What is checked and made ready before anything is created (emulator/run/preflight.py).
        self.preflight = Preflight(plan, backend, reporter, options, image_builder, framework_builder)
        # The job's statuses, written to its record at each step (emulator/run/journal.py).
        self.journal = StatusJournal(plan.spec, plan.job_name, Path(plan.job_dir), now,
                                     asked=options.created is not None)
        # The toolkit's MPI workers that miss a short job's orted (emulator/run/mpi_wait.py), told at once.
        ranks = mpi_hosts(plan)
        self.worker_wait = WorkerWait(plan.job_name, ranks[0], ranks[1:]) if len(ranks) > 1 else None
        # The faults the run injects (emulator/run/attempts.py) and the attempts they ended.
        self.schedule = attempts.Schedule(options.inject if options.inject is not None else plan.spec.inject)
        self.done_attempts: list[attempts.Attempt] = []
        self.fault: faults.Injection | None = None  # set when one ends the current attempt
        self.first_t0: float | None = None  # the first attempt's hosts started (MaxWait counts from it)
        self.past_spans: list[Span] = []  # the timeline of the attempts before this one
        # What copies the hosts' checkpoints (and TensorBoard files) to their URIs while they run.
        self.syncs: list[checkpoints.LiveSync] = []

    def new_attempt(self) -> None:
        """Forget the last attempt's hosts: the next one runs new containers of the same names."""
        self.exit_codes, self.exit_times, self.engine_times = {}, {}, {}
        self.oom, self.stopped_by_us, self.errors = set(), set(), {}
        self.first_failed = None
        self.created, self.created_network, self.started = [], False, False
        ranks = mpi_hosts(self.plan)
        self.worker_wait = WorkerWait(self.plan.job_name, ranks[0], ranks[1:]) if len(ranks) > 1 else None

    def execute(self) -> JobResult:
        plan, reporter = self.plan, self.reporter
        self.backend.ping()
        # Which image stands in for the one named; on which Python, as a warning: the job's code and its
        # requirements.txt may behave otherwise than on the named one (emulator/run/wheelhouse.py).
        substituted = python_note(plan.spec)
        for note in plan.spec.image_notes:
            (reporter.warn if note == substituted else reporter.info)(note)
        try:
            self.preflight.ensure_image()
        except KeyboardInterrupt:
            raise Interrupted(f"interrupted while building the image {plan.image}: nothing was started") from None
        try:
            self.preflight.ensure_wheels()
        except KeyboardInterrupt:
            raise Interrupted("interrupted while building the wheels of requirements.txt: nothing was "
                              "started") from None
        if plan.seed is not None:
            reporter.info(f"host order: shuffled, seed {plan.seed} (replay with --seed {plan.seed})")
        self.preflight.check_leftovers()
        for note in plan.hardware.notes:  # what the instance types have that this machine cannot give
            reporter.info(note)
        for warning in plan.hardware.warnings:  # what a script may trip on: no CUDA, shared GPUs
            reporter.warn(warning)
        self.announce_debugger()

        self.began = self.now()
        reporter.step(f"staging {len(plan.hosts)} hosts under {plan.job_dir}")
        try:
            staging.stage(plan, reporter.info)  # a long staging says how far it is
        except KeyboardInterrupt:
            # staging.stage removed its half-made job folder on the way out.
            raise Interrupted("interrupted while staging the hosts: nothing was started, and the half-made "
                              f"job folder {plan.job_dir} was removed") from None
        # The diagram's text goes into the job's record too, for `hetero-emu serve`'s job page.
        self.journal.cluster_dot = outputs.write_cluster_dot(plan, reporter.warn)
        # By name from now on (`hetero-emu logs/describe NAME`), also once the containers are gone.
        journal = self.journal
        journal.creation = self.options.created or self.began
        journal.transition(SecondaryStatus.STARTING, "Preparing the instances for training", at=journal.creation)
        self.journal.transition(SecondaryStatus.DOWNLOADING, "Downloading input data", at=self.began)
        self.take_warm_pool()
        try:
            # A watcher removes what this run creates if the driver is killed before its `finally`.
            with contextlib.nullcontext() if self.options.keep else self.backend.guard(plan):
                result = self.run_and_tear_down()
        except BaseException as err:
            # job.json says Failed when the engine was lost; otherwise the run was cut short.
            stopped = isinstance(err, (KeyboardInterrupt, Interrupted))
            final = Status.STOPPED if stopped else Status.FAILED
            step = SecondaryStatus.STOPPED if stopped else SecondaryStatus.FAILED
            if not self.journal.transitions or self.journal.transitions[-1]["Status"] != step:
                self.journal.transition(step, FINAL_MESSAGES[step], record=False)
            self.journal.record(final)
            self.release_warm_pool(kept=stopped and self.started)
            raise
        self.journal.record(result.status)
        # The service keeps the pool after a job that completed, was stopped, or failed of its own
        # (an algorithm error), not after an internal error (train-warm-pools.html, Warm pool creation).
        self.release_warm_pool(kept=result.status != Status.FAILED or result.failure_reason != INTERNAL_ERROR)
        return result

    def take_warm_pool(self) -> None:
        """A job with a keep-alive takes the Available warm pool it matches (its cache folders) or
        starts its own (emulator/run/warm_pools.py); said on the console either way."""
        plan, keep = self.plan, self.plan.spec.keep_alive_period_in_seconds
        if keep <= 0:
            return
        try:
            reused = warm_pools.start(plan.spec, plan.job_name, Path(plan.job_dir), [h.name for h in plan.hosts])
        except OSError as err:  # the state folder or the job folder cannot be written: the job goes on
            self.reporter.warn(f"warm pool: {err}; the job runs without one")
            return
        if reused is not None:
            self.reporter.info(f"warm pool: reusing the pool of {reused.job} (Available for "
                               f"{reused.retained_seconds(self.now())} s): new containers, its "
                               f"{warm_pools.CACHE_TARGET} folders")
        else:
            self.reporter.info(f"warm pool: no Available pool matches this job; its own is kept {keep} s after it "
                               "ends, for a matching job to reuse")

    def release_warm_pool(self, kept: bool) -> None:
        """The job ended: its warm pool is Available for the keep-alive, or Terminated."""
        if self.plan.spec.keep_alive_period_in_seconds <= 0:
            return
        try:
            warm_pools.retain(self.plan.job_name, kept=kept)
        except OSError as err:
            self.reporter.warn(f"warm pool: {err}")

    def run_and_tear_down(self) -> JobResult:
        """Run the hosts and describe the job; what the run created is removed (or kept) however it ends."""
        try:
            return self.run_and_describe()
        finally:
            self.tear_down()

    def run_and_describe(self) -> JobResult:
        """Run the hosts to their end, collect the artifacts and write job.json. An engine that stopped
        answering mid-job still gets its job.json and artifacts written, then its error is raised."""
        ran, logs = self.run_attempts()
        end = self.now()
        collected = self.collect(ran)
        result = self.describe(ran, logs, end, collected)
        if ran.lost is not None:
            raise ran.lost
        return result

    def run_attempts(self) -> tuple[HostsOutcome, LogCollector]:
        """Run the hosts until the job ends; an injected fault ends an attempt, and the job starts
        again on new hosts (a spot interruption; a platform error while retries are left) or fails
        (a platform error with none left). Returns the last attempt and its logs."""
        retries = self.plan.spec.max_retry_attempts or 0
        while True:
            logs = LogCollector(self.plan, self.reporter)  # appends to each host's log file
            ran = self.run_hosts(logs)
            fault, self.fault = self.fault, None
            if fault is None or ran.lost is not None:
                return ran, logs
            errors = 1 + sum(1 for a in self.done_attempts if a.ending == "platform-error")
            if fault.kind == "platform-error" and errors > retries:
                # The last attempt: its hosts' time is the job's own, not an earlier attempt's.
                ran.status, ran.secondary, ran.reason = Status.FAILED, SecondaryStatus.FAILED, INTERNAL_ERROR
                return ran, logs
            number = len(self.done_attempts) + 1
            self.done_attempts.append(attempts.Attempt(number, ran.t0, time.monotonic(), fault.kind))
            self.start_again(ran, number)

    def start_again(self, ran: HostsOutcome, number: int) -> None:
        """The job starts again on new hosts, as the service does after a spot interruption or for a
        retry: what the hosts wrote reaches the checkpoint URI, their containers go, and new ones get
        a fresh /opt/ml with the checkpoints restored."""
        plan, reporter = self.plan, self.reporter
        self.fix_ownership()
        self.sync_checkpoints()
        self.past_spans += outputs.timeline_spans(plan.hosts, self.exits(), ran.t0, self.masker, attempt=number)
        self.gateway_stopped()
        with reporter.task(f"removing the {len(self.created)} containers of attempt {number}"):
            self.backend.remove(plan)
        self.new_attempt()
        reporter.step(f"attempt {number + 1}: new hosts, the checkpoints restored from "
                      f"{plan.spec.checkpoint_uri or plan.spec.checkpoint_s3_uri}" if plan.spec.checkpoint_s3_uri
                      else f"attempt {number + 1}: new hosts (no checkpoint_s3_uri: the script starts from zero)")
        staging.fresh_hosts(plan, reporter.info)
        self.journal.transition(SecondaryStatus.STARTING, "Preparing the instances for training")
        self.journal.transition(SecondaryStatus.DOWNLOADING, "Downloading input data")

    def run_hosts(self, logs: LogCollector) -> HostsOutcome:
        """Create the network and the hosts, start them together and supervise them until the job's
        end; a Ctrl-C stops them (Stopped), an engine that stops answering ends the wait (`lost`).
        Every stream is read to its end and the log files closed, however it ends."""
        plan, reporter = self.plan, self.reporter
        ran = HostsOutcome(start=self.now(), t0=time.monotonic())
        try:
            # Pipe channels' epoch-0 FIFOs exist before any host starts; every feeder is stopped
            # and its FIFOs removed when the block ends, however it ends (emulator.run.pipes).
            # A swarm copies the image to its nodes and checks they see the job folder.
            self.backend.prepare(plan, reporter, self.options.grace)
            # Checkpoints are copied to the checkpoint URI while the hosts run (emulator/run/checkpoints.py).
            # The job's AWS endpoint serves its hosts' calls while they run (emulator/run/job_aws.py).
            with pipes.serve(plan, reporter.warn), checkpoints.live(plan) as syncs, \
                    job_aws.endpoint(plan, self.aws_endpoint):
                self.syncs = syncs
                self.create_hosts(logs)
                self.start_hosts(ran)
                ran.status, ran.secondary, ran.reason = self.supervise(ran.t0, logs)
        except KeyboardInterrupt:
            ran.status, ran.secondary, ran.reason = Status.STOPPED, SecondaryStatus.STOPPED, None
            ran.lost = self.stop_on_interrupt()
        except DockerUnavailable as err:
            # The engine stopped answering mid-job: the hosts' files are on this machine, so the
            # artifacts and job.json are still written; then the run ends with exit code 3.
            ran.lost = err
            ran.reason = err.message
            reporter.warn(ran.reason)
        finally:
            # The gateway serves no host now; its output stream ends with it, before the hosts' are read.
            # (An engine that stopped answering is not asked: the watcher removes it with the rest.)
            if ran.lost is None:
                self.stop_gateway(wait=False)
            # Every host has exited (or never started): read each stream to its end, so the log
            # files hold every byte. Streams from an engine that stopped answering will not end.
            try:
                self.drain_logs(STREAM_END_TIMEOUT if ran.lost is None and self.started
                                else LOST_ENGINE_STREAM_TIMEOUT)
            finally:
                logs.close()
        return ran

    def create_hosts(self, logs: LogCollector) -> None:
        """The job's network and one container per host, each host's output stream attached."""
        plan, reporter = self.plan, self.reporter
        with reporter.task(f"creating network {plan.network} and {len(plan.hosts)} containers",
                           total=len(plan.hosts)) as creating:
            self.backend.create_network(plan)
            self.created_network = True
            gateway = job_aws.GatewayOutput(Path(plan.aws.files_dir) / job_aws.GATEWAY_LOG) if plan.aws else None
            made = threading.Lock()  # hosts are created concurrently (backend.create_containers)

            def created(name: str) -> None:
                with made:
                    self.created.append(name)
                    creating.advance()

            # The job's AWS gateway is made beside the hosts and started with them (`start_hosts`): each
            # host's start-up hook holds its first process until the gateway answers. Started before
            # them and waited for, it was most of what the emulator added to a job's start
            # (benchmarks/startup.py). An engine that tells a container's address only once it runs (a
            # swarm) has it running first, on its own: the hosts are given its address.
            first = gateway is not None and self.backend.capabilities.addresses_once_running
            beside: threading.Thread | None = None
            if gateway is not None and first and self.create_gateway(gateway):
                beside = threading.Thread(target=self.start_gateway, args=(gateway,), name="start-gateway",
                                          daemon=True)
            elif gateway is not None and not first:
                beside = threading.Thread(target=self.create_gateway, args=(gateway,), name="create-gateway",
                                          daemon=True)
            if beside is not None:
                beside.start()
            try:
                # Each host's stream is attached before any host starts: every byte is read.
                self.backend.create_containers(plan, plan.hosts, logs, created)
            finally:
                if beside is not None:
                    beside.join()  # the gateway's name is known to the teardown, however the creates end
            if gateway is None:
                pass
            elif self.gateway is not None and not first:
                self.gateway_beside = gateway
            elif self.gateway is None or not self.gateway_ready(gateway):
                # No host has started: they are made again without the gateway as their DNS server,
                # which would leave them no name beyond the job's (pypi.org, on a machine online).
                self.reporter.warn(f"AWS inside the job is not available: its gateway did not start "
                                   f"({gateway.last_words()}); the hosts reach no AWS")
                self.stop_gateway()
                hosts = [Resource("container", h.container.name, plan.job_name, {}) for h in plan.hosts]
                self.backend.remove_resources(hosts)
                self.created = [name for name in self.created if name not in {h.name for h in hosts}]
                self.plan = plan = job_aws.without_aws(plan)
                self.backend.create_containers(plan, plan.hosts, logs, lambda name: self.created.append(name))
        self.warn_refused_ulimits()

    def create_gateway(self, output: job_aws.GatewayOutput) -> bool:
        """Create the job's AWS gateway (emulator/run/job_aws.py), its output to `output`; whether it was
        made (what went wrong is said in `output`)."""
        aws = self.plan.aws
        assert aws is not None
        try:
            self.backend.create_containers(self.plan, [aws.gateway], output, lambda name: None)
        except EmulatorError as err:
            output.failed(err.message)
            return False
        self.gateway = aws.gateway.container.name
        return True

    def start_gateway(self, output: job_aws.GatewayOutput) -> None:
        """Start the job's AWS gateway, without waiting for it to be ready; what goes wrong is said in
        `output`."""
        assert self.gateway is not None
        try:
            self.backend.start([self.gateway])
        except EmulatorError as err:
            output.failed(err.message)

    def gateway_ready(self, output: job_aws.GatewayOutput, seconds: float = job_aws.READY_SECONDS) -> bool:
        """Whether the gateway said it is ready within `seconds`; one that has ended (an image without
        python3) is told at once, not after the wait."""
        deadline = time.monotonic() + seconds
        while not output.ready.wait(0.1):
            if time.monotonic() > deadline or self.gateway is None or not any(
                    state.running for state in self.backend.states([self.gateway])):
                return output.ready.is_set()
        return True

    def gateway_told(self, output: job_aws.GatewayOutput) -> None:
        """The gateway started with the hosts has said it is ready, or it is stopped and the hosts are
        told (their start-up hooks then stop holding them) and the user warned: the hosts run on with
        no AWS and, their DNS server gone, no name outside the job. Waited for while the hosts run,
        before they are watched: a gateway is ready within a few tenths of a second."""
        if self.gateway_ready(output, job_aws.HOLD_SECONDS):
            return
        job_aws.tell_hosts_failed(self.plan)
        self.reporter.warn(f"AWS inside the job is not available: its gateway did not start "
                           f"({output.last_words()}); the hosts reach no AWS nor any name outside the job")
        self.stop_gateway()

    def stop_gateway(self, wait: bool = True) -> None:
        """Stop the job's AWS gateway, if it runs: it serves no host once they have exited, and its
        output stream must end before the hosts' are read to their end. Its container goes with the
        job's (a kept job's too: `keep_resources`). Without `wait` the kill goes on in a thread while
        the run reads the streams and packs the artifacts: its stream ends as soon as it is killed,
        and the engine's wait for the container to stop (0.1 s) is its own; `gateway_stopped` waits
        for it before the containers are removed or kept."""
        if self.gateway is None:
            return
        name, self.gateway = self.gateway, None

        def kill() -> None:
            with contextlib.suppress(EmulatorError):
                self.backend.kill([name])

        if wait:
            kill()
            return
        self.gateway_stopping = threading.Thread(target=kill, name="stop-gateway", daemon=True)
        self.gateway_stopping.start()

    def gateway_stopped(self) -> None:
        """The gateway's kill (`stop_gateway(wait=False)`) has ended: the network's endpoints are then
        removed one at a time (backend/networks.py, moby#42119), never beside its own going."""
        if self.gateway_stopping is not None:
            self.gateway_stopping.join()
            self.gateway_stopping = None

    def start_hosts(self, ran: HostsOutcome) -> None:
        """Start every host at once; `ran` gets the moment they run (TrainingStartTime)."""
        plan, reporter = self.plan, self.reporter
        with reporter.task(f"starting {', '.join(h.name for h in plan.hosts)} together"):
            self.started = True
            # What only the end of the run needs (the timeline's SVG writer) is imported
            # while this process waits for the engine to start the hosts, not after.
            threading.Thread(target=importlib.import_module, args=("emulator.reports.timeline",),
                             name="preload-timeline").start()  # not a daemon either: see preload-job-aws
            # The gateway made beside the hosts starts with them, its errors its own (`gateway_told`).
            gateway, self.gateway_beside = self.gateway_beside, None
            starting = threading.Thread(target=self.start_gateway, args=(gateway,), name="start-gateway",
                                        daemon=True) if gateway is not None else None
            if starting is not None:
                starting.start()
            try:
                self.backend.start(self.names)
            finally:
                if starting is not None:
                    starting.join()
        ran.t0 = time.monotonic()
        ran.start = self.now()  # the hosts of this attempt run
        if self.first_t0 is None:
            self.first_t0 = ran.t0
            self.journal.training_start = ran.start  # TrainingStartTime, in the record from now on
        self.journal.transition(SecondaryStatus.TRAINING, "Training image download completed. Training in progress.",
                        at=ran.start)
        if gateway is not None:
            self.gateway_told(gateway)
        if plan.debug is not None and plan.debug.wait:
            reporter.info(f"waiting for a debugger on {debug_host.LOCALHOST}:{plan.debug.port} "
                          f"({self.host_label(plan.host(plan.debug.host).container.name)})")

    def collect(self, ran: HostsOutcome) -> Collected:
        """The hosts have exited: give their files to the user, pack the artifacts and copy the
        checkpoints back. A Ctrl-C here ends the run with no job.json (Interrupted)."""
        plan, reporter = self.plan, self.reporter
        try:
            if ran.lost is None:
                self.fix_ownership()
            reporter.step("collecting artifacts")
            self.journal.transition(SecondaryStatus.UPLOADING, "Uploading generated training model")
            packing = time.monotonic()
            model, output = artifacts.collect(plan, reporter)
            packed, packing = self.now(), time.monotonic() - packing
            self.sync_checkpoints()
        except KeyboardInterrupt:
            raise Interrupted(f"interrupted while collecting the artifacts (the hosts had finished: {ran.status}): "
                              f"no job.json was written; the logs and each host's files are under "
                              f"{plan.job_dir}") from None
        return Collected(model, output, packed, packing)

    def sync_checkpoints(self) -> None:
        """The checkpoints (and TensorBoard files) the hosts wrote, copied to their URIs; what could not
        be copied is warned about. A folder that cannot be written leaves the job's outcome as it is."""
        for sync in self.syncs:
            try:
                clashes = sync.final()
            except OSError as err:
                clashes = [str(err)[:500]]
            if clashes:
                self.reporter.warn(f"{sync.what} not fully copied to {sync.target}: {', '.join(clashes[:10])}"
                                   + (" ..." if len(clashes) > 10 else ""))

    def describe(self, ran: HostsOutcome, logs: LogCollector, end: datetime, collected: Collected) -> JobResult:
        """The job's result, its timeline.svg and job.json."""
        plan = self.plan
        hosts = outputs.host_results(plan.hosts, self.exits(), ran.t0, self.masker, logs.tail, time.monotonic())
        reason = ran.reason
        failed = self.host_of[self.first_failed].name if ran.status == Status.FAILED and self.first_failed else None
        if ran.status == Status.FAILED and reason is None:
            reason = next((h.failure_reason for h in hosts if h.host == failed), None) or "AlgorithmError"

        spans = [*self.past_spans, *outputs.timeline_spans(plan.hosts, self.exits(), ran.t0, self.masker,
                                                           several=bool(self.done_attempts))]
        outputs.write_timeline(plan, ran.status, spans, failed, self.reporter.warn)
        outputs.write_metrics_chart(plan, ran.start, self.reporter.warn)
        # The last transition is stored with the final status only after job.json is written (in
        # execute): a reader that sees the final status always finds the whole description.
        self.journal.transition(ran.secondary, FINAL_MESSAGES.get(ran.secondary, ran.secondary), at=collected.packed,
                        record=False)
        # Kept on failure only when the hosts ran and failed: not when the engine was lost (its
        # watcher removes what it can), nor for a Stopped job (the user ended it on purpose).
        self.kept = self.kept or (self.options.keep_on_failure and ran.status == Status.FAILED and ran.lost is None)
        result = JobResult(plan.job_name, ran.status, reason, hosts, Path(plan.job_dir), collected.model,
                           collected.output, self.journal.training_start or ran.start, end, ran.secondary, plan.seed,
                           self.began, collected.packed, collected.packing, self.journal.creation,
                           tuple(self.journal.transitions),
                           kept=self.kept, image_notes=plan.spec.image_notes,
                           failed_host=self.host_label(self.first_failed)
                           if ran.status == Status.FAILED and self.first_failed else None,
                           earlier_attempts_seconds=attempts.running_seconds(self.done_attempts),
                           attempts=tuple({"Attempt": a.number, "Ended": a.ending, "Seconds": round(a.seconds, 3)}
                                          for a in self.done_attempts),
                           last_start=ran.start if self.done_attempts else None)
        artifacts.write_description(plan, result)
        return result

    def tear_down(self) -> None:
        """Remove what the run created (the containers, the network, the hosts' shares), or keep it
        (--keep, --keep-on-failure on a failure). What cannot be removed costs a warning."""
        plan, reporter = self.plan, self.reporter
        self.gateway_stopped()
        if self.kept:
            # The shares stay too: a kept container restarted by hand still finds its mounts.
            self.keep_resources()
            return
        staging.unstage(plan)
        removing = (reporter.task(f"removing {len(self.created)} containers and network {plan.network}")
                    if self.created or self.created_network else contextlib.nullcontext())
        try:
            with removing:
                self.backend.remove(plan)
        except EmulatorError as err:
            # The job's own outcome stands; what could not be removed is left to the watcher
            # (backend.guard) and found by label later.
            reporter.warn(f"{err.message} ({err.hint})" if err.hint else err.message)

    def announce_debugger(self) -> None:
        """Before any host starts: where the debugger attaches, as VS Code's launch.json says it."""
        target = self.plan.debug
        if target is None:
            return
        group = self.plan.host(target.host).group
        ranks = mpi_hosts(self.plan)
        if target.host in ranks[1:]:
            # The toolkit runs mpirun on the first host of the distribution's groups
            # (sagemaker_training/environment.py `get_master_hostname`); the ranks it starts on the other
            # hosts over ssh get only the variables it forwards (mpi.py `-x`), not the debugger's.
            self.reporter.warn(f"--debug-host {target.host}: mpirun runs on {ranks[0]} and starts the ranks of "
                               f"{target.host} over ssh, without the debugger; debug {ranks[0]} instead")
        self.reporter.info(f"debugger: {target.host} ({group}) runs {self.plan.spec.entry_point} under debugpy, "
                           f"published on {debug_host.LOCALHOST}:{target.port}; attach with this .vscode/launch.json:\n"
                           + debugger.launch_json(self.plan.spec, target, group))

    def keep_resources(self) -> None:
        """Leave the containers and network in place, stopped (--keep, or --keep-on-failure on a
        failure): the watcher is told to forget them, so neither the run nor it removes them."""
        plan = self.plan
        why = "--keep" if self.options.keep else "--keep-on-failure"
        if plan.aws is not None:
            # The hosts stay for a look inside; the AWS gateway served them only while they ran.
            with contextlib.suppress(EmulatorError):
                self.backend.remove_resources([Resource("container", plan.aws.gateway.container.name,
                                                        plan.job_name, {})])
        try:
            self.backend.keep(plan)
        except EmulatorError as err:
            self.reporter.warn(f"{err.message} ({err.hint})" if err.hint else err.message)
        self.reporter.info(f"kept the stopped containers and network {plan.network} ({why}): "
                           f"`hetero-emu exec {plan.job_name} algo-N -- CMD` runs a command in a host, "
                           f"`docker cp` copies its files; `hetero-emu clean --job {plan.job_name}` removes them")

    def stop_on_interrupt(self) -> DockerUnavailable | None:
        """Ctrl-C or SIGTERM: stop every running host with the grace period, one line saying so; a
        second Ctrl-C kills them at once. Returns the error if the engine stopped answering."""
        running = self.running()
        who = ", ".join(self.host_label(n) for n in running)
        try:
            if not self.started:
                self.reporter.warn(f"interrupted before the hosts started: removing {len(self.created)} created "
                                   "container(s)")
                return None
            if not running:
                self.reporter.warn("interrupted: every host had already exited")
                return None
            self.journal.begin_stopping()
            self.reporter.warn(f"interrupted: stopping {who} (SIGTERM, SIGKILL after {self.options.grace:g} s; "
                               "Ctrl-C again kills them now)")
            try:
                self.stop_running(announce=False)
            except KeyboardInterrupt:
                running = self.running()
                self.reporter.warn(f"interrupted again: killing {', '.join(self.host_label(n) for n in running)} now")
                self.backend.kill(running)
                for state in self.backend.states(running):
                    self.record_exit(state)
        except DockerUnavailable as err:
            # The engine stopped answering while the hosts were being stopped: job.json and the
            # artifacts are still written, then the run ends with exit code 3.
            self.reporter.warn(f"{err.message} (while stopping the hosts)")
            return err
        return None

    def drain_logs(self, timeout: float) -> None:
        for name in self.backend.wait_logs(timeout=timeout):
            if timeout >= STREAM_END_TIMEOUT:
                self.reporter.warn(f"the output stream of {self.host_label(name)} did not end {timeout:g} s after "
                                   f"the host exited: logs/{self.host_of[name].name}.log may miss its last output")
        # A log file that could not be written (a full disk): the stream was closed, the job went on.
        for name, error in self.backend.stream_errors.items():
            if name in self.host_of:
                self.reporter.warn(f"logs/{self.host_of[name].name}.log is incomplete: writing it failed ({error})")

    def warn_refused_ulimits(self) -> None:
        """Once the hosts are created, one warning per ulimit the engine ran them without, when that
        matters (`ulimits_matter`)."""
        plan = self.plan
        if not self.backend.capabilities.probes_ulimits or not ulimits_matter(plan):
            return
        planned = list(dict.fromkeys(u for h in plan.hosts for u in h.container.ulimits))
        for note in ulimit_warnings(self.backend.refused_ulimits(plan, planned)):
            self.reporter.warn(note)

    def running(self) -> list[str]:
        """The hosts not seen exiting yet."""
        return [n for n in self.names if n not in self.exit_codes]

    def host_label(self, container: str) -> str:
        host = self.host_of[container]
        return f"{host.name} ({host.group})"

    def fix_ownership(self) -> None:
        """Containers run as root (as on the service); what they wrote must belong to the user who
        ran the job, or a user who is not root could not even delete it."""
        uid, gid = os.getuid(), os.getgid()
        if uid == 0 or not self.created:
            return
        try:
            self.backend.fix_ownership(self.plan, uid, gid)
        except EmulatorError as err:
            self.reporter.warn(f"files the hosts wrote under {self.plan.job_dir}/hosts stay owned by root: "
                               f"{err.message}")

    def supervise(self, t0: float, logs: LogCollector) -> tuple[Status, SecondaryStatus, str | None]:
        """Poll until every host has exited, one fails, or max_run runs out; returns the job's status,
        its SecondaryStatus and, for max_run, its FailureReason. A toolkit MPI worker that missed the
        job's orted is told on the console as soon as it is certain (emulator/run/mpi_wait.py)."""
        spec = self.plan.spec
        before = attempts.running_seconds(self.done_attempts)  # MaxRuntime counts the hosts' running time
        deadline = t0 + self.plan.max_run - before
        # MaxWait counts everything from the first start, the restarts between attempts included.
        wait_deadline = (self.first_t0 or t0) + spec.max_wait if spec.use_spot_instances and spec.max_wait \
            else float("inf")
        pending = list(self.names)
        while pending:
            exited = [state for state in self.backend.states(pending) if not state.running]
            for state in exited:
                self.record_exit(state)
                pending.remove(state.name)
            if stop_requested(self.plan):
                self.reporter.warn("stopping the job (`hetero-emu stop`)")
                self.journal.begin_stopping()
                self.stop_running()
                return Status.STOPPED, SecondaryStatus.STOPPED, None
            failed = [state for state in exited if state.exit_code != 0]
            if failed:
                # Of several hosts seen failing in one poll, blame the one that exited first: a data
                # server that died because its trainer crashed is a consequence, not the cause.
                first = min(failed, key=lambda st: (st.finished_at or float("inf"), self.names.index(st.name)))
                self.first_failed = first.name
                self.stop_running()
                # A host that failed on its own before the others were stopped (seen only now) keeps its
                # own reason, and is blamed if it failed before the one this poll saw.
                self.first_failed = self.earliest_own_failure() or first.name
                return Status.FAILED, SecondaryStatus.FAILED, None
            if pending and (fault := self.schedule.due(before + time.monotonic() - t0)) is not None:
                return self.inject(fault)
            if pending and time.monotonic() > wait_deadline:
                self.reporter.warn(f"the job has taken its max_wait ({spec.max_wait} s, restarts included): "
                                   "stopping it, as the service stops a spot job at MaxWaitTimeInSeconds")
                self.journal.begin_stopping()
                self.stop_running()
                return Status.STOPPED, SecondaryStatus.MAX_WAIT_TIME_EXCEEDED, None
            if pending and time.monotonic() > deadline:
                self.reporter.warn(f"the hosts have run max_run ({self.plan.max_run} s): stopping them, as the service "
                                   "stops a job at MaxRuntimeInSeconds; the artifacts are still uploaded")
                self.journal.begin_stopping()
                self.stop_running()
                return Status.STOPPED, SecondaryStatus.MAX_RUNTIME_EXCEEDED, None
            if pending and self.worker_wait is not None:
                by_host = {self.host_of[n].name: code for n, code in self.exit_codes.items()}
                stuck = self.worker_wait.poll(time.monotonic(), by_host, logs.recent)
                if stuck is not None:
                    self.reporter.warn(stuck)
            if pending:
                self.backend.wait_exits(pending, POLL_SECONDS)
        return Status.COMPLETED, SecondaryStatus.COMPLETED, None

    def inject(self, fault: faults.Injection) -> tuple[Status, SecondaryStatus, str | None]:
        """An injected fault ends this attempt: a spot interruption stops every host as the service
        does when EC2 reclaims the capacity (SIGTERM, then the grace period); a platform error loses
        them at once (SIGKILL). `run_attempts` then starts the job again, or fails it."""
        self.fault = fault
        hosts = ", ".join(self.host_label(n) for n in self.running())
        if fault.kind == "spot-interruption":
            self.reporter.warn(f"spot interruption (injected: {fault}): the spot capacity is reclaimed; stopping "
                               f"{hosts} (SIGTERM, SIGKILL after {self.options.grace:g} s); the job starts again on "
                               "new hosts")
            self.journal.transition(SecondaryStatus.INTERRUPTED, SPOT_INTERRUPTED)
            self.stop_running(announce=False)
            return Status.IN_PROGRESS, SecondaryStatus.INTERRUPTED, None
        errors = 1 + sum(1 for a in self.done_attempts if a.ending == "platform-error")
        retries = self.plan.spec.max_retry_attempts or 0
        left = (f"retry {errors} of {retries} (RetryStrategy): the job starts again on new hosts" if errors <= retries
                else f"no retry left (RetryStrategy: {retries})" if retries else "no RetryStrategy: the job fails")
        self.reporter.warn(f"platform error (injected: {fault}): the instances are lost; killing {hosts}; {left}")
        running = self.running()
        self.stopped_by_us.update(running)
        self.backend.kill(running)
        for state in self.backend.states(running):
            self.record_exit(state)
        if errors <= retries:
            self.journal.transition(SecondaryStatus.RESTARTING, RETRY_RESTARTING)
        return Status.IN_PROGRESS, SecondaryStatus.RESTARTING, None

    def record_exit(self, state: ContainerState) -> None:
        if state.name in self.exit_codes:
            return
        self.exit_codes[state.name] = state.exit_code
        self.exit_times[state.name] = time.monotonic()
        self.engine_times[state.name] = (state.started_at, state.finished_at)
        if state.oom_killed:
            self.oom.add(state.name)
        if state.error:
            self.errors[state.name] = state.error

    def exits(self) -> outputs.HostExits:
        """What the run saw of this attempt's hosts, for what it writes of them (emulator/run/outputs.py)."""
        return outputs.HostExits(self.exit_codes, self.exit_times, self.engine_times, self.oom, self.stopped_by_us,
                                 self.errors, self.started)

    def stop_running(self, announce: bool = True) -> None:
        running = self.running()
        if not running:
            return
        self.stopped_by_us.update(running)
        if announce:
            self.reporter.info(f"stopping {', '.join(self.host_of[n].name for n in running)} "
                               f"(SIGTERM, SIGKILL after {self.options.grace:g} s)")
        sent = time.time()
        self.backend.stop(running, grace=self.options.grace)
        for state in self.backend.states(running):
            self.record_exit(state)
            # It had exited on its own before the SIGTERM (the engine's exit time says so; the poll
            # had not seen it yet): not stopped by the emulator, its own exit and reason stand.
            if state.finished_at is not None and state.finished_at < sent - OWN_EXIT_MARGIN:
                self.stopped_by_us.discard(state.name)

    def earliest_own_failure(self) -> str | None:
        """Of the hosts that exited non-zero on their own, the one the engine saw exit first."""
        own = [n for n, code in self.exit_codes.items() if code not in (0, None) and n not in self.stopped_by_us]
        if not own:
            return None
        return min(own, key=lambda n: (self.engine_times.get(n, (None, None))[1] or float("inf"), self.names.index(n)))
