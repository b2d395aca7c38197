"""DescribeTrainingJob as it leaves `hetero-emu serve` (the JSON on the wire, before botocore's parser drops
what its model does not name) is botocore's output shape at every poll of a job's life, for a job run with
`hetero-emu run` from a spec and for one asked for with CreateTrainingJob; the SDK's `Estimator.attach`
reads each; a spec's spot, MaxWait and retry settings are described as the request's are."""

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
from botocore.exceptions import ClientError
from serving import Server, running_server

from emulator.jobs import service_shape

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image", "no_leftovers")]

ROLE = "arn:aws:iam::111122223333:role/SageMakerRole"
SCRIPT = 'import time\nprint("HOST up", flush=True)\ntime.sleep(3)\n'


def wire_answers(server: Server) -> tuple[Any, list[dict[str, Any]]]:
    """A SageMaker client over the server, and every DescribeTrainingJob body as the server sent it."""
    os.environ.pop("AWS_ENDPOINT_URL", None)
    client = boto3.client("sagemaker", endpoint_url=server.url, region_name=server.region,
                          aws_access_key_id="emu", aws_secret_access_key="emu")
    bodies: list[dict[str, Any]] = []

    def keep(response_dict: dict[str, Any], **_: Any) -> None:
        if response_dict["status_code"] == 200:  # not an error's body (the job not recorded yet)
            bodies.append(json.loads(response_dict["body"]))

    client.meta.events.register("before-parse.sagemaker.DescribeTrainingJob", keep)
    return client, bodies


def poll_to_the_end(client: Any, name: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while client.describe_training_job(TrainingJobName=name)["TrainingJobStatus"] in ("InProgress", "Stopping"):
        assert time.monotonic() < deadline, f"{name} did not end"
        time.sleep(0.3)


def checked(bodies: list[dict[str, Any]]) -> list[str]:
    """Each distinct status seen, after checking every body against the model."""
    for body in bodies:
        assert service_shape.problems(body) == [], body
    return list(dict.fromkeys(f"{b['TrainingJobStatus']}/{b['SecondaryStatus']}" for b in bodies))


def attach(client: Any, name: str) -> Any:
    import sagemaker
    from sagemaker.estimator import Estimator

    session = sagemaker.Session(boto_session=boto3.Session(region_name=client.meta.region_name,
                                                           aws_access_key_id="emu", aws_secret_access_key="emu"),
                                sagemaker_client=client)
    return Estimator.attach(name, sagemaker_session=session)


def test_a_spec_jobs_answers_over_serve_are_the_services_shape(tmp_path: Path) -> None:
    with running_server(tmp_path / "server") as server:
        client, bodies = wire_answers(server)
        (tmp_path / "code").mkdir()
        (tmp_path / "code" / "train.py").write_text(SCRIPT)
        (tmp_path / "job.yaml").write_text(textwrap.dedent("""\
            job_name: shaped-spec
            entry_point: train.py
            source_dir: code
            instance_type: ml.c5.xlarge
            instance_count: 2
            output_path: out
            max_run: 600
            use_spot_instances: true
            max_wait: 1200
            max_retry_attempts: 2
            """))
        run = subprocess.Popen([sys.executable, "-m", "emulator", "run", str(tmp_path / "job.yaml")], cwd=tmp_path,
                               env=server.client_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + 120
            while run.poll() is None and not bodies:
                try:
                    client.describe_training_job(TrainingJobName="shaped-spec")
                except ClientError:
                    assert time.monotonic() < deadline, "the job was never recorded"
                    time.sleep(0.2)
            poll_to_the_end(client, "shaped-spec")
        finally:
            output, _ = run.communicate(timeout=300)
        assert run.returncode == 0, output[-3000:]
        seen = checked(bodies)
        assert "InProgress/Training" in seen and seen[-1] == "Completed/Completed", seen
        last = bodies[-1]
        assert last["EnableManagedSpotTraining"] is True and last["RetryStrategy"] == {"MaximumRetryAttempts": 2}
        assert last["StoppingCondition"] == {"MaxRuntimeInSeconds": 600, "MaxWaitTimeInSeconds": 1200}
        assert last["TrainingJobArn"] == "arn:aws:sagemaker:us-east-1:000000000000:training-job/shaped-spec"
        attached = attach(client, "shaped-spec")
        assert (attached.instance_count, attached.max_wait, attached.output_kms_key) == (2, 1200, "")


def test_a_requested_jobs_answers_over_serve_are_the_services_shape(tmp_path: Path) -> None:
    with running_server(tmp_path / "server") as server:
        client, bodies = wire_answers(server)
        s3 = boto3.client("s3", endpoint_url=server.url, region_name=server.region,
                          aws_access_key_id="emu", aws_secret_access_key="emu")
        s3.create_bucket(Bucket="shaped", CreateBucketConfiguration={"LocationConstraint": server.region})
        s3.put_object(Bucket="shaped", Key="code/train.py", Body=SCRIPT.encode())
        client.create_training_job(
            TrainingJobName="shaped-request", RoleArn=ROLE, Tags=[{"Key": "team", "Value": "emu"}],
            AlgorithmSpecification={"TrainingImage": "hetero-emu/training:py311", "TrainingInputMode": "File",
                                    "ContainerEntrypoint": ["python3", "/opt/ml/input/data/code/train.py"]},
            InputDataConfig=[{"ChannelName": "code", "DataSource": {"S3DataSource": {
                "S3DataType": "S3Prefix", "S3Uri": "s3://shaped/code", "S3DataDistributionType": "FullyReplicated"}}}],
            OutputDataConfig={"S3OutputPath": "s3://shaped/output"},
            ResourceConfig={"InstanceType": "ml.c5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 30},
            StoppingCondition={"MaxRuntimeInSeconds": 600})
        poll_to_the_end(client, "shaped-request")
        seen = checked(bodies)
        assert seen[0].startswith("InProgress/") and seen[-1] == "Completed/Completed", seen
        assert bodies[-1]["TrainingJobArn"] == f"arn:aws:sagemaker:{server.region}:000000000000:training-job/" \
            "shaped-request"
        attached = attach(client, "shaped-request")
        assert attached.tags == [{"Key": "team", "Value": "emu"}]
        assert attached.model_data == "s3://shaped/output/shaped-request/output/model.tar.gz"
