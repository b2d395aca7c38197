"""`EmulatorSession`: the SageMaker Python SDK v2's `sagemaker.Session`, served by the emulator.

Pass it as `sagemaker_session=` and the user's estimator code runs unchanged: `PyTorch(...)`,
`TensorFlow(...)` or `Estimator(...)` with `instance_groups`, `TrainingInput(..., instance_groups=...)`,
`estimator.fit(...)`. It needs no AWS account, credentials or network. Its boto3 session has
placeholder credentials and every call its clients make is answered locally (`emulator.aws.stub`):
SageMaker's training-job operations run the job on the local engine (`emulator.jobs.service`); S3
reads and writes the local S3 root (`emulator.aws.s3`); STS names a placeholder account. So the SDK
keeps doing everything it does on the service (its argument checks, the code upload, the request it
builds, the exception a failed job raises) and only the answers are local.

Two methods are the emulator's own, because the SDK's pace them for a remote service: it asks for
the job's status every 5 s (`wait_for_job`) and every 30 s while it prints logs (`logs_for_job`,
which reads CloudWatch). Here both ask every `poll_seconds`, and the logs are the hosts' own log
files, printed with `algo-N (group) |` prefixes as `hetero-emu run` prints them. Their ends are the
SDK's: the same status lines, the SDK's own `UnexpectedStatusException` with the FailureReason when
the job did not complete, and `logs_for_job`'s training and billable seconds (and spot savings)
when it did or was stopped.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import sagemaker
import sagemaker.utils
from sagemaker.config import load_sagemaker_config
from sagemaker.session import _check_job_status, _logs_init
from sagemaker.utils import secondary_training_status_changed, secondary_training_status_message

from emulator.defaults import DEFAULT_ENGINE
from emulator.jobs.service import FINAL, driver_log
from emulator.planning import contract
from emulator.reports.console import ConsoleReporter
from emulator.run import prebuild
from emulator.run.tail import LogTail
from emulator.run.toolkit_fold import EnvironmentFold
from emulator.sagemaker.local import DriverWarnings, local_aws, telemetry_off

# The SDK prints a dot per status poll while it waits without logs; one every few seconds, as on the
# service, whatever the poll interval.
DOT_SECONDS = 5.0


class EmulatorSession(sagemaker.Session):  # type: ignore[misc]  # the SDK is untyped
    """A `sagemaker.Session` whose training jobs run on this machine's Docker engine.

    `s3_root`: the folder s3://bucket/key maps to (<s3_root>/bucket/key); default $HETERO_EMU_S3_ROOT,
    else ~/.local/share/hetero-emu/s3. `images`: ECR image names -> local images, over the default
    table that runs every ECR image as the project's training image (`emulator.training_images.ecr_images`). `region`:
    the region the SDK resolves images and names buckets for (default $AWS_REGION,
    $AWS_DEFAULT_REGION, else us-west-2). `gpus` and `cpus`: every job's `hetero-emu run --gpus` and
    `--cpus` (docs/gpus.md; `gpus="emulate"` shows GPU hosts their type's GPUs without CUDA). `inject`:
    every job's `--inject`, e.g. `["spot-interruption@30s"]` (docs/service-features.md).
    `max_parallel_trials`: the most trials of a hyperparameter tuning job run at once here, whatever
    its MaxParallelTrainingJobs (default: that, cut to what this machine holds; docs/tuning.md). Other
    keyword arguments go to `sagemaker.Session`
    (`default_bucket`, `default_bucket_prefix`, ...).
    """

    def __init__(self, *, s3_root: Path | str | None = None, images: Mapping[str, str] | None = None,
                 region: str | None = None, engine: str = DEFAULT_ENGINE, poll_seconds: float = 0.2,
                 gpus: str | None = None, cpus: str = "instance", inject: Sequence[str] = (),
                 max_parallel_trials: int | None = None, **session_args: Any) -> None:
        aws = local_aws(s3_root=s3_root, images=images, region=region, engine=engine,
                        origin="EmulatorSession(s3_root=...)", gpus=gpus, cpus=cpus, inject=inject,
                        max_parallel_trials=max_parallel_trials)
        self.s3_root = aws.s3_root
        self.training = aws.training
        self.poll_seconds = poll_seconds
        _sdk_lookups_once()
        super().__init__(boto_session=aws.boto_session, sagemaker_config=telemetry_off(load_sagemaker_config()),
                         **session_args)

    def prebuild(self, estimator: Any, *, rebuild: bool = False, progress: Callable[[str], None] = print) -> Any:
        """Build the image `estimator.fit()` would run (the ECR name the SDK gives it, by this session's
        `images`; emulator/run/prebuild.py), or nothing when it is up to date, so that the
        first `fit()` does not wait for it; the build report (`image`, `built`, `seconds`). Each step is a
        line to `progress`."""
        return prebuild.build_for(estimator.training_image_uri(), images=self.training.images, rebuild=rebuild,
                                  progress=progress)

    def wait_for_job(self, job: str, poll: int = 5) -> dict[str, Any]:
        """Wait for a training job to end, as `sagemaker.Session.wait_for_job` does (its status lines,
        a dot now and then, its exception if the job did not complete)."""
        return self._watch(job, logs=False, wait=True, timeout=None)

    def wait_for_tuning_job(self, job: str, poll: int = 5) -> dict[str, Any]:
        """Wait for a hyperparameter tuning job to end, as `sagemaker.Session.wait_for_tuning_job` does
        (a dot now and then, its last status sign, its exception if the tuning job did not complete),
        asking every `poll_seconds` instead of every 5 s, and printing a line for each trial as it ends."""
        describe = self.sagemaker_client.describe_hyper_parameter_tuning_job
        signs = {"Completed": "!", "Failed": "*", "Stopped": "s"}
        shown: set[str] = set()
        last_dot = time.monotonic()
        while True:
            description: dict[str, Any] = describe(HyperParameterTuningJobName=job)
            for line in self._ended_trials(job, shown):
                print(("\n" if shown else "") + line, flush=True)
            status = description["HyperParameterTuningJobStatus"]
            if status in signs:
                print(signs[status], flush=True)
                break
            if time.monotonic() - last_dot >= DOT_SECONDS:
                print("." if status == "InProgress" else "_", end="", flush=True)
                last_dot = time.monotonic()
            time.sleep(self.poll_seconds)
        _check_job_status(job, description, "HyperParameterTuningJobStatus")
        return description

    def _ended_trials(self, job: str, shown: set[str]) -> list[str]:
        """A line for each trial of the tuning job that has ended since the last call."""
        record = self.training.tuning.record(job) or {}
        lines = []
        for note in record.get("Notes") or []:  # the loop's warnings (fewer trials at once than asked)
            if f"note:{note}" not in shown:
                shown.add(f"note:{note}")
                lines.append(f"warning: {note}")
        for trial in record.get("Trials") or []:
            name = str(trial.get("TrainingJobName"))
            if name in shown or trial.get("TrainingJobStatus") in ("InProgress", "Stopping"):
                continue
            shown.add(name)
            value = (trial.get("FinalHyperParameterTuningJobObjectiveMetric") or {}).get("Value")
            tuned = " ".join(f"{k}={v}" for k, v in sorted((trial.get("TunedHyperParameters") or {}).items()))
            lines.append(f"{name}: {trial.get('TrainingJobStatus')}"
                         + (f", objective {value:g}" if isinstance(value, (int, float)) else "") + f" ({tuned})")
        return lines

    def logs_for_job(self, job_name: str, wait: bool = False, poll: int = 10, log_type: Any = "All",
                     timeout: int | None = None) -> dict[str, Any]:
        """Print a training job's host logs (following them until the job ends when `wait`), with the
        job's status lines and, once a waited-for job has ended, its training and billable seconds, as
        `sagemaker.Session.logs_for_job` does."""
        description = self._watch(job_name, logs=log_type not in ("None", False, None), wait=wait, timeout=timeout)
        # The SDK prints them only here, not in wait_for_job, and only for a job that did not fail
        # (its _check_job_status raised before them; _watch has called it).
        if wait and description["TrainingJobStatus"] in FINAL:
            self._say_times(description)
        return description

    def _say_times(self, description: Mapping[str, Any]) -> None:
        """The lines `sagemaker.Session.logs_for_job` ends with: "Training seconds", "Billable seconds"
        and, for a managed spot job, "Managed Spot Training savings" (SDK 2.257: sagemaker/session.py,
        `_logs_for_job`, after `_check_job_status`). That function cannot be called for them alone: it
        sleeps 5 s before its first describe and reads every log again. Its words and arithmetic are
        kept here and checked against it (tests/unit/test_sdk_session_offline.py); the instance count
        is the SDK's own `_logs_init`, which sums the InstanceGroups' counts of a heterogeneous job."""
        instances = _logs_init(self.boto_session, description, job="Training")[0]
        training = description.get("TrainingTimeInSeconds")
        billable = description.get("BillableTimeInSeconds")
        if training is not None:
            print("Training seconds:", training * instances, flush=True)
        if billable is not None:
            print("Billable seconds:", billable * instances, flush=True)
            # The SDK divides by the training time: a job shorter than half a second (0 here) would
            # raise ZeroDivisionError in it; the line is left out instead.
            if description.get("EnableManagedSpotTraining") and training:
                print(f"Managed Spot Training savings: {(1 - float(billable) / training) * 100:.1f}%", flush=True)

    def _watch(self, job: str, *, logs: bool, wait: bool, timeout: float | None) -> dict[str, Any]:
        describe = self.sagemaker_client.describe_training_job
        description: dict[str, Any] = describe(TrainingJobName=job)
        shown = description
        _say(secondary_training_status_message(description, None))
        record_dir = Path(self.training.found(job).job_dir)
        group_of = _GroupOf(record_dir)
        tail = LogTail(record_dir / "logs", group_of)
        shown_lines = _ShownLines(record_dir / "logs")
        # The job's own warnings (a spec warning, an injected fault, a flood, a model file two hosts
        # wrote) are said by its driver, in another process: its log file is where they reach fit().
        warnings = DriverWarnings(driver_log(job))
        printer = ConsoleReporter(colour=None)
        end = time.monotonic() + timeout if timeout else None
        last_dot = time.monotonic()
        while True:
            ended = description["TrainingJobStatus"] in FINAL
            for line in warnings.poll():
                print(line, flush=True)
            if logs:
                final = ended or not wait
                self._print(printer, shown_lines(tail.poll(final=final), final=final), group_of.groups)
            if ended or not wait:
                break
            if end is not None and time.monotonic() > end:
                _say(f"Timeout Exceeded. {timeout} seconds elapsed.")
                break
            self._pause(job)
            description = describe(TrainingJobName=job)
            if secondary_training_status_changed(description, shown):
                _say(secondary_training_status_message(description, shown))
                shown = description
            elif not logs and time.monotonic() - last_dot >= DOT_SECONDS:
                print(".", end="", flush=True)
                last_dot = time.monotonic()
        if wait and description["TrainingJobStatus"] in FINAL:
            _check_job_status(job, description, "TrainingJobStatus")
        return description

    def _pause(self, job: str) -> None:
        """One poll interval, cut short when the job's record changes (a new status, the job's end): the
        jobs layer's `wait` looks at the record every few ms while a describe, through botocore, waits for
        the interval. The end was told up to an interval late (0.1 s on average of fit()'s wall time;
        benchmarks/vs_local_mode.py)."""
        self.training.wait(job, timeout=self.poll_seconds, for_change=True)

    @staticmethod
    def _print(printer: ConsoleReporter, lines: list[tuple[str, str, str]], groups: Mapping[str, str]) -> None:
        # Every host of the job, not only those of this batch: a host's prefix keeps its width and
        # colour from one poll to the next.
        hosts = {host: group for host, group, _ in lines} | dict(groups)
        if lines:
            printer.set_hosts(sorted(hosts.items(), key=lambda pair: contract.host_sort_key(pair[0])))
        for host, group, line in lines:
            printer.log_line(host, group, line)


# The configs the SDK has found valid, by their `_config_key`; bounded, since a caller may change its
# config between calls.
_VALID_CONFIGS: set[tuple[Any, ...]] = set()
_VALID_CONFIGS_LIMIT = 64


def _config_key(value: Any) -> Any:
    """`value` (a SageMaker config) as a hashable key that tells apart whatever its JSON schema tells
    apart (a list from a tuple, 1 from True, and every type), or None when it holds anything else."""
    if isinstance(value, dict):
        items = [(_config_key(k), _config_key(v)) for k, v in value.items()]
        return None if any(k is None or v is None for k, v in items) else ("dict", tuple(items))
    if isinstance(value, (list, tuple)):
        members = [_config_key(v) for v in value]
        return None if any(m is None for m in members) else (type(value).__name__, tuple(members))
    if value is None or type(value) in (str, int, float, bool):
        return (type(value).__name__, value)
    return None


def _sdk_lookups_once() -> None:
    """Two lookups the SDK v2 repeats at every use, each time from scratch, done once per process
    instead; the answers are the same (both are pure functions of what does not change):

    - it checks the whole SageMaker config against its JSON schema at every lookup of a config value
      (`sagemaker.utils.get_sagemaker_config_value`: about 12 per fit(), each ~45 ms, most of it
      jsonschema checking the schema itself) unless the config is empty, and an EmulatorSession's
      never is (it turns the SDK's telemetry off there). A config found valid is not checked again
      while it is the same; an invalid one still raises at each lookup;
    - it parses botocore's endpoints.json (1.2 MB, 30-100 ms) each time it names an STS or ECR
      endpoint (`sagemaker.utils._botocore_resolver`: three times for a session's default bucket,
      again for each framework image). botocore's own sessions share one resolver for all clients.

    Installed in the SDK's module, where every caller finds them; once."""
    check = getattr(sagemaker.utils, "validate_sagemaker_config", None)
    if check is not None and not getattr(check, "hetero_emu_once", False):

        def check_once(sagemaker_config: Any = None) -> None:
            key = _config_key(sagemaker_config)
            if key is not None and key in _VALID_CONFIGS:
                return
            check(sagemaker_config)
            if key is not None and len(_VALID_CONFIGS) < _VALID_CONFIGS_LIMIT:
                _VALID_CONFIGS.add(key)

        check_once.hetero_emu_once = True  # type: ignore[attr-defined]
        sagemaker.utils.validate_sagemaker_config = check_once
    resolver = getattr(sagemaker.utils, "_botocore_resolver", None)
    if resolver is not None and not getattr(resolver, "hetero_emu_once", False):
        made: list[Any] = []

        def resolver_once() -> Any:
            if not made:
                made.append(resolver())
            return made[0]

        resolver_once.hetero_emu_once = True  # type: ignore[attr-defined]
        sagemaker.utils._botocore_resolver = resolver_once


class _ShownLines:
    """The hosts' log lines as `fit()` shows them, as `hetero-emu run`'s console does
    (`emulator.run.logs`): a line rewritten with `\\r` (a progress bar) as its last state, and the
    training toolkit's ~150-line environment dump as one line per host naming the log file that keeps
    it (`emulator.run.toolkit_fold`). Otherwise a notebook's cell, which keeps every line, would hold
    each bar's every state and 150 lines of each host before its first word."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.folds: dict[str, EnvironmentFold] = {}
        self.groups: dict[str, str] = {}

    def __call__(self, lines: list[tuple[str, str, str]], *, final: bool) -> list[tuple[str, str, str]]:
        """The lines to print for `lines`, new since the last call; `final`: the hosts have no more."""
        shown: list[tuple[str, str, str]] = []
        for host, group, line in lines:
            self.groups[host] = group
            fold = self.folds.setdefault(host, EnvironmentFold(str(self.log_dir / f"{host}.log")))
            shown.extend((host, group, text) for text in fold.feed(line.rpartition("\r")[2]))
        if final:
            for host, fold in self.folds.items():
                shown.extend((host, self.groups[host], text) for text in fold.flush())
        return shown


class _GroupOf:
    """Each host's group from its resourceconfig.json, read once it is there."""

    def __init__(self, job_dir: Path) -> None:
        self.job_dir = job_dir
        self.groups: dict[str, str] = {}

    def __call__(self, host: str) -> str:
        if host not in self.groups:
            from emulator.run import hostfiles

            self.groups.update(hostfiles.host_groups(self.job_dir))
        return self.groups.get(host, "?")


def _say(text: str) -> None:
    if text:
        print(("\n" if not text.startswith("\n") else "") + text, flush=True)
        sys.stdout.flush()
