"""The pytest plugin as a user meets it: installed (the pytest11 entry point, no `-p`), running
examples/testing-your-script's own tests in a pytest of their own, plainly and under two pytest-xdist
workers, against the real engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

from emulator import api

# Not `no_leftovers`: on an engine shared with other sessions that fixture also sees their leftovers;
# check_jobs asks for this run's own jobs by name instead.
pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image")]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "testing-your-script"
JOBS = 3  # the example's tests run one job each: two complete, one fails on a bad row


def run_example(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """pytest in the example's folder, as its user runs it; returns the run and the jobs it recorded
    (the record of jobs run goes to a folder of this test)."""
    registered = [e.value for e in entry_points(group="pytest11") if e.name == "hetero_emu"]
    assert registered == ["emulator.pytest_plugin"], (
        "the pytest11 entry point is not registered: reinstall the package (pip install -e '.[dev]')")
    state = tmp_path / "state"
    env = {**os.environ, "HETERO_EMU_STATE_DIR": str(state), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "--hetero-emu-require-docker",
         "--basetemp", str(tmp_path / "base"), *args],
        cwd=EXAMPLE, env=env, capture_output=True, text=True, timeout=900)
    records = [json.loads(p.read_text()) for p in sorted((state / "jobs").glob("*.json"))]
    return proc, records


def check_jobs(records: list[dict[str, Any]], tmp_path: Path) -> None:
    """One record per job (a second job of the same name would have replaced the first's), each in
    a folder of its own under its test's tmp_path, with the outcome its test expects, nothing left."""
    names = [r["TrainingJobName"] for r in records]
    assert len(records) == JOBS, names
    assert [r for r in api.ps() if r.job in names] == []  # every container and network removed
    assert sorted(r["TrainingJobStatus"] for r in records) == ["Completed", "Completed", "Failed"]
    folders = [Path(r["JobDir"]) for r in records]
    assert len(set(folders)) == JOBS
    for record, folder in zip(records, folders, strict=True):
        assert folder.is_relative_to(tmp_path / "base") and folder.name == record["TrainingJobName"]
        assert json.loads((folder / "job.json").read_text())["TrainingJobName"] == record["TrainingJobName"]


def test_the_examples_tests_pass_under_plain_pytest(tmp_path: Path) -> None:
    proc, records = run_example(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 passed" in proc.stdout
    check_jobs(records, tmp_path)
    assert all(r["TrainingJobName"].startswith("test-") for r in records)


def test_the_examples_tests_pass_under_two_xdist_workers_without_colliding(tmp_path: Path) -> None:
    proc, records = run_example(tmp_path, "-n", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 passed" in proc.stdout
    check_jobs(records, tmp_path)
    workers = {r["TrainingJobName"].split("-gw")[1].split("-")[0] for r in records}
    assert workers == {"0", "1"}, [r["TrainingJobName"] for r in records]
    # The two workers' jobs really ran at the same time.
    spans = sorted((datetime.fromisoformat(d["TrainingStartTime"]), datetime.fromisoformat(d["TrainingEndTime"]))
                   for d in (json.loads((Path(r["JobDir"]) / "job.json").read_text()) for r in records))
    assert any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:], strict=False)), spans
