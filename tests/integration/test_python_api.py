"""The Python API (`emulator.Job`, SDK names) runs a heterogeneous job like `hetero-emu run` does."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from emulator import InstanceGroup, Job, TrainingInput
from emulator.reports.console import RecordingReporter

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image", "no_leftovers")]

SCRIPT = """
import json, os
from sagemaker_training import environment
env = environment.Environment()
print("API " + json.dumps({"host": env.current_host, "group": env.current_instance_group,
                           "channels": sorted(env.channel_input_dirs), "lr": env.hyperparameters["lr"]}))
open(os.path.join(env.model_dir, env.current_host), "w").write(env.current_instance_group)
"""


def test_job_run_with_sdk_objects(tmp_path: Path) -> None:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text(SCRIPT)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.csv").write_text("1,2\n")
    job = Job(
        base_dir=tmp_path,
        base_job_name="api-test",
        entry_point="train.py",
        source_dir="code",
        instance_groups=[InstanceGroup("data_group", "ml.c5.xlarge", 1),
                         InstanceGroup("dnn_group", "ml.p3.2xlarge", 1)],
        inputs={"training": TrainingInput("data", instance_groups=("data_group",))},
        hyperparameters={"lr": 0.5},
        output_path="out",
    )
    reporter = RecordingReporter()
    result = job.run(reporter=reporter)

    assert result.status == "Completed", result.failure_reason
    seen = {json.loads(line[4:])["host"]: json.loads(line[4:]) for _, _, line in reporter.lines
            if line.startswith("API ")}
    assert seen["algo-1"] == {"host": "algo-1", "group": "data_group", "channels": ["training"], "lr": 0.5}
    assert seen["algo-2"] == {"host": "algo-2", "group": "dnn_group", "channels": [], "lr": 0.5}
    assert result.job_dir.parent == tmp_path / "out"
    with tarfile.open(result.job_dir / "output" / "model.tar.gz") as tar:
        assert sorted(tar.getnames()) == ["algo-1", "algo-2"]


def test_shell_entry_point_runs_through_train(tmp_path: Path) -> None:
    # The toolkit makes a non-Python entry point executable (chmod) in /opt/ml/code before running it:
    # the host's code folder must be writable, and the user's file must stay as it was.
    (tmp_path / "code").mkdir()
    script = tmp_path / "code" / "train.sh"
    script.write_text('#!/bin/sh\necho "SHELL ran on $SM_CURRENT_HOST"\n')
    script.chmod(0o644)
    reporter = RecordingReporter()
    result = Job(base_dir=tmp_path, job_name="api-shell-entry", entry_point="train.sh", source_dir="code",
                 instance_type="ml.c5.xlarge", instance_count=1, output_path="out").run(reporter=reporter)
    assert result.status == "Completed", result.failure_reason
    assert ("algo-1", "homogeneousCluster", "SHELL ran on algo-1") in reporter.lines
    assert script.stat().st_mode & 0o777 == 0o644


def test_a_placed_job_runs_on_the_docker_engine_as_before(tmp_path: Path) -> None:
    # `placement` is for a swarm's nodes: one machine has nowhere else to put a host, so the docker
    # engine runs the job as it would without it, and says nothing (a spec is shared between engines).
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print('PLACED on', __import__('os').environ['SM_CURRENT_HOST'])\n")
    job = Job(base_dir=tmp_path, job_name="api-placed", entry_point="train.py", source_dir="code",
              instance_groups=[InstanceGroup("data_group", "ml.c5.xlarge", 1, placement=(("role", "cpu"),)),
                               InstanceGroup("dnn_group", "ml.c5.xlarge", 1)],
              output_path="out")
    reporter = RecordingReporter()
    result = job.run(reporter=reporter, placement={"dnn_group": {"role": "gpu"}})
    assert result.status == "Completed", result.failure_reason
    assert reporter.warnings == []
    assert {(host, line) for host, _, line in reporter.lines if line.startswith("PLACED")} == \
        {("algo-1", "PLACED on algo-1"), ("algo-2", "PLACED on algo-2")}
