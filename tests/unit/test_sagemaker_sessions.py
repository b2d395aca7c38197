"""`emulator.sagemaker` names both SDK sessions but imports each only when asked for (SDK v2 and v3
cannot be installed together, and each session module imports its own), and the v2 session answers
the services the two share: IAM and CloudWatch Logs too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from emulator.aws.logs import GROUP
from emulator.state import job_records


def test_the_package_imports_no_session_module_until_one_is_asked_for() -> None:
    # A fresh interpreter: this one has imported the SDK and both session modules already.
    code = """
import sys
import emulator.sagemaker as package
assert "emulator.sagemaker.session" not in sys.modules and "emulator.sagemaker.v3" not in sys.modules
assert "sagemaker" not in sys.modules
assert package.EmulatorSession.__module__ == "emulator.sagemaker.session"
try:
    package.NoSuchSession
except AttributeError as err:
    print(err)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "has no attribute 'NoSuchSession'" in done.stdout


def test_the_v2_session_answers_iam_and_cloudwatch_logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from emulator.sagemaker import EmulatorSession

    monkeypatch.setenv("HETERO_EMU_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "s3").mkdir()
    (tmp_path / "job" / "logs").mkdir(parents=True)
    (tmp_path / "job" / "logs" / "algo-1.log").write_text("hello\n")
    job_records.record("a-job", tmp_path / "job", "Completed")
    session = EmulatorSession(s3_root=tmp_path / "s3", region="eu-central-1")
    logs = session.boto_session.client("logs")
    stream = logs.describe_log_streams(logGroupName=GROUP, logStreamNamePrefix="a-job/")["logStreams"][0]
    events = logs.get_log_events(logGroupName=GROUP, logStreamName=stream["logStreamName"], startFromHead=True)
    assert [e["message"] for e in events["events"]] == ["hello"]
    assert stream["arn"].startswith("arn:aws:logs:eu-central-1:000000000000:")
    role = session.boto_session.client("iam").get_role(RoleName="SageMakerRole")["Role"]
    assert role["Arn"] == "arn:aws:iam::000000000000:role/SageMakerRole"


def test_the_sessions_gpus_and_cpus_reach_every_jobs_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`EmulatorSession(gpus="emulate", cpus="machine")`: the ticket a CreateTrainingJob writes for its
    driver carries them, and the driver runs the job with them (docs/gpus.md)."""
    from emulator.jobs.ticket import DriverTicket
    from emulator.sagemaker import EmulatorSession

    monkeypatch.setenv("HETERO_EMU_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "s3").mkdir()
    session = EmulatorSession(s3_root=tmp_path / "s3", gpus="emulate", cpus="machine")
    ticket = tmp_path / "ticket.json"
    DriverTicket({}, tmp_path, tmp_path / "s3", "test", "docker", session.training.options).write(ticket)
    options = DriverTicket.read(ticket).options
    assert (options.gpus, options.cpus) == ("emulate", "machine")
    plain = EmulatorSession(s3_root=tmp_path / "s3").training
    assert (plain.options.gpus, plain.options.cpus) == (None, "instance")


def test_a_session_with_an_unknown_gpus_word_is_refused_at_once(tmp_path: Path) -> None:
    from emulator.errors import UsageError
    from emulator.sagemaker import EmulatorSession

    (tmp_path / "s3").mkdir()
    with pytest.raises(UsageError, match=r"EmulatorSession: 'cuda' is not a GPU mode: use one of auto, none, "):
        EmulatorSession(s3_root=tmp_path / "s3", gpus="cuda")


def test_the_sessions_inject_reaches_every_jobs_run_and_is_checked_against_each_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`EmulatorSession(inject=["spot-interruption@30s"])` (docs/service-features.md): the driver runs
    each job with it; a job it could never happen to (not on spot) is refused at CreateTrainingJob, and a
    word that is no KIND@TIME when the session is made."""
    from botocore.exceptions import ClientError

    from emulator.errors import UsageError
    from emulator.jobs.ticket import DriverTicket
    from emulator.jobspec.faults import Injection
    from emulator.options import RunOptions
    from emulator.sagemaker import EmulatorSession

    monkeypatch.setenv("HETERO_EMU_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "s3").mkdir()
    session = EmulatorSession(s3_root=tmp_path / "s3", inject=["spot-interruption@30s", "platform-error@1m"])
    ticket = tmp_path / "ticket.json"
    DriverTicket({}, tmp_path, tmp_path / "s3", "test", "docker", session.training.options).write(ticket)
    options = DriverTicket.read(ticket).options
    assert options.inject == (Injection(30, "spot-interruption"), Injection(60, "platform-error"))
    DriverTicket({}, tmp_path, tmp_path / "s3", "test", "docker", RunOptions()).write(ticket)
    assert DriverTicket.read(ticket).options.inject is None

    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print('hi')\n")
    on_demand = {"TrainingJobName": "not-spot", "RoleArn": "arn:aws:iam::111122223333:role/x",
                 "AlgorithmSpecification": {"TrainingImage": "hetero-emu/training:py311", "TrainingInputMode": "File"},
                 "HyperParameters": {"sagemaker_program": '"train.py"',
                                     "sagemaker_submit_directory": f'"{tmp_path / "code"}"'},
                 "ResourceConfig": {"InstanceType": "ml.c5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 30},
                 "OutputDataConfig": {"S3OutputPath": str(tmp_path / "out")},
                 "StoppingCondition": {"MaxRuntimeInSeconds": 600}}
    with pytest.raises(ClientError) as info:
        session.sagemaker_client.create_training_job(**on_demand)
    assert "the session's inject: spot-interruption@30s: only a managed spot training job is interrupted" in \
        info.value.response["Error"]["Message"]

    with pytest.raises(UsageError, match="is not KIND@TIME"):
        EmulatorSession(s3_root=tmp_path / "s3", inject=["meteor@10s"])


def test_the_drivers_warnings_are_read_once_each_and_only_whole_lines(tmp_path: Path) -> None:
    from emulator.sagemaker.local import DriverWarnings

    log = tmp_path / "driver.log"
    warnings = DriverWarnings(log)
    assert warnings.poll() == []  # no log yet
    log.write_bytes(b"[1] staging 2 hosts\nwarning: first\n\x1b[33mwarning:\x1b[0m coloured\nwarning: half")
    assert warnings.poll() == ["warning: first", "warning: coloured"]
    with log.open("ab") as out:
        out.write(b" written\nalgo-1 | not a warning\n")
    assert warnings.poll() == ["warning: half written"]
    assert warnings.poll() == []


def test_sdk_v3s_log_reads_print_the_jobs_driver_warnings_once(capsys: pytest.CaptureFixture[str],
                                                               tmp_path: Path) -> None:
    """SDK v3's train(logs=True) reads the job's streams through the client EmulatorSessionV3 gives it
    (the SDK itself is in .venv-sdk3): that client prints the job's driver warnings as it reads."""
    from emulator.aws.training import SageMakerTraining
    from emulator.jobs.service import driver_log
    from emulator.sagemaker.local import LogsWithWarnings

    calls: list[tuple[str, dict[str, Any]]] = []

    class Recording:
        def describe_log_streams(self, **params: Any) -> dict[str, Any]:
            calls.append(("describe_log_streams", params))
            return {"logStreams": []}

        def get_log_events(self, **params: Any) -> dict[str, Any]:
            calls.append(("get_log_events", params))
            return {"events": []}

        def meta(self) -> str:
            return "passed through"

    log = driver_log("v3-job")
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("[1] staging\nwarning: model.json was written by algo-1, algo-2 with different contents\n")
    logs = LogsWithWarnings(Recording(), SageMakerTraining(tmp_path, region="us-east-1"))
    logs.describe_log_streams(logGroupName="/aws/sagemaker/TrainingJobs", logStreamNamePrefix="v3-job/")
    logs.get_log_events(logGroupName="/aws/sagemaker/TrainingJobs", logStreamName="v3-job/algo-1-1")
    printed = capsys.readouterr().out.splitlines()
    assert printed == ["warning: model.json was written by algo-1, algo-2 with different contents"]
    assert [name for name, _ in calls] == ["describe_log_streams", "get_log_events"]
    assert calls[1][1]["logStreamName"] == "v3-job/algo-1-1"
    assert logs.meta() == "passed through"
