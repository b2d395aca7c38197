"""EmulatorSession without an engine: it is made with no AWS account, credentials or network; the
SDK's own helpers (default bucket, upload, listing) land under the S3 root; the SDK's own errors for
bad estimator arguments still come from the SDK; what is not emulated says so."""

from __future__ import annotations

from pathlib import Path

import pytest
from botocore.exceptions import ClientError
from sagemaker.instance_group import InstanceGroup
from sagemaker.pytorch import PyTorch

from emulator.errors import UsageError
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
