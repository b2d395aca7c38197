"""What the SDK v2 and v3 sessions both stand on: the S3 root, the region, and a boto3 session with
placeholder credentials whose every call is answered locally (`emulator.aws.stub`): SageMaker's
training jobs, S3 on the root, STS, IAM's role checks and CloudWatch Logs over the jobs' log files.

It imports no SageMaker SDK, so either major version can build on it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3

from emulator.aws import stub
from emulator.aws.cloudwatch import CloudWatch
from emulator.aws.iam import IAM
from emulator.aws.logs import Logs
from emulator.aws.s3 import S3
from emulator.aws.sts import STS
from emulator.aws.training import SageMakerTraining
from emulator.errors import UsageError
from emulator.jobs.service import TrainingJobs, driver_log
from emulator.jobspec import s3
from emulator.jobspec.faults import parse_injection
from emulator.jobspec.hardware_modes import parse_cpu_mode, parse_gpu_mode
from emulator.jobspec.request import ANY_PATH, HostPaths
from emulator.run import build_status
from emulator.training_images.ecr_images import DEFAULT_IMAGE_MAP

DEFAULT_REGION = "us-west-2"


@dataclass(frozen=True)
class LocalAws:
    s3_root: Path
    region: str
    training: SageMakerTraining
    boto_session: boto3.Session


def local_aws(*, s3_root: Path | str | None, images: Mapping[str, str] | None, region: str | None, engine: str,
              origin: str, gpus: str | None = None, cpus: str = "instance",
              inject: Sequence[str] = (), host_paths: HostPaths = ANY_PATH,
              max_parallel_trials: int | None = None) -> LocalAws:
    """The S3 root (`s3_root`, else $HETERO_EMU_S3_ROOT, else the default root, made if missing; a
    named root must exist), the region (else $AWS_REGION, $AWS_DEFAULT_REGION, us-west-2) and the
    boto3 session. `origin` is how problems with the root name the argument (`EmulatorSession(s3_root=...)`).
    `gpus` and `cpus` are every job's `--gpus` and `--cpus` (emulator/planning/hardware.py); a word that is
    not one of theirs is a UsageError here, before any job. `inject` is every job's `--inject`
    (`spot-interruption@30s`, `platform-error@1m`; emulator/jobspec/faults.py), checked here as words and
    against each job when it is created. `host_paths`: which local paths a CreateTrainingJob may
    name (any, for the user's own process; `hetero-emu serve` narrows it). `max_parallel_trials`: the
    most trials of a tuning job at once here (None: MaxParallelTrainingJobs, cut to what the machine
    holds with a warning; emulator/tuning/loop.py)."""
    session = origin.split("(")[0]
    try:
        gpu_mode = None if gpus is None else parse_gpu_mode(gpus)
        cpu_mode = parse_cpu_mode(cpus)
        injections = tuple(parse_injection(word) for word in ([inject] if isinstance(inject, str) else inject))
    except ValueError as err:
        raise UsageError(f"{session}: {err}", hint="gpus: auto, none, emulate, real or share; "
                         "cpus: instance or machine; inject: a list of KIND@TIME") from None
    with s3.given_root(s3_root, origin):
        root = s3.choose_root(None)
    if not root.named:
        root.path.mkdir(parents=True, exist_ok=True)
    elif not root.path.is_dir():
        raise UsageError(f"{root.origin}: S3 root not found: {root.path}",
                         hint="a folder whose subfolders are buckets: create it, or leave s3_root out for the "
                         "default root")
    region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or DEFAULT_REGION
    training = SageMakerTraining(root.path, region=region, images={**DEFAULT_IMAGE_MAP, **(images or {})},
                                 engine_name=engine, s3_origin=root.origin, gpus=gpu_mode, cpus=cpu_mode,
                                 inject=injections, host_paths=host_paths, max_parallel_trials=max_parallel_trials)
    boto_session = boto3.Session(aws_access_key_id="hetero-emu", aws_secret_access_key="hetero-emu",
                                 region_name=region)
    # Installed before any client exists: clients copy the session's handlers when they are made.
    stub.install(boto_session, services(training, root.path, region))
    return LocalAws(root.path, region, training, boto_session)


def services(training: SageMakerTraining, s3_root: Path, region: str) -> list[stub.Service]:
    """Every service the emulator answers, in process (`stub.install`) and over HTTP (`hetero-emu serve`)."""
    return [training, S3(s3_root, region=region), STS(), IAM(), Logs(region=region), CloudWatch()]


def telemetry_off(config: dict[str, Any] | None) -> dict[str, Any]:
    """The user's SageMaker SDK defaults (their config.yaml files, as the SDK loaded them) with the
    SDK's telemetry off: it would send a request to AWS after every job."""
    config = dict(config or {})
    config.setdefault("SchemaVersion", "1.0")
    modules = config.setdefault("SageMaker", {}).setdefault("PythonSDK", {}).setdefault("Modules", {})
    modules["TelemetryOptOut"] = True
    return config


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class DriverWarnings:
    """The `warning:` lines of a job's driver log, each once, as they are written (complete lines only:
    the driver may be writing the rest of one)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def poll(self) -> list[str]:
        try:
            with self.path.open("rb") as log:
                log.seek(self.offset)
                data = log.read(1 << 20)
        except OSError:
            return []
        complete = data[:data.rfind(b"\n") + 1]
        self.offset += len(complete)
        lines = (_ANSI.sub("", raw.decode("utf-8", errors="replace")) for raw in complete.splitlines())
        return [line for line in lines if line.startswith("warning: ")]


class LogsWithWarnings:
    """A CloudWatch Logs client that also prints each job's driver warnings (`DriverWarnings`) when
    the job's log streams are read, for SDK v3: its `train(logs=True)` reads the streams with a client
    it holds (`sagemaker.core.utils.logs.CloudWatchLogsClient`) and nothing else, so that read is the
    one moment a v3 user's console is being written for the job. The job is the stream name's first
    part (`JOB/algo-1-...`); every other call goes to the client unchanged."""

    def __init__(self, client: Any, training: TrainingJobs) -> None:
        self._client = client
        self._training = training
        self._warnings: dict[str, DriverWarnings] = {}
        self._building: dict[str, str] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def describe_log_streams(self, **params: Any) -> Any:
        self._say(str(params.get("logStreamNamePrefix") or ""))
        return self._client.describe_log_streams(**params)

    def get_log_events(self, **params: Any) -> Any:
        self._say(str(params.get("logStreamName") or ""))
        return self._client.get_log_events(**params)

    def _say(self, stream: str) -> None:
        job = stream.split("/", 1)[0]
        if not job:
            return
        if job not in self._warnings:
            self._warnings[job] = DriverWarnings(driver_log(job))
        for line in self._warnings[job].poll():
            print(line, flush=True)
        # v3's wait prints nothing of the job's status but its TrainingJobStatus: the image build a
        # starting job waits for is said here, each new message of it once (emulator/run/build_status.py).
        record = self._training.record(job)
        building = build_status.build_message(record.doc) if record is not None else None
        if building is not None and building != self._building.get(job):
            self._building[job] = building
            print(building, flush=True)
