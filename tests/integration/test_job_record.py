"""A job is found by its name after its containers are gone: `hetero-emu logs NAME` and
`hetero-emu describe NAME` read the local record of jobs run here (emulator.state.job_records)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from testkit import hetero_emu as cli

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image", "no_leftovers")]

def test_logs_and_describe_by_name_after_the_job_ended(tmp_path: Path, docker_client: object) -> None:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "t.py").write_text("import json\nrc = json.load(open('/opt/ml/input/config/"
                                            "resourceconfig.json'))\nprint('I am', rc['current_host'])\n")
    name = f"record-{uuid.uuid4().hex[:8]}"
    spec = tmp_path / "job.yaml"
    spec.write_text(json.dumps({
        "job_name": name, "entry_point": "t.py", "source_dir": "code", "output_path": "out",
        "instance_groups": [{"instance_group_name": "a", "instance_type": "ml.c5.xlarge", "instance_count": 1},
                            {"instance_group_name": "b", "instance_type": "ml.c5.xlarge", "instance_count": 1}]}))
    assert cli("run", str(spec), "--quiet").returncode == 0
    assert docker_client.containers.list(all=True, filters={"name": name}, ignore_removed=True) == []  # type: ignore[attr-defined]

    logs = cli("logs", name)
    assert logs.returncode == 0, logs.stderr
    assert "algo-1 (a) | I am algo-1" in logs.stdout and "algo-2 (b) | I am algo-2" in logs.stdout

    described = cli("describe", name, "--json")
    assert described.returncode == 0, described.stderr
    doc = json.loads(described.stdout)
    assert doc["TrainingJobName"] == name and doc["TrainingJobStatus"] == "Completed"
    assert doc == json.loads((tmp_path / "out" / name / "job.json").read_text())
    readable = cli("describe", name)
    assert readable.stdout.startswith(f"{name}: Completed\n")
