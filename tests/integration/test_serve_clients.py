"""Unchanged clients against `hetero-emu serve` on the real engine, each in a process of its own with only
the variables the server's first lines say to export: the guide's SDK v2 estimator on a plain
`sagemaker.Session()`, SDK v3's `ModelTrainer`, Debian's AWS CLI v2, and the server's Ctrl-C, which
leaves running jobs to their drivers unless `--stop-jobs-on-exit`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import boto3
import pytest
from serving import Server, running_server

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image", "no_leftovers")]

REPO = Path(__file__).resolve().parents[2]
SDK3_PYTHON = REPO / ".venv-sdk3" / "bin" / "python"
ROLE = "arn:aws:iam::111122223333:role/SageMakerRole"
G1, G2 = "instance_group_1", "instance_group_2"
SCRIPT = textwrap.dedent('''
    # What the service writes on every host, read without the toolkit (a ContainerEntrypoint job has none).
    import json, os
    config = json.load(open("/opt/ml/input/config/resourceconfig.json"))
    host, group = config["current_host"], config["current_group_name"]
    channels = sorted(os.listdir("/opt/ml/input/data")) if os.path.isdir("/opt/ml/input/data") else []
    print(f"HOST {host} {group} channels={[c for c in channels if c != 'code']}", flush=True)
    os.makedirs("/opt/ml/model", exist_ok=True)
    open(f"/opt/ml/model/{host}.txt", "w").write("trained")
    if os.environ.get("SLEEP"):
        import time
        time.sleep(float(os.environ["SLEEP"]))
''')


def project(tmp: Path, server: Server) -> Path:
    (tmp / "code").mkdir(exist_ok=True)
    (tmp / "code" / "train.py").write_text(SCRIPT)
    data = server.s3_root / "training-data" / "folder1"
    data.mkdir(parents=True, exist_ok=True)
    (data / "a.csv").write_text("1,2\n")
    return tmp


def run_client(server: Server, python: Path | str, code: str, cwd: Path, timeout: float = 600) -> str:
    script = cwd / "client.py"
    script.write_text(textwrap.dedent(code))
    done = subprocess.run([str(python), str(script)], cwd=cwd, env=server.client_env(), capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout + done.stderr


@pytest.mark.usefixtures("pytorch_image")
def test_the_guides_sdk_v2_estimator_with_a_plain_session(tmp_path: Path) -> None:
    with running_server(tmp_path / "server") as server:
        folder = project(tmp_path, server)
        out = run_client(server, sys.executable, f'''
            import sagemaker
            from sagemaker.inputs import TrainingInput
            from sagemaker.instance_group import InstanceGroup
            from sagemaker.pytorch import PyTorch

            session = sagemaker.Session()
            estimator = PyTorch(
                entry_point="train.py", source_dir="code", framework_version="2.1.0", py_version="py310",
                role="{ROLE}", sagemaker_session=session,
                instance_groups=[InstanceGroup("{G1}", "ml.c5.18xlarge", 1),
                                 InstanceGroup("{G2}", "ml.p3dn.24xlarge", 2)],
                hyperparameters={{"epochs": 2}})
            training = TrainingInput(s3_data="s3://training-data/folder1", distribution="FullyReplicated",
                                     instance_groups=["{G1}"])
            estimator.fit(inputs={{"training": training}}, job_name="serve-sdk-v2")
            print("MODEL", estimator.model_data)
        ''', folder)
        # fit()'s own log printing, through CloudWatch Logs on the server: every host, with its group.
        assert "HOST algo-1 instance_group_1 channels=['training']" in out
        assert "HOST algo-3 instance_group_2 channels=[]" in out
        assert "Completed - Training job completed" in out
        bucket = f"sagemaker-{server.region}-000000000000"
        assert f"MODEL s3://{bucket}/serve-sdk-v2/output/model.tar.gz" in out
        assert (server.s3_root / bucket / "serve-sdk-v2" / "output" / "model.tar.gz").is_file()


@pytest.mark.usefixtures("pytorch_image")
def test_sdk_v3_model_trainer_with_a_plain_session(tmp_path: Path) -> None:
    if not SDK3_PYTHON.is_file():
        pytest.fail(f"{SDK3_PYTHON} is missing: scripts/setup.sh makes it")
    with running_server(tmp_path / "server") as server:
        folder = project(tmp_path, server)
        out = run_client(server, SDK3_PYTHON, f'''
            import logging, sys
            logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(name)s: %(message)s")
            from sagemaker.core.training.configs import Compute, InputData, InstanceGroup, S3DataSource, SourceCode
            from sagemaker.train import ModelTrainer

            trainer = ModelTrainer(
                role="{ROLE}",
                training_image="763104351884.dkr.ecr.{server.region}.amazonaws.com/pytorch-training:2.1.0-gpu-py310",
                source_code=SourceCode(source_dir="code", entry_script="train.py"),
                compute=Compute(instance_groups=[
                    InstanceGroup(instance_group_name="{G1}", instance_type="ml.c5.18xlarge", instance_count=1),
                    InstanceGroup(instance_group_name="{G2}", instance_type="ml.p3dn.24xlarge", instance_count=1)]),
                base_job_name="serve-sdk-v3")
            trainer.train(input_data_config=[InputData(channel_name="training", data_source=S3DataSource(
                s3_data_type="S3Prefix", s3_uri="s3://training-data/folder1",
                s3_data_distribution_type="FullyReplicated", instance_group_names=["{G1}"]))], wait=True, logs=True)
            job = trainer._latest_training_job
            job.refresh()
            print("STATUS", job.training_job_status, job.model_artifacts.s3_model_artifacts)
        ''', folder)
        (tmp_path / "v3-output.txt").write_text(out)
        assert "STATUS Completed s3://" in out, out[-3000:]
        # v3 hands its driver scripts to every host as a channel of their own (sm_drivers).
        assert "HOST algo-1 instance_group_1 channels=['sm_drivers', 'training']" in out, tmp_path / "v3-output.txt"
        assert "HOST algo-2 instance_group_2 channels=['sm_drivers']" in out


# Debian's AWS CLI v2 (scripts/setup.sh installs the awscli package), not a pip-installed v1 that may
# come first on PATH.
AWS_CLI = "/usr/bin/aws"


def aws(server: Server, *args: str, cwd: Path) -> str:
    done = subprocess.run([AWS_CLI, "--endpoint-url", server.url, *args], cwd=cwd, env=server.client_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"aws {' '.join(args)}: {done.stderr[-2000:]}"
    return done.stdout


def test_the_aws_cli_runs_a_job_and_reads_its_logs_and_model(tmp_path: Path) -> None:
    assert Path(AWS_CLI).is_file(), "Debian's awscli is missing: scripts/setup.sh installs it"
    assert "aws-cli/2." in subprocess.run([AWS_CLI, "--version"], capture_output=True, text=True).stdout
    with running_server(tmp_path / "server") as server:
        folder = project(tmp_path, server)
        (folder / "upload").mkdir()
        (folder / "upload" / "x.txt").write_text("synced")
        aws(server, "s3", "mb", "s3://cli-bucket", cwd=folder)
        aws(server, "s3", "cp", "code/train.py", "s3://cli-bucket/code/train.py", cwd=folder)
        aws(server, "s3", "sync", "upload", "s3://cli-bucket/synced", cwd=folder)
        assert (server.s3_root / "cli-bucket" / "synced" / "x.txt").read_text() == "synced"
        request = {
            "TrainingJobName": "serve-cli",
            "AlgorithmSpecification": {"TrainingImage": "hetero-emu/training:py311", "TrainingInputMode": "File",
                                       "ContainerEntrypoint": ["python3", "/opt/ml/input/data/code/train.py"]},
            "RoleArn": ROLE,
            "InputDataConfig": [{"ChannelName": "code", "DataSource": {"S3DataSource": {
                "S3DataType": "S3Prefix", "S3Uri": "s3://cli-bucket/code",
                "S3DataDistributionType": "FullyReplicated"}}}],
            "OutputDataConfig": {"S3OutputPath": "s3://cli-bucket/output"},
            "ResourceConfig": {"VolumeSizeInGB": 30, "InstanceGroups": [
                {"InstanceGroupName": G1, "InstanceType": "ml.c5.xlarge", "InstanceCount": 1},
                {"InstanceGroupName": G2, "InstanceType": "ml.c5.2xlarge", "InstanceCount": 1}]},
            "StoppingCondition": {"MaxRuntimeInSeconds": 600},
        }
        (folder / "request.json").write_text(json.dumps(request))
        created = json.loads(aws(server, "sagemaker", "create-training-job", "--cli-input-json",
                                 "file://request.json", cwd=folder))
        assert created["TrainingJobArn"].endswith(":training-job/serve-cli")
        deadline = time.monotonic() + 300
        while True:
            described = json.loads(aws(server, "sagemaker", "describe-training-job", "--training-job-name",
                                       "serve-cli", cwd=folder))
            if described["TrainingJobStatus"] != "InProgress" or time.monotonic() > deadline:
                break
            time.sleep(2)
        # The waiter polls every 120 s: asked once the job has ended, it answers at its first poll.
        aws(server, "sagemaker", "wait", "training-job-completed-or-stopped", "--training-job-name", "serve-cli",
            cwd=folder)
        assert described["TrainingJobStatus"] == "Completed", described.get("FailureReason")
        streams = json.loads(aws(server, "logs", "describe-log-streams", "--log-group-name",
                                 "/aws/sagemaker/TrainingJobs", "--log-stream-name-prefix", "serve-cli/", cwd=folder))
        names = [s["logStreamName"] for s in streams["logStreams"]]
        assert len(names) == 2 and all(n.startswith("serve-cli/algo-") for n in names)
        events = json.loads(aws(server, "logs", "get-log-events", "--log-group-name", "/aws/sagemaker/TrainingJobs",
                                "--log-stream-name", names[0], cwd=folder))
        assert any(e["message"].startswith("HOST algo-1 ") for e in events["events"])
        aws(server, "s3", "cp", "s3://cli-bucket/output/serve-cli/output/model.tar.gz", "model.tar.gz", cwd=folder)
        assert (folder / "model.tar.gz").stat().st_size > 0


def start_sleeping_job(server: Server, name: str) -> Any:
    os.environ.pop("AWS_ENDPOINT_URL", None)
    sagemaker = boto3.client("sagemaker", endpoint_url=server.url, region_name=server.region,
                             aws_access_key_id="emu", aws_secret_access_key="emu")
    s3 = boto3.client("s3", endpoint_url=server.url, region_name=server.region,
                      aws_access_key_id="emu", aws_secret_access_key="emu")
    s3.create_bucket(Bucket="sleepy", CreateBucketConfiguration={"LocationConstraint": server.region})
    s3.put_object(Bucket="sleepy", Key="code/train.py", Body=SCRIPT.encode())
    sagemaker.create_training_job(
        TrainingJobName=name, RoleArn=ROLE,
        AlgorithmSpecification={"TrainingImage": "hetero-emu/training:py311", "TrainingInputMode": "File",
                                "ContainerEntrypoint": ["python3", "/opt/ml/input/data/code/train.py"]},
        InputDataConfig=[{"ChannelName": "code", "DataSource": {"S3DataSource": {
            "S3DataType": "S3Prefix", "S3Uri": "s3://sleepy/code", "S3DataDistributionType": "FullyReplicated"}}}],
        OutputDataConfig={"S3OutputPath": "s3://sleepy/output"},
        ResourceConfig={"InstanceType": "ml.c5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 30},
        StoppingCondition={"MaxRuntimeInSeconds": 600}, Environment={"SLEEP": "300"})
    deadline = time.monotonic() + 120
    while (described := sagemaker.describe_training_job(TrainingJobName=name))["SecondaryStatus"] != "Training":
        assert described["TrainingJobStatus"] == "InProgress", described.get("FailureReason")
        assert time.monotonic() < deadline, f"the job did not start training: {described['SecondaryStatus']}"
        time.sleep(1)
    return sagemaker


RUNNING = ("InProgress", "Stopping")


def job_status(state_dir: Path, name: str) -> str:
    return str(json.loads((state_dir / "jobs" / f"{name}.json").read_text())["TrainingJobStatus"])


def test_ctrl_c_leaves_a_running_job_to_its_driver(tmp_path: Path) -> None:
    with running_server(tmp_path / "server") as server:
        start_sleeping_job(server, "outlives-server")
        code, output = server.stop()
        assert code in (0, 130) and "Traceback" not in output, output
    assert job_status(server.state_dir, "outlives-server") == "InProgress"
    stopped = subprocess.run([sys.executable, "-m", "emulator", "stop", "outlives-server"], capture_output=True,
                             text=True, timeout=120, env={**os.environ, "HETERO_EMU_STATE_DIR": str(server.state_dir)})
    assert stopped.returncode == 0, stopped.stderr
    deadline = time.monotonic() + 120
    while job_status(server.state_dir, "outlives-server") in RUNNING and time.monotonic() < deadline:
        time.sleep(1)
    assert job_status(server.state_dir, "outlives-server") == "Stopped"


def test_stop_jobs_on_exit_stops_the_jobs_it_started(tmp_path: Path) -> None:
    with running_server(tmp_path / "server", ["--stop-jobs-on-exit"]) as server:
        start_sleeping_job(server, "ends-with-server")
        code, output = server.stop()
        assert code in (0, 130) and "Traceback" not in output, output
    deadline = time.monotonic() + 120
    while job_status(server.state_dir, "ends-with-server") in RUNNING and time.monotonic() < deadline:
        time.sleep(1)
    assert job_status(server.state_dir, "ends-with-server") == "Stopped"
