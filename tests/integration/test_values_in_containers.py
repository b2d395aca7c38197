"""Values as written and the entry-point rule, asked of the real sagemaker-training toolkit in the
default image (issue 7, parts 5 and 7)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from entry_points import ENTRY_POINTS

from emulator.jobspec import entry_point_problem, load_spec_file
from emulator.reports.console import RecordingReporter
from emulator.run.runner import run_job

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image", "no_leftovers")]

# Runs in the image: the toolkit's own validate_entry_point on every name, "" when it accepts one.
ASK_TOOLKIT = """
import json, sys
from sagemaker_training import errors, process
verdicts = {}
for name in json.loads(sys.argv[1]):
    try:
        process.validate_entry_point(name)
        verdicts[name] = ""
    except errors.ClientError as err:
        verdicts[name] = str(err)
print(json.dumps(verdicts))
"""


def test_our_entry_point_rule_agrees_with_the_real_toolkit(docker_client: Any, training_image: str) -> None:
    names = [name for name, _ in ENTRY_POINTS] + ["", "ü/x.py", "a/.", "..", "x/..y", "a-/b_.c+"]
    output = docker_client.containers.run(training_image, ["/opt/venv/bin/python", "-c", ASK_TOOLKIT,
                                                           json.dumps(names)], remove=True)
    verdicts = json.loads(output)
    assert set(verdicts) == set(names)
    for name in names:
        toolkit_refuses = bool(verdicts[name])
        ours = entry_point_problem(name) if name else "empty"  # an empty entry_point: "must not be empty"
        assert (ours is not None) == toolkit_refuses, (name, ours, verdicts[name])
    # The one documented difference: the toolkit's `$` matches before a final newline.
    output = docker_client.containers.run(training_image, ["/opt/venv/bin/python", "-c", ASK_TOOLKIT,
                                                           json.dumps(["train.py\n"])], remove=True)
    assert json.loads(output) == {"train.py\n": ""}
    assert entry_point_problem("train.py\n") is not None


SCRIPT = """
import json, os
from sagemaker_training import environment
env = environment.Environment()
names = ["PY", "AT", "MODE", "MASK", "DEBUG", "CACHE", "LR", "FLAG", "DAY"]
print("SEEN " + json.dumps({"env": {k: os.environ[k] for k in names},
                            "hps": {k: env.hyperparameters[k] for k in ("version", "port", "lr", "alpha", "on")}}))
"""

SPEC = """\
job_name: values-as-written
entry_point: train.py
source_dir: code
instance_type: ml.c5.xlarge
output_path: out
environment:
  PY: 3.10
  AT: 12:30
  MODE: 0755
  MASK: 0x1F
  DEBUG: no
  CACHE: off
  LR: 1e-3
  FLAG: true
  DAY: 2024-1-2
hyperparameters:
  version: '3.10'
  port: '0700'
  lr: 1e-3
  alpha: .5
  'on': true
"""


def test_environment_and_hyperparameters_reach_the_script_as_written(tmp_path: Path) -> None:
    """The issue's table, read inside a real container through the toolkit's Environment()."""
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text(SCRIPT)
    (tmp_path / "job.yaml").write_text(SPEC)
    reporter = RecordingReporter()
    result = run_job(load_spec_file(tmp_path / "job.yaml"), reporter=reporter)
    assert result.status == "Completed", result.failure_reason
    (seen,) = [json.loads(line[5:]) for _, _, line in reporter.lines if line.startswith("SEEN ")]
    assert seen["env"] == {"PY": "3.10", "AT": "12:30", "MODE": "0755", "MASK": "0x1F", "DEBUG": "no",
                           "CACHE": "off", "LR": "1e-3", "FLAG": "true", "DAY": "2024-1-2"}
    assert seen["hps"] == {"version": "3.10", "port": "0700", "lr": 0.001, "alpha": 0.5, "on": True}
