"""The jobs layer's service: a machine's training jobs as the SageMaker API has them (CreateTrainingJob,
DescribeTrainingJob, StopTrainingJob, UpdateTrainingJob, ListTrainingJobs, ListTags), in the API's
shapes and with its errors, beneath every front end (the AWS service of emulator/aws/training.py, the
SDK sessions, `serve` and its page).

CreateTrainingJob checks the request at once, with every problem in the request's own words (a
`ValidationException`, as the service answers a bad request), then starts the job's driver process
(`emulator.driver`) and returns: the job runs on its own, as on the service. Jobs are found by
name in the local record of jobs (`emulator.state.job_records`), so a job started by `hetero-emu run` is described
and listed too.

A described job is the request echoed (as DescribeTrainingJob echoes it) with the record's status,
SecondaryStatusTransitions and times while it runs, and its job.json once it has ended. The image is
described as the request named it (an ECR name stays an ECR name); the local image that ran it is
under `Emulator.Image`.
"""

from __future__ import annotations

import builtins
import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from emulator.backend import Backend, ContainerState, Resource
from emulator.backend.registry import engine
from emulator.defaults import DEFAULT_ENGINE
from emulator.errors import ApiError, EmulatorError, SpecError, UsageError
from emulator.jobs import control, service_shape
from emulator.jobs.ticket import DriverTicket
from emulator.jobspec import faults, request, s3
from emulator.jobspec.faults import Injection
from emulator.jobspec.hardware_modes import CpuMode, GpuMode
from emulator.jobspec.model import MAX_KEEP_ALIVE, JobSpec
from emulator.options import RunOptions
from emulator.planning import contract, described_request
from emulator.result import SecondaryStatus, Status
from emulator.run import hostfiles, staging, warm_pools
from emulator.state import blocking, job_records

# The record type the jobs layer hands its readers (the page types what it reads with it).
from emulator.state.job_records import JobRecord as JobRecord
from emulator.training_images.ecr_images import DEFAULT_IMAGE_MAP, ImageChoice, choose_image

# The statuses a job ends in; text read from a DescribeTrainingJob answer compares equal to them.
FINAL = frozenset(status for status in Status if status.is_final)
# The folder holding the `emulator` package: the driver imports this very copy, installed or not.
PACKAGE_PARENT = Path(__file__).resolve().parents[2]
# How often `TrainingJobs.wait` looks at a job's record: a stat, so a waiting caller (the SDK session's
# fit()) is told of a new status within 20 ms of its record changing (docs/benchmarks.md, EmulatorSession).
LOOK_SECONDS = 0.02
NOT_FOUND = "Requested resource not found."  # the service's message for an unknown job name


class TrainingJobs:
    """The training jobs of this machine, beneath every front end: CreateTrainingJob's checks and the
    job's driver, DescribeTrainingJob (the emulator's view in `description`, the service's shape in
    `describe`), Stop, Update, List and ListTags, each taking and answering the API's own shapes and
    raising its errors (ApiError). `base_dir` is where relative local paths in a request resolve (the
    caller's working folder); `images` maps ECR names to local images. The AWS service
    (emulator/aws/training.py), the SDK sessions and `serve`'s page use it."""

    def __init__(self, s3_root: Path, *, region: str, images: Mapping[str, str] = DEFAULT_IMAGE_MAP,
                 engine_name: str = DEFAULT_ENGINE, base_dir: Path | None = None,
                 s3_origin: str = "the session's s3_root", gpus: GpuMode | None = None,
                 cpus: CpuMode = "instance", inject: tuple[Injection, ...] = (),
                 host_paths: request.HostPaths = request.ANY_PATH) -> None:
        self.s3_root = s3_root
        # Which local paths a request may name (emulator/jobspec/request.py `HostPaths`): any, for the
        # user's own process; S3 URIs and the --allow-host-path roots for `hetero-emu serve`.
        self.host_paths = host_paths
        self.s3_origin = s3_origin  # what problems with the root call it
        self.region = region
        self.images = dict(images)
        # Every job's `--gpus`, `--cpus` (emulator/planning/hardware.py) and `--inject` (emulator/jobspec/faults.py),
        # handed to its driver in its options (emulator/jobs/ticket.py).
        self.inject = inject
        self.options = RunOptions(images=self.images, gpus=gpus, cpus=cpus, inject=inject or None)
        self.engine_name = engine_name
        self.base_dir = base_dir or Path.cwd()
        self.drivers: dict[str, subprocess.Popen[bytes]] = {}
        self._backend: Backend | None = None
        # Each job's description (as JSON text) and ListTrainingJobs row, without WarmPoolStatus (which
        # changes with time), kept while what they were made of is the same (`_kept_key`): each call
        # otherwise described the job in full, ListTrainingJobs every job (docs/benchmarks.md, the AWS
        # endpoint).
        self._descriptions: dict[str, tuple[tuple[Any, ...] | None, str]] = {}
        self._summaries: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {}

    # ----------------------------------------------------------------------------------------------

    def create(self, params: dict[str, Any], *, tuning_job_arn: str | None = None) -> dict[str, Any]:
        """CreateTrainingJob. `tuning_job_arn`: the tuning job that launches it (a trial), which
        DescribeTrainingJob then names in `TuningJobArn`."""
        # One create at a time on this machine, from the name check to the job's record: two calls
        # with the same name a few ms apart (two notebooks, a retried call) must not both pass the
        # check before either has recorded its job (both were accepted, and the second driver
        # failed the first's job).
        folder = job_records.state_dir() / "drivers"
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / ".create.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            return self._create(params, folder, tuning_job_arn)

    def _create(self, params: dict[str, Any], folder: Path, tuning_job_arn: str | None) -> dict[str, Any]:
        name = str(params.get("TrainingJobName"))
        arn = contract.training_job_arn(name, self.region)  # in the service's words below; the job's own follows
        earlier = job_records.find(name)
        # A job of that name that is running (its folder may not exist yet), or whose output is there.
        if earlier is not None and (not earlier.status.is_final or (earlier.job_dir / "logs").exists()):
            raise ApiError("ResourceInUse", "Training job names must be unique within an AWS account and region, "
                           f"and a training job with this name already exists ({arn})")
        raw, spec, choice, overrides = self.validated(params)
        name = str(raw.get("TrainingJobName"))
        local = choice.image if choice is not None else None
        job_dir = spec.output_path / name
        if staging.folder_taken(job_dir, spec.output_s3_uri is not None):
            # Named as the request wrote it: the folder's path on this machine is the server's business.
            written = str((raw.get("OutputDataConfig") or {}).get("S3OutputPath") or spec.output_path).rstrip("/")
            raise ApiError("ResourceInUse", f"the output {written}/{name} of a training job named {name} exists "
                           "already (an earlier job's output is never overwritten): choose another job name")
        created = datetime.now(timezone.utc)
        ticket = folder / f"{name}.json"
        DriverTicket(raw, self.base_dir, self.s3_root, self.s3_origin, self.engine_name,
                     replace(self.options, created=created), overrides, self.host_paths.to_json()).write(ticket)
        transitions = [{"Status": SecondaryStatus.STARTING, "StartTime": created.isoformat(),
                        "StatusMessage": "Launching requested ML instances"}]
        job_records.record(name, job_dir, Status.IN_PROGRESS, Request=described_request.echoed(params),
                           Tags=raw.get("Tags") or [],
                           TrainingJobArn=contract.training_job_arn(name, spec.region),
                    CreationTime=created.isoformat(), SecondaryStatus=SecondaryStatus.STARTING,
                    SecondaryStatusTransitions=transitions, LocalImage=local,
                    # What stands in for the image, on which Python: described (and on serve's page) from now.
                    ImageNotes=list(choice.notes(spec.requirements is not None)) if choice is not None else [],
                    **({"TuningJobArn": tuning_job_arn} if tuning_job_arn else {}))
        proc = spawn("emulator.driver", ticket, driver_log(name))
        self.drivers[name] = proc
        job_records.record(name, job_dir, Status.IN_PROGRESS, DriverPid=proc.pid)
        return {"TrainingJobArn": contract.training_job_arn(name, spec.region)}

    def validated(self, params: Mapping[str, Any]) -> tuple[dict[str, Any], JobSpec, ImageChoice | None,
                                                          dict[str, Any]]:
        """CreateTrainingJob's checks of `params` without creating the job: the request in plain JSON
        types, the job it describes, the image that stands in for the one it names, and what the
        service sets beside it (its region). A ValidationException naming the first problem. A tuning
        job checks its trials' requests with it at its own create."""
        raw = json.loads(json.dumps(params, default=str))
        algorithm = raw.get("AlgorithmSpecification")
        choice = None
        if isinstance(algorithm, dict) and isinstance(algorithm.get("TrainingImage"), str):
            # Which image will run is decided again by the driver (it may have been built meanwhile);
            # asked here too, an ECR name nothing stands in for is refused at once.
            try:
                choice = choose_image(algorithm["TrainingImage"], self.images, self.image_present)
            except EmulatorError as err:
                raise ApiError("ValidationException", err.message + (f" ({err.hint})" if err.hint else "")) from None
        overrides = self.region_override(raw)
        try:
            with s3.given_root(self.s3_root, self.s3_origin):
                spec = request.validate_request(raw, self.base_dir, "CreateTrainingJob", overrides,
                                                host_paths=self.host_paths)
        except SpecError as err:
            raise ApiError("ValidationException", err.message) from None
        if self.inject and (found := faults.problems(self.inject, spec.max_run, spec.use_spot_instances)):
            raise ApiError("ValidationException", f"the session's inject: {found[0]}")
        return raw, spec, choice, overrides

    def image_present(self, name: str) -> bool:
        """Whether the engine has an image of this name; False when no engine answers (the driver then
        says so)."""
        try:
            return engine(self.engine_name).images.present(name)
        except EmulatorError:
            return False

    def region_override(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """The job runs in this service's region (its hosts' AWS_REGION, its ARN) unless the request
        names one: SDK v2 sends `sagemaker_region`, v3 nothing."""
        given = raw.get("HyperParameters")
        return {} if isinstance(given, dict) and "sagemaker_region" in given else {"region": self.region}

    def describe(self, params: dict[str, Any]) -> dict[str, Any]:
        """DescribeTrainingJob: the job's description in the service's shape (emulator/jobs/service_shape.py);
        what the emulator adds stays in `description` (`hetero-emu describe`, the live page)."""
        return service_shape.service_answer(self.description(self.found(str(params.get("TrainingJobName")))))

    def stop(self, params: dict[str, Any]) -> dict[str, Any]:
        record = self.found(str(params.get("TrainingJobName")))
        if record.status.is_final:
            raise ApiError("ValidationException", f"The request was rejected because the training job is in status "
                           f"{record.status}.")
        pid = record.driver_pid
        if pid is not None and self.driver_alive(record.job_name, pid):
            # Stopping from this moment, as the service answers; the driver keeps it until Stopped. Said
            # before the signal: a driver stopped while the job's image builds ends at once, and its
            # Stopped must come after this, not under it.
            job_records.record(record.job_name, record.job_dir, Status.STOPPING)
            with contextlib.suppress(ProcessLookupError):  # it ended meanwhile: `checked` ends the record
                os.kill(pid, signal.SIGTERM)
            return {}
        try:
            control.stop(record.job_name, engine_name=self.engine_name)
        except UsageError as err:
            raise ApiError("ValidationException", err.message) from None
        return {}

    def update(self, params: dict[str, Any]) -> dict[str, Any]:
        """UpdateTrainingJob: of what it can change, the warm pool's `ResourceConfig.KeepAlivePeriodInSeconds`
        (0 to 3600; 0 ends an Available pool at once; emulator/run/warm_pools.py). Profiler and remote
        debug settings are not emulated and are refused by name."""
        record = self.found(str(params.get("TrainingJobName")))
        others = sorted(k for k in params if k not in ("TrainingJobName", "ResourceConfig"))
        if others:
            raise ApiError("ValidationException", f"UpdateTrainingJob: {', '.join(others)} is not emulated; only "
                           "ResourceConfig.KeepAlivePeriodInSeconds is")
        keep = (params.get("ResourceConfig") or {}).get("KeepAlivePeriodInSeconds")
        if not isinstance(keep, int) or isinstance(keep, bool) or not 0 <= keep <= MAX_KEEP_ALIVE:
            raise ApiError("ValidationException", "ResourceConfig.KeepAlivePeriodInSeconds must be between 0 and "
                           f"{MAX_KEEP_ALIVE} seconds, got {keep!r}")
        try:
            warm_pools.update(record.job_name, keep)
        except LookupError as err:
            raise ApiError("ValidationException", str(err)) from None
        return {"TrainingJobArn": self.arn(record)}

    def list_tags(self, params: dict[str, Any]) -> dict[str, Any]:
        """ListTags of a training job: the Tags its CreateTrainingJob gave (a spec's job has none). The
        SDK's `Estimator.attach` asks it right after DescribeTrainingJob. An ARN names the job in lower
        case (`contract.training_job_arn`, as the service's ARNs do), so the job is found by that."""
        arn = str(params.get("ResourceArn"))
        kind, _, name = arn.rpartition(":")[2].partition("/")
        found = [r for r in job_records.all_jobs() if r.job_name.lower() == name.lower()] \
            if kind == "training-job" else []
        if not found:
            raise ApiError("ValidationException", f"ListTags: {arn[:300]} is not the ARN of a training job run here "
                           "(only training jobs' tags are emulated)")
        return {"Tags": found[0].tags}

    def list(self, params: dict[str, Any]) -> dict[str, Any]:
        found = [self.checked(r) for r in job_records.all_jobs()]
        if params.get("NameContains"):
            found = [r for r in found if str(params["NameContains"]).lower() in r.job_name.lower()]
        if params.get("StatusEquals"):
            found = [r for r in found if r.status == params["StatusEquals"]]
        summaries = [self.summary(r) for r in found]
        if params.get("WarmPoolStatusEquals"):
            summaries = [s for s in summaries if (s.get("WarmPoolStatus") or {}).get("Status")
                         == params["WarmPoolStatusEquals"]]
        for key, after in (("CreationTimeAfter", True), ("CreationTimeBefore", False),
                           ("LastModifiedTimeAfter", True), ("LastModifiedTimeBefore", False)):
            if isinstance(params.get(key), datetime):
                field = key.replace("After", "").replace("Before", "")
                bound = params[key]
                summaries = [s for s in summaries if (s[field] > bound) == after]
        sort_key = {"Name": "TrainingJobName", "Status": "TrainingJobStatus"}.get(str(params.get("SortBy")),
                                                                               "CreationTime")
        summaries.sort(key=lambda s: s[sort_key], reverse=params.get("SortOrder") == "Descending")
        start = page_start(params.get("NextToken"), len(summaries))
        size = int(params.get("MaxResults") or 10)
        page = summaries[start:start + size]
        out: dict[str, Any] = {"TrainingJobSummaries": [{k: v.isoformat() if isinstance(v, datetime) else v
                                                         for k, v in s.items()} for s in page]}
        if start + size < len(summaries):
            out["NextToken"] = str(start + size)
        return out

    # -- what the front ends read of the jobs: none of them reaches the records or the engine itself

    def record(self, name: str) -> JobRecord | None:
        """The job's record as it stands, or None for a name no job of this machine has had."""
        return job_records.find(name)

    def records(self) -> builtins.list[JobRecord]:
        """Every job of this machine, the most recently changed first."""
        return job_records.all_jobs()

    def wait(self, name: str, *, timeout: float | None = None, for_change: bool = False) -> JobRecord:
        """Block until the job has ended (Completed, Failed, Stopped), or with `for_change` until its
        record changes at all (a new status, step or end), for at most `timeout` seconds; the record as
        it stands then. The record is looked at every LOOK_SECONDS: a stat, and a small read when it
        changed, where a DescribeTrainingJob costs a description. An unknown job is the service's
        ValidationException; a job whose driver died is ended by the look (`checked`)."""
        before = self.found(name)
        deadline = None if timeout is None else time.monotonic() + timeout
        now = before
        while not (now.modified != before.modified if for_change else now.status.is_final):
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            time.sleep(LOOK_SECONDS if left is None else min(LOOK_SECONDS, left))
            found = job_records.find(name)
            if found is None:  # the record went (`hetero-emu clean`): nothing more will change
                break
            now = self.checked(found)
        return now

    def resources(self, name: str) -> builtins.list[Resource]:
        """The job's containers, network and volumes in the engine while they exist, by their labels."""
        return self.engine().find(name)

    def container_states(self, names: Sequence[str]) -> builtins.list[ContainerState]:
        """What the engine says of these containers now (running, exited and how)."""
        return self.engine().states(names)

    def engine(self) -> Backend:
        """The engine the jobs run on (`engine_name`), made at its first use: a describe never needs it."""
        if self._backend is None:
            self._backend = engine(self.engine_name)
        return self._backend

    # ----------------------------------------------------------------------------------------------

    def found(self, name: str) -> job_records.JobRecord:
        record = job_records.find(name)
        if record is None:
            raise ApiError("ValidationException", NOT_FOUND)
        return self.checked(record)

    def checked(self, record: job_records.JobRecord) -> job_records.JobRecord:
        """The record, Failed if its driver ended without saying how the job ended (it could not start
        it: no engine, no image, a folder it could not write), with its driver's last words."""
        pid = record.driver_pid
        if record.status not in (Status.IN_PROGRESS, Status.STOPPING) or pid is None \
                or self.driver_alive(record.job_name, pid):
            return record
        # The driver records how a job it could not run ended; this is for one that died (SIGKILL), or
        # ended between StopTrainingJob's Stopping and its signal.
        blocking.may_block()  # its log to read, the record to write
        if record.status == Status.STOPPING:
            return job_records.end(record.job_name, Status.STOPPED) or record
        log = driver_log(record.job_name)
        return job_records.end(record.job_name, Status.FAILED, f"the job's driver ended: {last_line(log)}") or record

    def driver_alive(self, name: str, pid: int) -> bool:
        return alive(self.drivers.get(name), pid)

    def description(self, record: job_records.JobRecord) -> dict[str, Any]:
        """DescribeTrainingJob's answer for the job, every part of it the caller's own. It is kept as JSON
        text while what it is made of is the same (`_kept_key`: the record, and job.json once the job has
        ended) and read from that text on each call: reading 2 KB of JSON costs a tenth of describing the
        job again, and every caller gets new objects. Only the warm pool's status is worked out anew,
        as it changes with time."""
        key = _kept_key(record)
        kept = self._descriptions.get(record.job_name)
        if key is None or kept is None or kept[0] != key:
            kept = (key, json.dumps(self._description(record), default=str))
            if key is not None:
                if len(self._descriptions) >= KEPT:
                    self._descriptions.clear()
                self._descriptions[record.job_name] = kept
        doc: dict[str, Any] = json.loads(kept[1])
        pool = warm_pools.status(record.job_name, record=record)  # now: reused or expired after job.json
        if pool is not None:
            doc["WarmPoolStatus"] = pool
        return doc

    def _description(self, record: job_records.JobRecord) -> dict[str, Any]:
        """The description without WarmPoolStatus."""
        asked = record.request
        doc = dict(asked)
        doc["TrainingJobName"] = record.job_name
        # A job stopped or failed before staging has no folder (no logs/ in it): the record describes it.
        # Only a folder with logs/ is read, never the engine: a describe never waits for Docker.
        if record.status.is_final and (record.job_dir / "logs").is_dir():
            text = job_json_text(record.job_dir)
            with contextlib.suppress(ValueError):
                ended = json.loads(text) if text else None
                if isinstance(ended, dict):
                    doc = described_request.merged(ended, asked)
        doc["TrainingJobArn"] = self.arn(record, doc)
        if isinstance(record.doc.get("TuningJobArn"), str):  # a tuning job's trial
            doc["TuningJobArn"] = record.doc["TuningJobArn"]
        if "TrainingJobStatus" not in doc or doc["TrainingJobStatus"] != record.status:
            for key in ("TrainingJobStatus", "SecondaryStatus", "SecondaryStatusTransitions", "CreationTime",
                        "LastModifiedTime", "FailureReason", "TrainingStartTime"):
                stored = {"TrainingJobStatus": record.status}.get(key, record.doc.get(key))
                if stored is not None:
                    doc[key] = stored
        requested = record.requested_image
        if requested:
            # DescribeTrainingJob names the image the request named; the local one is the emulator's note.
            # Both structures are copied before they change: they may be the record's own, which
            # job_records shares with every reader of the same file.
            doc["AlgorithmSpecification"] = {**(doc.get("AlgorithmSpecification") or {}), "TrainingImage": requested}
            # What ran (job.json's, once there is one), else what CreateTrainingJob chose.
            emulated = dict(doc.get("Emulator") or {})
            emulated.setdefault("Image", record.local_image or requested)
            if record.image_notes and "StandIn" not in emulated:
                emulated["StandIn"] = {"For": requested, "Image": emulated["Image"],
                                       "Notes": record.image_notes}
            doc["Emulator"] = emulated
        return doc

    def arn(self, record: job_records.JobRecord, described: Mapping[str, Any] | None = None) -> str:
        """The job's ARN, in the job's own region (its record's, written when it was created or first
        run, else its job.json's), whichever region the session describing it is in; this service's
        region for a job that says neither (a record written before records held it)."""
        for given in (record.arn, (described or {}).get("TrainingJobArn")):
            if isinstance(given, str):
                return given
        return contract.training_job_arn(record.job_name, self.region)

    def summary(self, record: job_records.JobRecord) -> dict[str, Any]:
        """The job's ListTrainingJobs row (times as datetimes)."""
        key = _kept_key(record)
        kept = self._summaries.get(record.job_name)
        if key is not None and kept is not None and kept[0] == key:
            row = dict(kept[1])
            pool = warm_pools.status(record.job_name, record=record)
            if pool is not None:
                row["WarmPoolStatus"] = pool
            return row
        row = self._summary(record)
        if key is not None:
            if len(self._summaries) >= KEPT:
                self._summaries.clear()
            self._summaries[record.job_name] = (key, {k: v for k, v in row.items() if k != "WarmPoolStatus"})
        return row

    def _summary(self, record: job_records.JobRecord) -> dict[str, Any]:
        described = self.description(record)
        out = {"TrainingJobName": record.job_name,
               "TrainingJobArn": described["TrainingJobArn"],
               "TrainingJobStatus": record.status,
               "SecondaryStatus": described.get("SecondaryStatus", record.status),
               "CreationTime": _time(described.get("CreationTime") or record.modified),
               "LastModifiedTime": _time(described.get("LastModifiedTime") or record.modified)}
        if described.get("TrainingEndTime"):
            out["TrainingEndTime"] = _time(described["TrainingEndTime"])
        if described.get("WarmPoolStatus"):
            out["WarmPoolStatus"] = described["WarmPoolStatus"]
        return out


KEPT = 4096  # jobs' descriptions and rows; more are made again, after those kept are dropped


def _kept_key(record: job_records.JobRecord) -> tuple[Any, ...] | None:
    """What a job's description and ListTrainingJobs row are made of, or None when that cannot be told:
    its record's version, and once it has ended its job.json's (`description` reads both; a record or
    file changed too recently to tell has no version). A running job's come from its record alone."""
    if record.version is None:
        return None
    if not record.status.is_final:
        return (record.version,)
    try:
        described = job_records.identity(os.stat(record.job_dir / "job.json"))
    except OSError:
        # No job.json: the row is the record's, unless a folder with logs/ comes (`description`).
        return (record.version, "no job.json", (record.job_dir / "logs").is_dir())
    return None if described is None else (record.version, described)


def alive(proc: subprocess.Popen[bytes] | None, pid: int) -> bool:
    """Whether the process `pid` (our child `proc`, if we started it) still runs."""
    if proc is not None and proc.pid == pid:
        return proc.poll() is None  # our child: poll() also reaps it
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def spawn(module: str, ticket: Path, log: Path) -> subprocess.Popen[bytes]:
    """`python -m module TICKET` in a session of its own (a Ctrl-C in the caller's terminal does not
    reach it), its output to `log`: a job's driver, a tuning job's loop. It imports this very copy of
    the emulator, installed or not (a script run from a checkout)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(PACKAGE_PARENT), os.environ.get("PYTHONPATH")) if p)}
    with open(log, "wb") as out:
        return subprocess.Popen([sys.executable, "-m", module, str(ticket)], stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True, env=env)


def driver_log(job: str) -> Path:
    """The log of a job's driver: its console, warnings included (EmulatorSession's fit() prints those)."""
    return job_records.state_dir() / "drivers" / f"{job}.log"


def page_start(token: Any, count: int, operation: str = "ListTrainingJobs") -> int:
    """Where a page starts: its NextToken is the index the List operation gave. Any other token is the
    service's ValidationException (its words as reported by users and mirrored by moto:
    https://github.com/getmoto/moto/pull/4256), never a failure of ours."""
    if token is None or token == "":
        return 0
    if isinstance(token, str) and token.isascii() and token.isdigit() and int(token) <= count:
        return int(token)
    raise ApiError("ValidationException", f'Invalid pagination token because "{str(token)[:200]}" is not a '
                   f"NextToken this {operation} returned.")


def _time(text: Any) -> datetime:
    stamp = datetime.fromisoformat(str(text))
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)


def last_line(path: Path) -> str:
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "its driver's log is missing"
    return lines[-1][:900] if lines else "its driver ended without a word"


# The most of a job.json read: far above any job's (a few KB; FinalMetricDataList and Hosts grow it).
JOB_JSON_LIMIT = 16 << 20


def job_json_text(folder: Path) -> str:
    """An ended job's job.json as written ("" while the job runs: it has none yet), read without
    following a link the folder may hold and at most JOB_JSON_LIMIT bytes."""
    if not blocking.allowed():
        with contextlib.suppress(OSError):
            if os.stat(folder / "job.json").st_size > blocking.QUICK_BYTES:
                blocking.may_block()  # a job.json this large is no read for `hetero-emu serve`'s event loop
    return hostfiles.read_text_bounded(folder / "job.json", JOB_JSON_LIMIT)
