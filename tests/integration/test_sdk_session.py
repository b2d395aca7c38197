"""The user's own SageMaker Python SDK v2 code, unchanged but for `sagemaker_session=EmulatorSession(...)`,
on the real engine: the guide's two cluster shapes through `estimator.fit`, with what the REAL
sagemaker-training toolkit tells each host asserted as the YAML tests assert it; a failing script
raising the SDK's own exception; `fit(wait=False)` then `wait()` or `stop()`; plain boto3 calls.

The SDK (pinned in the test extras) builds the request, uploads `source_dir` as sourcedir.tar.gz
and resolves the framework's ECR image itself; the emulator only answers its API calls.
"""

from __future__ import annotations

import json
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest
from sagemaker.estimator import Estimator
from sagemaker.exceptions import UnexpectedStatusException
from sagemaker.inputs import TrainingInput
from sagemaker.instance_group import InstanceGroup
from sagemaker.pytorch import PyTorch
from sagemaker.tensorflow import TensorFlow
from test_seed_clusters import (
    GUIDE_B_HOSTS,
    PROBE,
    PROBE_CHANNELS_AND_MODEL,
    assert_guide_b_host,
    assert_mpi_on_instance_group_2,
    log_tagged,
)

from emulator import api
from emulator.defaults import DEFAULT_IMAGE, PYTORCH_IMAGE
from emulator.sagemaker import EmulatorSession

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image", "no_leftovers")]

G1, G2 = "instance_group_1", "instance_group_2"
C5, P3DN = "ml.c5.18xlarge", "ml.p3dn.24xlarge"
ROLE = "arn:aws:iam::111122223333:role/SageMakerRole"
DATA = "your-training-data-storage"

# The probe, then what the job's channels hold and a model file per host.
SCRIPT = PROBE + PROBE_CHANNELS_AND_MODEL + '''
if os.environ.get("SLEEP"):
    import time
    time.sleep(float(os.environ["SLEEP"]))
'''


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text(SCRIPT)
    for folder, name in (("folder1", "a.csv"), ("folder2", "b.csv")):
        (tmp_path / "s3" / DATA / folder).mkdir(parents=True)
        (tmp_path / "s3" / DATA / folder / name).write_text("1,2\n")
    return tmp_path


@pytest.fixture
def session(project: Path) -> EmulatorSession:
    return EmulatorSession(s3_root=project / "s3")


def guide_inputs() -> dict[str, TrainingInput]:
    """The guide's two channels, each on one instance group."""
    return {
        "training": TrainingInput(s3_data_type="S3Prefix", s3_data=f"s3://{DATA}/folder1",
                                  distribution="FullyReplicated", input_mode="File", instance_groups=[G1]),
        "dummy-input-channel": TrainingInput(s3_data_type="S3Prefix", s3_data=f"s3://{DATA}/folder2",
                                             distribution="FullyReplicated", input_mode="File",
                                             instance_groups=[G2]),
    }


def job_dir(session: EmulatorSession, name: str) -> Path:
    return Path(session.training.found(name).job_dir)


@pytest.mark.usefixtures("pytorch_image")
def test_the_guides_pytorch_estimator_runs_with_each_channel_on_its_group(
        project: Path, session: EmulatorSession, capsys: pytest.CaptureFixture[str]) -> None:
    estimator = PyTorch(
        entry_point="train.py", source_dir=str(project / "code"), framework_version="2.1.0", py_version="py310",
        role=ROLE, sagemaker_session=session,
        instance_groups=[InstanceGroup(G1, C5, 1), InstanceGroup(G2, P3DN, 2)],
        hyperparameters={"epochs": 2},
    )
    estimator.fit(inputs=guide_inputs(), job_name="guide-pytorch")

    folder = job_dir(session, "guide-pytorch")
    for host, (group, _, _) in GUIDE_B_HOSTS.items():
        info = log_tagged(folder, host, "PROBE_JSON")
        assert_guide_b_host(info, host)
        # The SDK's hyperparameters reach the script typed, its own sagemaker_* ones are the toolkit's.
        assert info["hyperparameters"] == {"epochs": 2}, host
        assert info["os_env"]["TRAINING_JOB_NAME"] == "guide-pytorch"
        channels = log_tagged(folder, host, "CHANNELS_JSON")
        assert channels == ({"training": ["a.csv"]} if group == G1 else {"dummy-input-channel": ["b.csv"]}), host

    # Where the service puts the model: <output_path>/<job>/output/model.tar.gz, under the S3 root.
    bucket = session.default_bucket()
    assert estimator.model_data == f"s3://{bucket}/guide-pytorch/output/model.tar.gz"
    with tarfile.open(project / "s3" / bucket / "guide-pytorch" / "output" / "model.tar.gz") as tar:
        assert sorted(tar.getnames()) == ["algo-1.txt", "algo-2.txt", "algo-3.txt"]
    # The code went the SDK's way: sourcedir.tar.gz uploaded to the default bucket.
    assert (project / "s3" / bucket / "guide-pytorch" / "source" / "sourcedir.tar.gz").is_file()

    described = session.describe_training_job("guide-pytorch")
    # What the emulator adds (the hosts, the local image) is in job.json and `hetero-emu describe`, never
    # in the API's answer.
    emulated = api.describe("guide-pytorch")
    assert "Emulator" not in described and "Hosts" not in described
    assert described["TrainingJobStatus"] == "Completed"
    assert [t["Status"] for t in described["SecondaryStatusTransitions"]] == [
        "Starting", "Downloading", "Training", "Uploading", "Completed"]
    # The framework's ECR image as the SDK resolved it; the local image that ran it beside it.
    assert described["AlgorithmSpecification"]["TrainingImage"].endswith("/pytorch-training:2.1.0-gpu-py310")
    # Not in the engine, the PyTorch estimator's image is stood in for by the framework image of that
    # version on the nearest Python (emulator/training_images/ecr_images.py), and the job says so.
    assert emulated["Emulator"]["Image"] == PYTORCH_IMAGE
    assert emulated["Emulator"]["StandIn"]["For"] == described["AlgorithmSpecification"]["TrainingImage"]
    note = "pytorch 2.1.0 py310: running on Python 3.11 (Debian has no 3.10)"
    assert note in emulated["Emulator"]["StandIn"]["Notes"]
    assert [(h["Host"], h["InstanceGroupName"], h["ExitCode"]) for h in emulated["Hosts"]] == [
        ("algo-1", G1, 0), ("algo-2", G2, 0), ("algo-3", G2, 0)]

    # logs=True (fit's default): each host's lines with its name and group, and the status lines.
    out = capsys.readouterr().out
    assert "algo-1 (instance_group_1) | PROBE_JSON" in out
    assert "algo-3 (instance_group_2) | CHANNELS_JSON" in out
    assert "Training - Training image download completed. Training in progress." in out
    assert "Completed - Training job completed" in out
    # Then the SDK's last lines, each time by the instances of every group (the SDK's _logs_init sums them).
    times = described["TrainingTimeInSeconds"] * 3, described["BillableTimeInSeconds"] * 3
    assert f"\nTraining seconds: {times[0]}\nBillable seconds: {times[1]}\n" in out, out[-500:]
    assert "Managed Spot Training savings" not in out
    # The Python substitution, said once as the driver's warning (emulator/sagemaker/local.py).
    assert out.count(f"warning: {note}") == 1, out[-3000:]


def test_the_guides_tensorflow_estimator_with_mpi_on_one_group(
        project: Path, session: EmulatorSession) -> None:
    # The probe runs in place of the toolkit's launcher, which is asked what it was told. The
    # distribution is the guide's, verbatim; the version the one of AWS's tf.data.service example.
    g1, g2 = InstanceGroup(G1, C5, 1), InstanceGroup(G2, P3DN, 2)
    estimator = TensorFlow(
        entry_point="train.py", source_dir=str(project / "code"), framework_version="2.9.2", py_version="py39",
        role=ROLE, sagemaker_session=session, instance_groups=[g1, g2],
        distribution={"mpi": {"enabled": True, "processes_per_host": 8}, "instance_groups": [g2]},
        container_entry_point=["python3", "/opt/ml/code/train.py"],
    )
    estimator.fit(inputs=guide_inputs(), job_name="guide-tf-mpi", logs=False)

    folder = job_dir(session, "guide-tf-mpi")
    for host, group in (("algo-1", G1), ("algo-2", G2), ("algo-3", G2)):
        info = log_tagged(folder, host, "PROBE_JSON")
        assert info["current_instance_group"] == group, host
        assert_mpi_on_instance_group_2(info, host)
    assert estimator.model_data.endswith("/guide-tf-mpi/output/model.tar.gz")


@pytest.mark.usefixtures("pytorch_image")
def test_a_failing_script_raises_the_sdks_unexpected_status_exception(
        project: Path, session: EmulatorSession) -> None:
    estimator = PyTorch(
        entry_point="train.py", source_dir=str(project / "code"), framework_version="2.1.0", py_version="py310",
        role=ROLE, sagemaker_session=session,
        instance_groups=[InstanceGroup(G1, C5, 1), InstanceGroup(G2, P3DN, 1)], environment={"FAIL_ON": "algo-2"},
    )
    with pytest.raises(UnexpectedStatusException) as info:
        estimator.fit(inputs=guide_inputs(), job_name="guide-fails", logs=False)
    assert info.value.actual_status == "Failed"
    message = str(info.value)
    assert "Error for Training job guide-fails: Failed. Reason:" in message
    # The toolkit's own words from /opt/ml/output/failure, as the service words the reason (the host
    # that failed first is the emulator's own note: Emulator.FailedHost).
    assert "AlgorithmError: ExecuteUserScriptError" in message
    described = session.describe_training_job("guide-fails")
    # What the emulator adds (the hosts, the local image) is in job.json and `hetero-emu describe`, never
    # in the API's answer.
    emulated = api.describe("guide-fails")
    assert "Emulator" not in described and "Hosts" not in described
    assert described["TrainingJobStatus"] == "Failed"
    assert described["FailureReason"] in message
    # algo-2's exit failed the job; algo-1 either finished first (0) or was stopped because of it.
    codes = {h["Host"]: h["ExitCode"] for h in emulated["Hosts"]}
    assert codes["algo-2"] == 1 and emulated["Hosts"][1]["FailureReason"] == described["FailureReason"], codes
    first = emulated["Hosts"][0]["FailureReason"]
    assert first is None or first.startswith("stopped by the emulator"), first


def test_fit_without_waiting_then_stop_ends_the_job_stopped(project: Path, session: EmulatorSession) -> None:
    estimator = Estimator(
        image_uri=DEFAULT_IMAGE, entry_point="train.py", source_dir=str(project / "code"), role=ROLE,
        sagemaker_session=session, base_job_name="guide-stop",
        instance_groups=[InstanceGroup(G1, C5, 1), InstanceGroup(G2, P3DN, 1)], environment={"SLEEP": "300"},
    )
    estimator.fit(inputs=guide_inputs(), wait=False)
    job = estimator.latest_training_job
    assert job is not None and job.name.startswith("guide-stop-")
    deadline = time.monotonic() + 120
    while session.describe_training_job(job.name)["SecondaryStatus"] != "Training":
        assert time.monotonic() < deadline, "the job never started training"
        time.sleep(0.2)
    job.stop()
    job.wait(logs="None")  # Stopped is no failure: the SDK only warns
    described = session.describe_training_job(job.name)
    assert described["TrainingJobStatus"] == "Stopped"
    assert described["SecondaryStatusTransitions"][-1]["Status"] == "Stopped"


def test_fit_without_waiting_then_wait_and_plain_boto3_calls(project: Path, session: EmulatorSession) -> None:
    estimator = Estimator(
        image_uri=DEFAULT_IMAGE, entry_point="train.py", source_dir=str(project / "code"), role=ROLE,
        sagemaker_session=session, base_job_name="guide-later", instance_count=2, instance_type="ml.m5.xlarge",
        output_path=f"s3://{DATA}/models",
    )
    estimator.fit(wait=False)
    name = estimator.latest_training_job.name
    sm: Any = session.boto_session.client("sagemaker")
    listed = sm.list_training_jobs(NameContains="guide-later")["TrainingJobSummaries"]
    assert [s["TrainingJobName"] for s in listed] == [name]
    estimator.latest_training_job.wait(logs="None")
    assert sm.describe_training_job(TrainingJobName=name)["TrainingJobStatus"] == "Completed"
    assert estimator.model_data == f"s3://{DATA}/models/{name}/output/model.tar.gz"
    s3: Any = session.boto_session.client("s3")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=DATA, Prefix=f"models/{name}/output/")["Contents"]]
    assert f"models/{name}/output/model.tar.gz" in keys


def test_a_plain_boto3_create_training_job_request_runs(project: Path, session: EmulatorSession) -> None:
    """boto3 code, as the API reference writes it, through the session's boto3 session: the code
    archive uploaded with the SDK's own helper, the request written by hand."""
    archive = project / "sourcedir.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(project / "code" / "train.py", arcname="train.py")
    code_uri = session.upload_data(str(archive), bucket=DATA, key_prefix="code")
    sm: Any = session.boto_session.client("sagemaker")
    sm.create_training_job(
        TrainingJobName="boto3-job", RoleArn=ROLE,
        AlgorithmSpecification={"TrainingImage": DEFAULT_IMAGE, "TrainingInputMode": "File"},
        HyperParameters={"sagemaker_program": '"train.py"', "sagemaker_submit_directory": json.dumps(code_uri)},
        ResourceConfig={"InstanceGroups": [
            {"InstanceGroupName": G1, "InstanceType": C5, "InstanceCount": 1},
            {"InstanceGroupName": G2, "InstanceType": P3DN, "InstanceCount": 1}], "VolumeSizeInGB": 30},
        InputDataConfig=[{"ChannelName": "training", "DataSource": {"S3DataSource": {
            "S3Uri": f"s3://{DATA}/folder1", "S3DataType": "S3Prefix", "InstanceGroupNames": [G2]}}}],
        OutputDataConfig={"S3OutputPath": f"s3://{DATA}/boto3-out"},
        StoppingCondition={"MaxRuntimeInSeconds": 600},
    )
    sm.get_waiter("training_job_completed_or_stopped").wait(
        TrainingJobName="boto3-job", WaiterConfig={"Delay": 1, "MaxAttempts": 120})
    described = sm.describe_training_job(TrainingJobName="boto3-job")
    assert described["TrainingJobStatus"] == "Completed", described.get("FailureReason")
    folder = job_dir(session, "boto3-job")
    assert log_tagged(folder, "algo-2", "CHANNELS_JSON") == {"training": ["a.csv"]}
    assert log_tagged(folder, "algo-1", "CHANNELS_JSON") == {}
    assert described["ModelArtifacts"]["S3ModelArtifacts"] == f"s3://{DATA}/boto3-out/boto3-job/output/model.tar.gz"


def test_the_jobs_warnings_and_a_sessions_injected_interruption_reach_the_fit_console(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The audit's finding: warnings about a job reached only its driver's log, never `fit()`'s console.
    A spot job without checkpoints (warned: it restarts from zero) under
    `EmulatorSession(inject=["spot-interruption@8s"])` is interrupted once and completes; both warnings
    are in what fit() printed."""
    session = EmulatorSession(s3_root=project / "s3", inject=["spot-interruption@8s"])
    estimator = Estimator(
        image_uri=DEFAULT_IMAGE, entry_point="train.py", source_dir=str(project / "code"), role=ROLE,
        sagemaker_session=session, base_job_name="spot-said", instance_count=1, instance_type=C5,
        use_spot_instances=True, max_run=300, max_wait=600, environment={"SLEEP": "12"},
    )
    estimator.fit(logs=True)
    printed = capsys.readouterr().out
    assert "warning: use_spot_instances: managed spot training without checkpoint_s3_uri" in printed
    assert "warning: spot interruption (injected: spot-interruption@8s)" in printed
    job = estimator.latest_training_job
    assert job is not None
    described = session.describe_training_job(job.name)
    steps = [t["Status"] for t in described["SecondaryStatusTransitions"]]
    assert steps.count("Interrupted") == 1 and steps[-1] == "Completed"
    # fit()'s last lines are the SDK's (sagemaker/session.py, _logs_for_job), of the one instance; the
    # restart between the attempts is not billed, so the spot job saved something.
    training, billable = described["TrainingTimeInSeconds"], described["BillableTimeInSeconds"]
    assert 0 < billable < training
    assert printed.endswith(f"Training seconds: {training}\nBillable seconds: {billable}\n"
                            f"Managed Spot Training savings: {(1 - billable / training) * 100:.1f}%\n"), printed[-500:]
