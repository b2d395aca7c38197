"""EmulatorSession without an engine: it is made with no AWS account, credentials or network; the
SDK's own helpers (default bucket, upload, listing) land under the S3 root; the SDK's own errors for
bad estimator arguments still come from the SDK; what is not emulated says so; the lines `fit()`
ends with are the SDK's own."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import sagemaker.session
from botocore.exceptions import ClientError
from sagemaker.exceptions import UnexpectedStatusException
from sagemaker.instance_group import InstanceGroup
from sagemaker.pytorch import PyTorch
from test_toolkit_fold import COMMAND, toolkit_block

from emulator.errors import UsageError
from emulator.reports.console import ConsoleReporter
from emulator.sagemaker import EmulatorSession

ROLE = "arn:aws:iam::111122223333:role/SageMakerRole"


@pytest.fixture(autouse=True)
def no_aws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No credentials or region from the environment, and the record of jobs in tmp_path."""
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("HETERO_EMU_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data-home"))
    monkeypatch.delenv("HETERO_EMU_S3_ROOT", raising=False)


def test_made_with_no_arguments_its_default_bucket_is_a_folder_under_the_default_root(tmp_path: Path) -> None:
    session = EmulatorSession()
    root = tmp_path / "data-home" / "hetero-emu" / "s3"
    assert session.s3_root == root
    assert session.boto_region_name == "us-west-2"
    assert session.default_bucket() == "sagemaker-us-west-2-000000000000"
    assert (root / "sagemaker-us-west-2-000000000000").is_dir()


def test_the_sdks_upload_and_listing_helpers_use_the_root(tmp_path: Path) -> None:
    (tmp_path / "s3").mkdir()
    session = EmulatorSession(s3_root=tmp_path / "s3", region="eu-central-1")
    data = tmp_path / "train.csv"
    data.write_text("1,2\n")
    uri = session.upload_data(str(data), key_prefix="datasets/train")
    assert uri == "s3://sagemaker-eu-central-1-000000000000/datasets/train/train.csv"
    assert (tmp_path / "s3" / "sagemaker-eu-central-1-000000000000" / "datasets" / "train" / "train.csv").read_text() \
        == "1,2\n"
    assert session.list_s3_files("sagemaker-eu-central-1-000000000000", "datasets/") == ["datasets/train/train.csv"]
    assert session.read_s3_file("sagemaker-eu-central-1-000000000000", "datasets/train/train.csv") == "1,2\n"


def test_a_missing_s3_root_names_the_argument(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as info:
        EmulatorSession(s3_root=tmp_path / "nope")
    assert info.value.message.startswith("EmulatorSession(s3_root=...): S3 root not found")


def test_bad_estimator_arguments_get_the_sdks_own_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    session = EmulatorSession(s3_root=tmp_path)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text("")
    with pytest.raises(ValueError, match="instance_count and instance_type cannot be set when instance_groups"):
        PyTorch(entry_point="t.py", framework_version="2.1.0", py_version="py310", role=ROLE,
                sagemaker_session=session, instance_type="ml.m5.xlarge", instance_count=1,
                instance_groups=[InstanceGroup("a", "ml.m5.xlarge", 1)]).fit(wait=False)


def test_an_operation_that_is_not_emulated_says_so_and_sends_nothing(tmp_path: Path) -> None:
    session = EmulatorSession(s3_root=tmp_path)
    with pytest.raises(ClientError) as info:
        session.sagemaker_client.list_endpoints()
    error = info.value.response["Error"]
    assert error["Code"] == "NotEmulated"
    assert error["Message"].startswith("hetero-emu does not emulate sagemaker:ListEndpoints")
    assert "CreateTrainingJob" in error["Message"]
    with pytest.raises(ClientError) as missing:
        session.describe_training_job("never-ran")
    assert missing.value.response["Error"]["Message"] == "Requested resource not found."


# DescribeTrainingJob's fields the end of `fit()` reads, for a cluster of one instance type and for a
# heterogeneous one, whose ResourceConfig has InstanceGroups instead of InstanceCount.
ONE_TYPE = {"InstanceType": "ml.c5.xlarge", "InstanceCount": 2, "VolumeSizeInGB": 30}
GROUPS = {"InstanceGroups": [{"InstanceGroupName": "data", "InstanceType": "ml.c5.xlarge", "InstanceCount": 1},
                             {"InstanceGroupName": "dnn", "InstanceType": "ml.p3.2xlarge", "InstanceCount": 2}],
          "VolumeSizeInGB": 30}
ENDED = {
    "one instance type": {"TrainingJobStatus": "Completed", "ResourceConfig": ONE_TYPE,
                          "TrainingTimeInSeconds": 61, "BillableTimeInSeconds": 61},
    "instance groups": {"TrainingJobStatus": "Completed", "ResourceConfig": GROUPS,
                        "TrainingTimeInSeconds": 61, "BillableTimeInSeconds": 61},
    "spot, interrupted": {"TrainingJobStatus": "Completed", "ResourceConfig": GROUPS, "EnableManagedSpotTraining": True,
                          "TrainingTimeInSeconds": 100, "BillableTimeInSeconds": 40},
    "spot, stopped at max_wait": {"TrainingJobStatus": "Stopped", "SecondaryStatus": "MaxWaitTimeExceeded",
                                  "ResourceConfig": GROUPS, "EnableManagedSpotTraining": True,
                                  "TrainingTimeInSeconds": 90, "BillableTimeInSeconds": 90},
}


class _NoMoreLogs:
    """A CloudWatch Logs client whose one stream has nothing left to read."""

    def describe_log_streams(self, **_: Any) -> dict[str, Any]:
        return {"logStreams": [{"logStreamName": "job/algo-1-0"}]}

    def get_log_events(self, **_: Any) -> dict[str, Any]:
        return {"events": [], "nextForwardToken": "end"}


def _answering(session: EmulatorSession, tmp_path: Path, description: dict[str, Any]) -> EmulatorSession:
    """The session, its DescribeTrainingJob answering `description` for a job whose folder is empty."""
    session.sagemaker_client = SimpleNamespace(describe_training_job=lambda **_: description)
    session.training.found = lambda name: SimpleNamespace(job_dir=tmp_path / "job")  # type: ignore[method-assign]
    return session


@pytest.mark.parametrize("case", list(ENDED))
def test_fit_ends_with_the_sdks_own_training_and_billable_seconds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], case: str) -> None:
    """What `sagemaker.Session.logs_for_job(wait=True)` prints at the end of a job against the service
    (sagemaker/session.py, `_logs_for_job`): each time multiplied by the instances (the groups' counts
    summed), and the spot savings. The SDK's own function is run on the same description for the lines
    to compare with (its sleeps skipped, its logs empty)."""
    description = ENDED[case]
    monkeypatch.setattr(sagemaker.session.time, "sleep", lambda _: None)
    sdk_session = SimpleNamespace(sagemaker_client=SimpleNamespace(describe_training_job=lambda **_: description),
                                  boto_session=SimpleNamespace(client=lambda *_, **__: _NoMoreLogs()))
    sagemaker.session._logs_for_job(sdk_session, "job", wait=True, poll=0)
    sdks = capsys.readouterr().out

    session = _answering(EmulatorSession(s3_root=tmp_path), tmp_path, description)
    session.logs_for_job("job", wait=True)
    assert capsys.readouterr().out == sdks
    instances = 2 if case == "one instance type" else 3  # the groups' 1 + 2
    assert sdks.startswith(f"Training seconds: {description['TrainingTimeInSeconds'] * instances}\n")


def test_the_seconds_are_said_only_where_the_sdk_says_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Not by `wait_for_job` (fit(logs="None")), not for a job not waited for, and not for a failed one,
    whose UnexpectedStatusException comes first."""
    session = _answering(EmulatorSession(s3_root=tmp_path), tmp_path, ENDED["spot, interrupted"])
    session.wait_for_job("job")
    session.logs_for_job("job", wait=False)
    assert "seconds" not in capsys.readouterr().out
    failed = _answering(EmulatorSession(s3_root=tmp_path), tmp_path,
                        {**ENDED["instance groups"], "TrainingJobStatus": "Failed", "FailureReason": "AlgorithmError"})
    with pytest.raises(UnexpectedStatusException):
        failed.logs_for_job("job", wait=True)
    assert "seconds" not in capsys.readouterr().out


def test_a_spot_job_of_no_whole_second_says_no_savings_rather_than_divide_by_zero(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The SDK divides by TrainingTimeInSeconds, which rounds to 0 for a job shorter than half a
    second here: its ZeroDivisionError would end `fit()`; the savings line is left out instead."""
    short = {**ENDED["spot, interrupted"], "TrainingTimeInSeconds": 0, "BillableTimeInSeconds": 0}
    _answering(EmulatorSession(s3_root=tmp_path), tmp_path, short).logs_for_job("job", wait=True)
    assert capsys.readouterr().out == "Training seconds: 0\nBillable seconds: 0\n"


def test_the_sdks_config_check_runs_once_per_config_and_still_refuses_a_bad_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK checks the whole config against its schema at every lookup of a value (about 12 per
    fit(), ~45 ms each); an EmulatorSession's config is never empty. A config found valid is checked
    once; an invalid one raises at every lookup, as the SDK's own check does."""
    import jsonschema
    import sagemaker.config.config
    import sagemaker.utils

    EmulatorSession(s3_root=tmp_path)
    checked: list[object] = []
    real = jsonschema.validate

    def counting(instance: object, schema: object, *args: Any, **kwargs: Any) -> None:
        checked.append(instance)
        real(instance, schema, *args, **kwargs)

    monkeypatch.setattr(sagemaker.config.config.jsonschema, "validate", counting)
    tags = [{"Key": "once-check", "Value": "test"}]
    config = {"SchemaVersion": "1.0", "SageMaker": {"PythonSDK": {"Modules": {"TelemetryOptOut": True}},
                                                    "TrainingJob": {"Tags": tags}}}
    for _ in range(3):
        assert sagemaker.utils.get_sagemaker_config_value(None, "SageMaker.PythonSDK.Modules.TelemetryOptOut",
                                                          sagemaker_config=config) is True
    assert len(checked) == 1
    bad = {"SchemaVersion": "1.0", "SageMaker": {"PythonSDK": {"Modules": {"TelemetryOptOut": "yes"}}}}
    for _ in range(2):
        with pytest.raises(jsonschema.ValidationError):
            sagemaker.utils.get_sagemaker_config_value(None, "SageMaker", sagemaker_config=bad)
    assert len(checked) == 3
    # What the schema tells apart is another config: a tuple is no JSON array to jsonschema.
    as_tuple = {**config, "SageMaker": {**config["SageMaker"], "TrainingJob": {"Tags": tuple(tags)}}}
    with pytest.raises(jsonschema.ValidationError):
        sagemaker.utils.get_sagemaker_config_value(None, "SageMaker", sagemaker_config=as_tuple)


def test_botocores_endpoints_are_read_once_for_the_sdks_sts_and_ecr_names(tmp_path: Path) -> None:
    import sagemaker.utils

    EmulatorSession(s3_root=tmp_path)
    assert sagemaker.utils._botocore_resolver() is sagemaker.utils._botocore_resolver()
    assert sagemaker.utils.sts_regional_endpoint("eu-west-1") == "https://sts.eu-west-1.amazonaws.com"
    assert sagemaker.utils.sts_regional_endpoint("eu-west-1") == "https://sts.eu-west-1.amazonaws.com"


def test_a_waiting_session_tells_a_change_of_the_jobs_record_before_its_poll_interval(tmp_path: Path) -> None:
    """The end of a job is seen when its record changes, not up to a poll interval later."""
    import threading
    import time

    from emulator.result import Status
    from emulator.state import job_records

    session = EmulatorSession(s3_root=tmp_path, poll_seconds=30)
    job_records.record("pause-job", tmp_path / "job", Status.IN_PROGRESS)
    paused = threading.Thread(target=session._pause, args=("pause-job",))
    started = time.monotonic()
    paused.start()
    time.sleep(0.1)
    job_records.record("pause-job", tmp_path / "job", Status.COMPLETED)
    paused.join(5)
    assert not paused.is_alive() and time.monotonic() - started < 5


def test_fit_shows_the_toolkits_dump_as_one_line_and_a_progress_bar_at_its_last_state(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """As `hetero-emu run`'s console shows them, not 150 lines per host and every state of a bar: a
    notebook's cell keeps every line it is given."""
    logs = tmp_path / "job" / "logs"
    logs.mkdir(parents=True)
    block = toolkit_block()
    text = "\n".join([*block, "epoch 1", " 10%|#   |\r 50%|#####   |\r100%|########|\r", "done"]) + "\n"
    (logs / "algo-1.log").write_bytes(text.encode())
    session = _answering(EmulatorSession(s3_root=tmp_path), tmp_path, ENDED["instance groups"])
    session.logs_for_job("job", wait=True)
    shown = [line for line in capsys.readouterr().out.splitlines() if line.startswith("algo-1 (?) |")]
    assert shown == [f"algo-1 (?) | [toolkit environment: {len(block) - 2} lines, in {logs / 'algo-1.log'}] "
                     f"invoking: {COMMAND}", "algo-1 (?) | epoch 1", "algo-1 (?) | 100%|########|",
                     "algo-1 (?) | done"]


def test_a_hosts_prefix_keeps_its_width_and_colour_from_one_poll_to_the_next() -> None:
    """Each poll prints only the hosts that wrote since the last: the prefixes are those of every host of
    the job, as `hetero-emu run` aligns them, not of that poll's hosts."""
    out = io.StringIO()
    printer = ConsoleReporter(out=out, err=io.StringIO(), colour=True)
    groups = {"algo-1": "data_group", "algo-2": "data_group", "algo-3": "train_group"}
    EmulatorSession._print(printer, [("algo-2", "data_group", "first")], groups)
    EmulatorSession._print(printer, [("algo-3", "train_group", "x"), ("algo-2", "data_group", "second")], groups)
    first, _, second = out.getvalue().splitlines()
    assert first.split(" first")[0] == second.split(" second")[0] == "\x1b[33malgo-2 (data_group)  |\x1b[0m"
