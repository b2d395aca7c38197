"""A CreateTrainingJob request JSON run on the real engine (issue 8, part 2): the hyperparameters as the
API has them, the environment and each host's resource config, read inside the containers through the
real sagemaker-training toolkit's Environment()."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emulator import api
from emulator.reports.console import RecordingReporter

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image", "no_leftovers")]

SCRIPT = """
import json, os
from sagemaker_training import environment
env = environment.Environment()
print("SEEN " + json.dumps({
    "host": env.current_host, "group": env.current_instance_group, "type": env.current_instance_type,
    "groups": sorted(env.instance_groups), "hosts": env.hosts,
    "hps": {k: env.hyperparameters[k] for k in ("lr", "name", "quoted", "layers", "flag")},
    "raw": json.load(open("/opt/ml/input/config/hyperparameters.json")),
    "channels": sorted(env.channel_input_dirs),
    "env": {k: os.environ[k] for k in ("MY_VAR", "NUMBER")},
}))
"""


def test_a_request_runs_with_its_values_as_the_api_has_them(tmp_path: Path) -> None:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text(SCRIPT)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.csv").write_text("1\n")
    hps = {"lr": "0.01", "name": "abc", "quoted": '"x"', "layers": "[1, 2]", "flag": "true",
           "sagemaker_program": '"train.py"', "sagemaker_submit_directory": '"code"'}
    doc = {
        "TrainingJobName": "request-in-containers",
        "AlgorithmSpecification": {"TrainingImage": "hetero-emu/training:py311", "TrainingInputMode": "File"},
        "HyperParameters": hps,
        "Environment": {"MY_VAR": "value", "NUMBER": "007"},
        "ResourceConfig": {"InstanceGroups": [
            {"InstanceGroupName": "data_group", "InstanceType": "ml.c5.xlarge", "InstanceCount": 1},
            {"InstanceGroupName": "dnn_group", "InstanceType": "ml.m5.xlarge", "InstanceCount": 1}],
            "VolumeSizeInGB": 30},
        "InputDataConfig": [{"ChannelName": "training", "DataSource": {"S3DataSource": {
            "S3Uri": "data", "S3DataType": "S3Prefix", "InstanceGroupNames": ["data_group"]}}}],
        "OutputDataConfig": {"S3OutputPath": "out"},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
        "RoleArn": "arn:aws:iam::111122223333:role/x",
        "Tags": [{"Key": "k", "Value": "v"}],
    }
    (tmp_path / "request.json").write_text(json.dumps(doc))
    reporter = RecordingReporter()
    result = api.run(api.load(tmp_path / "request.json"), reporter=reporter)
    assert result.status == "Completed", result.failure_reason
    seen = {s["host"]: s for s in (json.loads(line[5:]) for _, _, line in reporter.lines if line.startswith("SEEN "))}
    assert set(seen) == {"algo-1", "algo-2"}
    assert (seen["algo-1"]["group"], seen["algo-1"]["type"]) == ("data_group", "ml.c5.xlarge")
    assert (seen["algo-2"]["group"], seen["algo-2"]["type"]) == ("dnn_group", "ml.m5.xlarge")
    assert seen["algo-1"]["channels"] == ["training"] and seen["algo-2"]["channels"] == []
    for s in seen.values():
        assert s["groups"] == ["data_group", "dnn_group"] and s["hosts"] == ["algo-1", "algo-2"]
        assert s["hps"] == {"lr": 0.01, "name": "abc", "quoted": "x", "layers": [1, 2], "flag": True}
        assert {k: s["raw"][k] for k in ("lr", "name", "quoted", "layers", "flag")} == {
            k: hps[k] for k in ("lr", "name", "quoted", "layers", "flag")}, "written as given, not encoded twice"
        # The request's keys, no others (the service adds none); the code is where the toolkit finds it.
        assert set(s["raw"]) == set(hps) and s["raw"]["sagemaker_submit_directory"] == '"/opt/ml/code"'
        assert s["env"] == {"MY_VAR": "value", "NUMBER": "007"}
