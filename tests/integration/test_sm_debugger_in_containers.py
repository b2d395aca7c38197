"""SageMaker Debugger on the real engine (emulator/planning/sm_debugger.py): a request's DebugHookConfig is
/opt/ml/input/config/debughookconfig.json in every host, where smdebug's create_from_json_file() reads
it, and what each host writes under its LocalPath reaches `<S3OutputPath>/<job>/debug-output/` under
the local S3 root."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emulator import api
from emulator.reports.console import RecordingReporter

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image", "no_leftovers")]

# Writes as smdebug does: under the file's LocalPath, one file per worker (host).
SCRIPT = """
import json, os
config = json.load(open("/opt/ml/input/config/debughookconfig.json"))
print("SEEN " + json.dumps({"host": os.environ["SM_CURRENT_HOST"], "config": config}))
host = os.environ["SM_CURRENT_HOST"]
os.makedirs(os.path.join(config["LocalPath"], "events", "000000000000"), exist_ok=True)
with open(os.path.join(config["LocalPath"], "events", "000000000000", f"000000000000_{host}.tfevents"), "w") as f:
    f.write("loss from " + host)
"""


def test_the_hook_file_is_read_in_the_container_and_the_tensors_reach_s3(tmp_path: Path) -> None:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text(SCRIPT)
    (tmp_path / "s3" / "bucket").mkdir(parents=True)
    hook = {"S3OutputPath": "s3://bucket/debug", "HookParameters": {"save_interval": "2"},
            "CollectionConfigurations": [{"CollectionName": "losses"}]}
    doc = {
        "TrainingJobName": "debugger-in-containers",
        "AlgorithmSpecification": {"TrainingImage": "hetero-emu/training:py311", "TrainingInputMode": "File"},
        "HyperParameters": {"sagemaker_program": '"train.py"', "sagemaker_submit_directory": '"code"'},
        "ResourceConfig": {"InstanceType": "ml.c5.xlarge", "InstanceCount": 2, "VolumeSizeInGB": 30},
        "OutputDataConfig": {"S3OutputPath": "s3://bucket/out"},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
        "RoleArn": "arn:aws:iam::111122223333:role/x",
        "DebugHookConfig": hook,
    }
    (tmp_path / "request.json").write_text(json.dumps(doc))
    reporter = RecordingReporter()
    result = api.run(api.load(tmp_path / "request.json", s3_root=tmp_path / "s3"), reporter=reporter)
    assert result.status == "Completed", result.failure_reason
    seen = {s["host"]: s for s in (json.loads(line[5:]) for _, _, line in reporter.lines if line.startswith("SEEN "))}
    assert set(seen) == {"algo-1", "algo-2"}
    for s in seen.values():
        assert s["config"] == {**hook, "LocalPath": "/opt/ml/output/tensors"}
    steps = tmp_path / "s3" / "bucket" / "debug" / "debugger-in-containers" / "debug-output" / "events" / "000000000000"
    assert {p.name: p.read_text() for p in steps.iterdir()} == {
        "000000000000_algo-1.tfevents": "loss from algo-1", "000000000000_algo-2.tfevents": "loss from algo-2"}
