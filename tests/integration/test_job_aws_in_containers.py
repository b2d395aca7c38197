"""AWS inside a job, on the real engine (emulator/run/job_aws.py): a job's hosts call AWS by its own names
with the SDK their image has, and reach the emulator's, whose S3 is the job's S3 root; the TensorFlow
toolkit's default `model_dir` in S3 works; an isolated job reaches no AWS; an image without python3
runs without it, said in one warning."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image", "no_leftovers")]

REPO = Path(__file__).resolve().parents[2]

# What a training script does with AWS: everything printed as one JSON line per host.
BOTO3_SCRIPT = """\
import json, os, boto3
from botocore.exceptions import BotoCoreError, ClientError
host = os.environ["SM_CURRENT_HOST"]
out = {"host": host}
try:
    s3 = boto3.client("s3")
    out["endpoint"] = s3.meta.endpoint_url
    s3.put_object(Bucket="job-bucket", Key=f"from-job/{host}.txt", Body=f"written by {host}".encode())
    out["read"] = s3.get_object(Bucket="job-bucket", Key="data/input.txt")["Body"].read().decode()
    out["keys"] = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="job-bucket", Prefix="data/")["Contents"])
    out["account"] = boto3.client("sts").get_caller_identity()["Account"]
    creds = boto3.Session().get_credentials()
    out["credentials"] = [creds.method, creds.get_frozen_credentials().access_key[:4]]
except (BotoCoreError, ClientError) as err:
    out["error"] = type(err).__name__
print("RESULT " + json.dumps(out), flush=True)
"""


def run(tmp_path: Path, spec: dict[str, Any], script: str, *extra: str) -> tuple[subprocess.CompletedProcess[str],
                                                                                  list[dict[str, Any]], Path]:
    """Run a job of `spec` whose code is `script` under the S3 root tmp_path/s3; its hosts' RESULT lines."""
    root = tmp_path / "s3"
    (root / "job-bucket" / "data").mkdir(parents=True, exist_ok=True)
    (root / "job-bucket" / "data" / "input.txt").write_text("from the S3 root\n")
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "train.py").write_text(script)
    name = f"{spec.pop('prefix', 'aws-inside')}-{uuid.uuid4().hex[:8]}"
    path = tmp_path / "job.yaml"
    path.write_text(json.dumps({"job_name": name, "entry_point": "train.py", "source_dir": str(code),
                                "output_path": "s3://job-bucket/output", **spec}))
    done = subprocess.run([sys.executable, "-m", "emulator.cli", "run", str(path), "--s3-root", str(root), *extra],
                          capture_output=True, text=True, timeout=600, cwd=REPO, env={**os.environ, "NO_COLOR": "1"},
                          check=False)
    logs = root / "job-bucket" / "output" / name / "logs"
    results = [json.loads(line.split("RESULT ", 1)[1]) for log in sorted(logs.glob("algo-*.log"))
               for line in log.read_text().splitlines() if "RESULT " in line]
    return done, results, root / "job-bucket" / "output" / name


TWO_GROUPS = [{"instance_group_name": "a", "instance_type": "ml.c5.xlarge", "instance_count": 1},
              {"instance_group_name": "b", "instance_type": "ml.c5.xlarge", "instance_count": 1}]


def test_a_jobs_hosts_reach_s3_and_sts_by_aws_names_with_refreshing_credentials(tmp_path: Path) -> None:
    done, results, job = run(tmp_path, {"instance_groups": TWO_GROUPS, "region": "us-west-2"}, BOTO3_SCRIPT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [r["host"] for r in results] == ["algo-1", "algo-2"]
    for result in results:
        assert "error" not in result, result
        # AWS's own endpoint name: no AWS_ENDPOINT_URL, the names resolve to the job's gateway.
        assert result["endpoint"] == "https://s3.us-west-2.amazonaws.com"
        assert result["read"] == "from the S3 root\n"
        assert result["keys"] == ["data/input.txt"]
        assert result["account"].isdigit() and len(result["account"]) == 12
        # Temporary keys (ASIA...) from the credential process, which botocore refreshes.
        assert result["credentials"] == ["custom-process", "ASIA"]
    for host in ("algo-1", "algo-2"):
        assert (tmp_path / "s3" / "job-bucket" / "from-job" / f"{host}.txt").read_text() == f"written by {host}"
    # The gateway's key and the hosts' files are gone with the run; what it printed stays.
    assert sorted(p.name for p in (job / "aws").iterdir()) == ["gateway.log"]


DOWNLOAD_SCRIPT = """\
import json, os, urllib.request
# What torchvision's MNIST does when its first mirror fails: a plain HTTPS download from a public
# bucket by its S3 name, with Python's own trust store (no botocore, no credentials).
url = "https://ossci-datasets.s3.amazonaws.com/mnist/train-labels-idx1-ubyte.gz"
try:
    body = urllib.request.urlopen(url, timeout=30).read().decode()
except Exception as err:
    body = f"{type(err).__name__}: {err}"
print("RESULT " + json.dumps({"host": os.environ["SM_CURRENT_HOST"], "body": body}), flush=True)
"""


def test_a_plain_https_download_from_an_s3_name_reads_the_s3_root(tmp_path: Path) -> None:
    public = tmp_path / "s3" / "ossci-datasets" / "mnist"
    public.mkdir(parents=True)
    (public / "train-labels-idx1-ubyte.gz").write_text("a synthetic copy")
    done, results, _ = run(tmp_path, {"instance_groups": TWO_GROUPS[:1], "prefix": "aws-download"}, DOWNLOAD_SCRIPT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert results == [{"host": "algo-1", "body": "a synthetic copy"}]


ISOLATED_SCRIPT = BOTO3_SCRIPT + """\
try:  # with keys of its own, the network is still not there
    boto3.client("s3", aws_access_key_id="AKIA", aws_secret_access_key="x").list_buckets()
except (BotoCoreError, ClientError) as err:
    print("RESULT " + json.dumps({"with_keys": type(err).__name__}), flush=True)
"""


def test_an_isolated_job_reaches_no_aws(tmp_path: Path) -> None:
    """The service gives an isolated job's containers no credentials and no network out
    (https://docs.aws.amazon.com/sagemaker/latest/dg/mkt-algo-model-internet-free.html)."""
    spec = {"instance_groups": TWO_GROUPS, "enable_network_isolation": True, "prefix": "aws-isolated"}
    done, results, job = run(tmp_path, spec, ISOLATED_SCRIPT)
    assert done.returncode == 0, done.stdout + done.stderr
    errors = [r.get("error") or r.get("with_keys") for r in results]
    assert errors == ["NoCredentialsError", "EndpointConnectionError"] * 2
    assert not (job / "aws").exists()  # no gateway was made
    assert not (tmp_path / "s3" / "job-bucket" / "from-job").exists()


def test_an_image_without_python3_runs_without_aws_and_says_so(tmp_path: Path, docker_client: Any) -> None:
    image = "hetero-emu/swarm-node:bookworm"  # Debian with the engine, no Python (images/swarm-node)
    try:
        docker_client.images.get(image)
    except Exception:  # noqa: BLE001 - docker.errors.ImageNotFound: built by scripts/test.sh
        pytest.fail(f"{image} is not built: hetero-emu image build --variant swarm-node")
    spec = {"image_uri": image, "prefix": "aws-no-python",
            "container_entry_point": ["sh", "-c", "getent hosts s3.amazonaws.com || echo NO-AWS-NAME"],
            "instance_groups": TWO_GROUPS[:1]}
    done, _, job = run(tmp_path, spec, "")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "AWS inside the job is not available: its gateway did not start" in done.stderr + done.stdout
    assert "exec python3 failed" in (job / "aws" / "gateway.log").read_text()
    assert "NO-AWS-NAME" in (job / "logs" / "algo-1.log").read_text()


TF_SCRIPT = """\
import argparse, json, os, boto3
parser = argparse.ArgumentParser()
parser.add_argument("--model_dir")
model_dir = parser.parse_known_args()[0].model_dir
bucket, _, prefix = model_dir[len("s3://"):].partition("/")
boto3.client("s3").put_object(Bucket=bucket, Key=prefix + "/checkpoint", Body=b"step 1")
print("RESULT " + json.dumps({"model_dir": model_dir, "S3_REGION": os.environ.get("S3_REGION")}), flush=True)
"""


def test_the_tensorflow_toolkits_default_model_dir_in_s3(tmp_path: Path,
                                                         framework_image: Callable[[str, str, str], str]) -> None:
    """SDK v2 sets `model_dir` to s3://<bucket>/<job>/model for a TensorFlow estimator; the toolkit asks S3
    for the bucket's region before the script starts (sagemaker_tensorflow_container/s3_utils.py
    `configure`), which failed with NoCredentialsError when a job had no AWS."""
    image = framework_image("tensorflow", "2.9.2", "py39")
    spec = {"image_uri": image, "instance_groups": TWO_GROUPS[:1], "region": "us-west-2", "prefix": "aws-tf",
            "hyperparameters": {"model_dir": "s3://job-bucket/tf-job/model"}}
    done, results, _ = run(tmp_path, spec, TF_SCRIPT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert results == [{"model_dir": "s3://job-bucket/tf-job/model", "S3_REGION": "us-west-2"}]
    assert (tmp_path / "s3" / "job-bucket" / "tf-job" / "model" / "checkpoint").read_bytes() == b"step 1"
