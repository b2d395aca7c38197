"""Testing train.py the way it runs on SageMaker: a real heterogeneous cluster of containers per test,
through the `hetero_emu` fixture that installing hetero-emu gives pytest.

Run with `pytest` in this folder (add `-n auto` with pytest-xdist: the jobs of parallel workers
never collide). Without a Docker engine these tests skip, or fail with --hetero-emu-require-docker.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from emulator import InstanceGroup, Job, TrainingInput
from emulator.options import RunOptions
from emulator.pytest_plugin import HeteroEmu

EXAMPLE = Path(__file__).resolve().parent.parent


def test_the_line_is_fitted_from_both_data_hosts(hetero_emu: HeteroEmu) -> None:
    run = hetero_emu.run("../job.yaml")  # relative to this test file's folder

    assert run.status == "Completed", run.failure_reason
    assert {name: host.exit_code for name, host in run.hosts.items()} == {"algo-1": 0, "algo-2": 0, "algo-3": 0}
    assert run.hosts["algo-3"].group == "train_group"
    # ShardedByS3Key: algo-2 gets every other file of the four, 10 rows each.
    assert "DATA algo-2: rows=20 files=2" in run.hosts["algo-2"].log
    assert "TRAIN fitted y = 2.000 * x + 1.000 on 40 rows from algo-1, algo-2" in run.hosts["algo-3"].log
    model = json.loads((run.model / "model.json").read_text())
    assert model == {"slope": pytest.approx(2.0), "intercept": pytest.approx(1.0), "rows": 40}
    assert sorted(p.name for p in run.output.iterdir()) == ["algo-1.json", "algo-2.json"]


def test_a_bad_row_fails_the_job_naming_the_file_and_line(hetero_emu: HeteroEmu, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.csv").write_text("1,3\n2,5\n")
    (data / "b.csv").write_text("1,3\nx,oops\n")  # the second file: algo-2's share
    spec = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    spec["inputs"]["training"]["s3_data"] = str(data)

    # A mapping's relative paths resolve against base_dir. The trainer waits for sums that never come:
    # once algo-2 failed, the other hosts are stopped (SIGKILL after `grace` seconds).
    run = hetero_emu.run(spec, RunOptions(grace=1), base_dir=EXAMPLE)

    assert run.status == "Failed"
    assert run.hosts["algo-2"].exit_code == 1
    # The FailureReason is the toolkit's, worded as on SageMaker; the script's own message is in the log.
    assert run.failure_reason.startswith("AlgorithmError: ExecuteUserScriptError")
    assert run.failed_host == "algo-2 (data_group)"
    assert "DATA algo-2: bad row in b.csv line 2: 'x,oops'" in run.hosts["algo-2"].log
    assert run.describe()["TrainingJobStatus"] == "Failed"


def test_any_number_of_data_hosts_share_the_rows(hetero_emu: HeteroEmu) -> None:
    job = Job(
        base_dir=EXAMPLE, entry_point="train.py", source_dir="code",
        instance_groups=[InstanceGroup("data_group", "ml.c5.xlarge", 3),
                         InstanceGroup("train_group", "ml.g5.xlarge", 1)],
        inputs={"training": TrainingInput("data/train", distribution="ShardedByS3Key",
                                          instance_groups=("data_group",))},
    )

    run = hetero_emu.run(job)

    assert run.exit_code == 0, run.failure_reason
    assert [host.group for host in run.hosts.values()] == ["data_group"] * 3 + ["train_group"]
    assert "DATA algo-3: rows=10 files=1" in run.hosts["algo-3"].log
    assert json.loads((run.model / "model.json").read_text())["rows"] == 40
