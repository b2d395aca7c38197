"""AWS's two heterogeneous-cluster examples, as a user brings them: the notebooks' estimator calls with
only the session swapped for `EmulatorSession`, hyperparameters scaled for 2 cores, and code of the
same shape (tests/integration/aws_examples/: our own scripts using the same APIs, not AWS's code).

- PyTorch gRPC data offload (`PyTorch(framework_version="1.11.0", py_version="py38")`): the data group
  streams MNIST batches (synthetic idx files where torchvision looks for them) over gRPC, compiled from
  a .proto with grpcio-tools from requirements.txt (`torchvision`, `grpcio-tools`, `protobuf==3.20.2`);
  the trainer shuts the data server down through port 16000.
- TensorFlow tf.data.service (`TensorFlow(framework_version="2.9.2", py_version="py39")`): a dispatcher
  and workers on the data group, Horovod Keras over MPI (2 processes) on the dnn group with
  tensorflow-addons from requirements.txt; world rank 0 stops every host's data service.

Every host exits 0, the trainer's model reaches `model_data`, and the job says which image stood in
and on which Python. `max_run` is scaled down with the rest (the notebooks' 4800 and 1800 s), so a
data server left waiting fails the job within pytest's timeout.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
import struct
import tarfile
import uuid
from pathlib import Path
from typing import Any

import pytest
from sagemaker.instance_group import InstanceGroup
from sagemaker.pytorch import PyTorch
from sagemaker.tensorflow import TensorFlow

from emulator import api
from emulator.sagemaker import EmulatorSession

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("no_leftovers")]

EXAMPLES = Path(__file__).parent / "aws_examples"
ROLE = "arn:aws:iam::111122223333:role/SageMakerRole"
MPI_TAG = re.compile(r"\[\d+,\d+\]<std(?:out|err)>:")


def log(session: EmulatorSession, job: str, host: str) -> str:
    return MPI_TAG.sub("", (Path(session.training.found(job).job_dir) / "logs" / f"{host}.log").read_text())


def tagged(text: str, tag: str) -> list[dict[str, Any]]:
    """Every `<tag> {...}` in the log. Two MPI ranks' lines can arrive joined on one line (mpirun
    forwards each rank's writes as they come), so each object is decoded where its tag starts."""
    found, decoder, start = [], json.JSONDecoder(), 0
    while (at := text.find(tag + " ", start)) >= 0:
        value, start = decoder.raw_decode(text, at + len(tag) + 1)
        found.append(value)
    return found


def model_members(s3_root: Path, model_data: str) -> list[str]:
    """The names in the model.tar.gz `model_data` names, under the local S3 root."""
    bucket, key = model_data.removeprefix("s3://").split("/", 1)
    with tarfile.open(s3_root / bucket / key) as tar:
        return tar.getnames()


def synthetic_mnist(raw: Path, count: int = 256) -> None:
    """The four idx files torchvision's MNIST reads, with random pixels: it finds them and downloads nothing."""
    raw.mkdir(parents=True)
    for prefix in ("train", "t10k"):
        pixels = bytes((i * 37 + 11) % 256 for i in range(count * 28 * 28))
        (raw / f"{prefix}-images-idx3-ubyte").write_bytes(struct.pack(">IIII", 2051, count, 28, 28) + pixels)
        (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(struct.pack(">II", 2049, count)
                                                          + bytes(i % 10 for i in range(count)))


def test_the_pytorch_grpc_data_offload_example(tmp_path: Path) -> None:
    code = tmp_path / "code"
    shutil.copytree(EXAMPLES / "pytorch_grpc" / "code", code)
    synthetic_mnist(code / "data" / "MyMNIST" / "raw")
    data = tmp_path / "data"
    data.mkdir()
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"):  # what the notebook uploads (unread)
        (data / f"{name}.gz").write_bytes(gzip.compress((code / "data" / "MyMNIST" / "raw" / name).read_bytes()))
    (tmp_path / "s3").mkdir()
    session = EmulatorSession(s3_root=tmp_path / "s3")
    location = session.upload_data(str(data), key_prefix="DEMO-MNIST")
    estimator = PyTorch(
        framework_version="1.11.0", py_version="py38", role=ROLE, entry_point="launcher.py",
        source_dir=str(code), volume_size=10, max_run=480, disable_profiler=True, debugger_hook_config=False,
        sagemaker_session=session,
        instance_groups=[InstanceGroup("data_group", "ml.c5.9xlarge", 1),
                         InstanceGroup("dnn_group", "ml.p3.2xlarge", 1)],
        hyperparameters={"batch-size": 32, "num-data-workers": 1, "grpc-workers": 1, "num-dnn-workers": 1,
                         "pin-memory": True, "iterations": 5, "region": session.boto_region_name},
    )
    # A name of this run's own: another checkout's tests may run the same example on a shared engine.
    job_name = f"pt-hetero-grpc-{uuid.uuid4().hex[:8]}"
    estimator.fit(inputs={"training": location, "testing": location}, job_name=job_name, logs=False)

    described = session.describe_training_job(job_name)
    # What the emulator adds (the hosts, the local image) is in job.json and `hetero-emu describe`, never
    # in the API's answer.
    emulated = api.describe(job_name)
    assert "Emulator" not in described and "Hosts" not in described
    assert described["TrainingJobStatus"] == "Completed", described.get("FailureReason")
    assert [(h["Host"], h["InstanceGroupName"], h["ExitCode"]) for h in emulated["Hosts"]] == [
        ("algo-1", "data_group", 0), ("algo-2", "dnn_group", 0)]
    # The example's requirements.txt resolved as pip resolves it on AWS's image's Python 3.8.
    assert ("pytorch 1.11.0 py38: running on Python 3.9 (Debian has no 3.8); requirements.txt resolved as for "
            "Python 3.8") in emulated["Emulator"]["StandIn"]["Notes"]
    data_log, dnn_log = log(session, job_name, "algo-1"), log(session, job_name, "algo-2")
    # The toolkit installed the example's requirements from the wheelhouse resolved in the image.
    assert "Successfully installed" in dnn_log and "protobuf-3.20.2" in dnn_log, dnn_log[-3000:]
    assert "Finished filling queue" in data_log and "shutdown received" in data_log, data_log[-3000:]
    assert tagged(dnn_log, "TRAINED") == [{"steps": 5, "device": "cpu"}], dnn_log[-3000:]
    assert "sent the shutdown to algo-1:16000" in dnn_log
    assert "model.pth" in model_members(tmp_path / "s3", estimator.model_data)


def test_the_tensorflow_tf_data_service_example(tmp_path: Path) -> None:
    code = tmp_path / "code"
    shutil.copytree(EXAMPLES / "tf_data_service" / "code", code)
    (tmp_path / "s3").mkdir()
    session = EmulatorSession(s3_root=tmp_path / "s3")
    data_group = InstanceGroup("data_group", "ml.c5.18xlarge", 2)
    dnn_group = InstanceGroup("dnn_group", "ml.p4d.24xlarge", 1)
    estimator = TensorFlow(
        entry_point="launcher.py", source_dir=str(code), framework_version="2.9.2", py_version="py39", role=ROLE,
        volume_size=10, max_run=480, disable_profiler=True, sagemaker_session=session,
        instance_groups=[data_group, dnn_group],
        hyperparameters={"epochs": 1, "steps_per_epoch": 3, "batch_size": 16, "tf_data_mode": "service",
                         "num_of_data_workers": 1},
        distribution={"mpi": {"enabled": True, "processes_per_host": 2, "custom_mpi_options": "--NCCL_DEBUG WARN"},
                      "instance_groups": [dnn_group]},
    )
    job_name = f"tf-hetero-data-service-{uuid.uuid4().hex[:8]}"  # of this run's own, as above
    estimator.fit(job_name=job_name, logs=False)

    described = session.describe_training_job(job_name)
    emulated = api.describe(job_name)  # job.json: the hosts are the emulator's addition
    assert described["TrainingJobStatus"] == "Completed", described.get("FailureReason")
    assert [(h["Host"], h["InstanceGroupName"], h["ExitCode"]) for h in emulated["Hosts"]] == [
        ("algo-1", "data_group", 0), ("algo-2", "data_group", 0), ("algo-3", "dnn_group", 0)]
    dnn_log = log(session, job_name, "algo-3")
    trained = sorted(tagged(dnn_log, "TRAINED"), key=lambda t: t["rank"])
    assert [(t["rank"], t["size"], t["epochs"]) for t in trained] == [(0, 2, 1), (1, 2, 1)], dnn_log[-3000:]
    assert "Successfully installed" in dnn_log and "tensorflow-addons-0.17.0" in dnn_log, dnn_log[-3000:]
    for host in ("algo-1", "algo-2", "algo-3"):  # the dnn host's own extra worker too
        assert "shutdown received" in log(session, job_name, host), host
        assert f"sent the shutdown to {host}:16000" in dnn_log
    assert "dispatcher on port 6000" in log(session, job_name, "algo-1")
    members = model_members(tmp_path / "s3", estimator.model_data)
    assert any(name.endswith("000000001/saved_model.pb") for name in members), members
