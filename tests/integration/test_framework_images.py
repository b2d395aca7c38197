"""The framework images by version and Python (emulator/training_images/frameworks.py, images/framework/), for real:
for PyTorch 1.x, PyTorch 2.x and TensorFlow 2.x, a job on the image asks the container for the
framework's version, the Python, and the training module the REAL toolkit started (its own
`SM_FRAMEWORK_MODULE`), and runs one distributed step on two hosts of one group: a gloo all_reduce
under the toolkit's `torchrun`, or a Horovod allreduce under its `mpirun`.

And an image the engine has under an ECR name wins over every stand-in: the SDK's PyTorch estimator
runs on whatever is tagged with the name it resolved.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
import pytest
from sagemaker.instance_group import InstanceGroup
from sagemaker.pytorch import PyTorch

from emulator import api
from emulator.jobspec import validate
from emulator.reports.console import RecordingReporter
from emulator.run.runner import run_job
from emulator.sagemaker import EmulatorSession
from emulator.training_images.frameworks import TRAINING_MODULES, choose

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("no_leftovers")]

ROLE = "arn:aws:iam::111122223333:role/SageMakerRole"

# One script for every image: the data group's host reports what it runs on; the trainers take one
# distributed step with the framework's own library and report the sum from their first rank.
TRAIN = '''\
import json, os, platform, socket

info = {"python": platform.python_version(), "module": os.environ.get("SM_FRAMEWORK_MODULE"),
        "group": os.environ["SM_CURRENT_INSTANCE_GROUP"], "host": socket.gethostname()}
if os.environ["FRAMEWORK"] == "pytorch":
    import torch
    info["version"] = torch.__version__
    # What the CUDA build keeps for a job without a GPU is enough to train (venv.sh trims the rest).
    layer = torch.nn.Conv2d(3, 4, 3)
    layer(torch.randn(2, 3, 8, 8)).sum().backward()
    info["cuda"] = torch.cuda.is_available()
    if "RANK" in os.environ and info["group"] == "trainers":
        import torch.distributed as dist
        dist.init_process_group("gloo")
        value = torch.tensor([float(dist.get_rank() + 1)])
        dist.all_reduce(value)
        info.update(rank=dist.get_rank(), world=dist.get_world_size(), sum=value.item())
else:
    import tensorflow as tf
    info["version"] = tf.__version__
    if "OMPI_COMM_WORLD_RANK" in os.environ:
        import horovod.tensorflow as hvd
        hvd.init()
        total = hvd.allreduce(tf.constant(float(hvd.rank() + 1)), op=hvd.Sum)
        info.update(rank=hvd.rank(), world=hvd.size(), sum=float(total.numpy()))
print("MATRIX_JSON " + json.dumps(info), flush=True)
'''

MATRIX = [
    pytest.param("pytorch", "1.11.0", "py38", "3.9", id="pytorch-1.11-py38"),
    pytest.param("pytorch", "2.1.0", "py310", "3.11", id="pytorch-2.1-py310"),
    pytest.param("tensorflow", "2.9.2", "py39", "3.9", id="tensorflow-2.9-py39"),
]
# mpirun --tag-output prefixes each chunk a rank writes.
MPI_TAG = re.compile(r"\[\d+,\d+\]<std(?:out|err)>:")


def matrix_lines(reporter: RecordingReporter) -> list[dict[str, Any]]:
    # Two MPI ranks' lines can arrive joined on one line: each object is decoded where its tag starts.
    found, decoder = [], json.JSONDecoder()
    for _host, _group, line in reporter.lines:
        line, start = MPI_TAG.sub("", line), 0
        while (at := line.find("MATRIX_JSON ", start)) >= 0:
            value, start = decoder.raw_decode(line, at + len("MATRIX_JSON "))
            found.append(value)
    return found


@pytest.mark.parametrize(("framework", "version", "py_version", "python"), MATRIX)
def test_a_framework_image_runs_its_version_and_python_and_a_distributed_step(
        tmp_path: Path, framework_image: Callable[[str, str, str], str], framework: str, version: str,
        py_version: str, python: str) -> None:
    image = framework_image(framework, version, py_version)
    assert image == choose(framework, version, py_version).tag
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text(TRAIN)
    distribution = ({"torch_distributed": {"enabled": True}} if framework == "pytorch" else
                    {"mpi": {"enabled": True, "processes_per_host": 1}})
    spec = validate({
        "base_job_name": f"matrix-{framework}", "image_uri": image, "entry_point": "train.py", "source_dir": "code",
        "output_path": str(tmp_path / "out"), "environment": {"FRAMEWORK": framework},
        "instance_groups": [
            {"instance_group_name": "data", "instance_type": "ml.c5.xlarge", "instance_count": 1},
            {"instance_group_name": "trainers", "instance_type": "ml.g5.xlarge", "instance_count": 2}],
        "distribution": {**distribution, "instance_groups": ["trainers"]},
    }, base_dir=tmp_path)
    reporter = RecordingReporter()
    result = run_job(spec, reporter=reporter)

    assert result.status == "Completed", result.failure_reason
    seen = matrix_lines(reporter)
    # Every process, plain or distributed, ran the framework version on the Python chosen for it,
    # started by the framework's toolkit module (the module the real toolkit says it started).
    assert {(s["version"].split("+")[0], s["python"].rsplit(".", 1)[0], s["module"]) for s in seen} == {
        (version, python, TRAINING_MODULES[framework])}, seen
    assert not any(s.get("cuda") for s in seen), seen
    steps = [s for s in seen if "sum" in s]
    # Two hosts of one group, one process each: ranks 0 and 1, and 1 + 2 summed across the hosts.
    assert sorted((s["rank"], s["world"], s["sum"]) for s in steps) == [(0, 2, 3.0), (1, 2, 3.0)], seen
    assert sorted(s["host"] for s in steps) == ["algo-2", "algo-3"], seen
    assert [s["host"] for s in seen if s["group"] == "data"] == ["algo-1"], seen


# serial: it tags the default image with PyTorch 1.11's ECR name for a while, which would turn any
# other PyTorch 1.11 job running then from the stand-in to that image.
@pytest.mark.serial
def test_an_image_tagged_with_the_ecr_name_wins_over_the_stand_in(
        tmp_path: Path, docker_client: docker.DockerClient, training_image: str) -> None:
    """AWS's image, when the engine has it (here: the default image tagged with the ECR name the SDK
    resolves for PyTorch 1.11 py38), runs as it is: no stand-in, no Python substitution."""
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text(
        "import platform; print('PYTHON_IS ' + platform.python_version(), flush=True)\n")
    (tmp_path / "s3").mkdir()
    session = EmulatorSession(s3_root=tmp_path / "s3")
    estimator = PyTorch(entry_point="train.py", source_dir=str(tmp_path / "code"), framework_version="1.11.0",
                        py_version="py38", role=ROLE, sagemaker_session=session,
                        instance_groups=[InstanceGroup("data", "ml.c5.xlarge", 1),
                                         InstanceGroup("dnn", "ml.g5.xlarge", 1)])
    name = estimator.training_image_uri()
    assert name.endswith("/pytorch-training:1.11.0-gpu-py38")
    repository, tag = name.rsplit(":", 1)
    docker_client.images.get(training_image).tag(repository, tag)
    try:
        estimator.fit(job_name="ecr-tagged", logs=False)
    finally:
        docker_client.images.remove(name)
    described = session.describe_training_job("ecr-tagged")
    # What the emulator adds (the hosts, the local image) is in job.json and `hetero-emu describe`, never
    # in the API's answer.
    emulated = api.describe("ecr-tagged")
    assert "Emulator" not in described and "Hosts" not in described
    assert described["TrainingJobStatus"] == "Completed"
    assert described["AlgorithmSpecification"]["TrainingImage"] == name
    assert emulated["Emulator"]["Image"] == name and "StandIn" not in emulated["Emulator"]
    log = (Path(session.training.found("ecr-tagged").job_dir) / "logs" / "algo-1.log").read_text()
    assert "PYTHON_IS 3.11" in log  # the default image's Python, not the 3.9 of the stand-in
