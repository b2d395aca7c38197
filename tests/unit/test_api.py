"""The library API over an engine registry: a second engine plugs in by name without a front end
changing; jobs are found by name after their containers are gone (the local record of jobs)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from fake_backend import FakeBackend, exits

from emulator import api
from emulator.backend import registry
from emulator.errors import UsageError
from emulator.jobspec import validate
from emulator.reports.console import RecordingReporter
from emulator.state import job_records


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HETERO_EMU_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


@pytest.fixture
def fake_engine(monkeypatch: pytest.MonkeyPatch) -> FakeBackend:
    fake = FakeBackend({"algo-1": exits(0, logs=["hello from algo-1\n"]), "algo-2": exits(0, logs=["two\n"])})
    monkeypatch.setitem(registry._FACTORIES, "fake", lambda: fake)
    return fake


def two_hosts(tmp_path: Path, name: str = "api-job") -> object:
    (tmp_path / "code").mkdir(exist_ok=True)
    (tmp_path / "code" / "t.py").write_text("")
    return validate({"job_name": name, "entry_point": "t.py", "source_dir": "code",
                     "instance_groups": [{"instance_group_name": "g", "instance_type": "ml.c5.xlarge",
                                          "instance_count": 2}],
                     "output_path": "out"}, base_dir=tmp_path)


def test_an_unknown_engine_is_a_usage_error_naming_the_known_ones() -> None:
    with pytest.raises(UsageError) as info:
        registry.engine("podman")
    assert info.value.exit_code == 2
    assert "unknown engine 'podman'" in info.value.message and "docker" in (info.value.hint or "")


def test_a_registered_engine_runs_a_job_through_the_api(
        tmp_path: Path, state: Path, fake_engine: FakeBackend) -> None:
    result = api.run(two_hosts(tmp_path), engine_name="fake", reporter=RecordingReporter())  # type: ignore[arg-type]
    assert result.status == "Completed"
    assert {"create_container", "start", "remove"} <= set(fake_engine.call_names())


def test_a_job_is_found_by_name_after_its_containers_are_gone(
        tmp_path: Path, state: Path, fake_engine: FakeBackend) -> None:
    result = api.run(two_hosts(tmp_path), engine_name="fake", reporter=RecordingReporter())  # type: ignore[arg-type]
    assert fake_engine.containers == {}  # removed: the engine knows nothing of the job now
    record = job_records.find("api-job")
    assert record is not None and record.status == "Completed" and record.job_dir == result.job_dir
    found = api.logs("api-job", engine_name="fake")
    assert [(h.host, h.group) for h in found] == [("algo-1", "g"), ("algo-2", "g")]
    assert found[0].path.read_text() == "hello from algo-1\n"
    assert api.describe("api-job", engine_name="fake") == json.loads((result.job_dir / "job.json").read_text())
    assert [r.job_name for r in job_records.all_jobs()] == ["api-job"]


def test_a_job_that_fails_to_start_is_recorded_as_failed(
        tmp_path: Path, state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeBackend(fail_create={"algo-1": RuntimeError("engine said no")})
    monkeypatch.setitem(registry._FACTORIES, "fake", lambda: fake)
    with pytest.raises(RuntimeError):
        api.run(two_hosts(tmp_path, "api-broken"), engine_name="fake", reporter=RecordingReporter())  # type: ignore[arg-type]
    record = job_records.find("api-broken")
    assert record is not None and record.status == "Failed"
    assert [t["Status"] for t in record.transitions] == ["Starting", "Downloading", "Failed"]


def test_job_json_and_the_record_carry_the_services_secondary_status_transitions(
        tmp_path: Path, state: Path, fake_engine: FakeBackend) -> None:
    result = api.run(two_hosts(tmp_path), engine_name="fake", reporter=RecordingReporter())  # type: ignore[arg-type]
    described = api.describe("api-job", engine_name="fake")
    steps = described["SecondaryStatusTransitions"]
    assert [t["Status"] for t in steps] == ["Starting", "Downloading", "Training", "Uploading", "Completed"]
    assert steps[2]["StatusMessage"] == "Training image download completed. Training in progress."
    # Each entry ends when the next begins, as the service reports them.
    assert all(a["EndTime"] == b["StartTime"] for a, b in zip(steps, steps[1:], strict=False))
    assert described["CreationTime"] <= described["TrainingStartTime"] <= described["LastModifiedTime"]
    record = job_records.find("api-job")
    assert record is not None and record.transitions == steps and record.doc["SecondaryStatus"] == "Completed"
    assert result.transitions[-1]["Status"] == "Completed"


def test_a_failing_host_ends_the_transitions_with_failed(tmp_path: Path, state: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeBackend({"algo-1": exits(0), "algo-2": exits(3, logs=["boom\n"])})
    monkeypatch.setitem(registry._FACTORIES, "fake", lambda: fake)
    api.run(two_hosts(tmp_path), engine_name="fake", reporter=RecordingReporter())  # type: ignore[arg-type]
    steps = api.describe("api-job", engine_name="fake")["SecondaryStatusTransitions"]
    assert [t["Status"] for t in steps][-2:] == ["Uploading", "Failed"]
    assert steps[-1]["StatusMessage"] == "Training job failed"


def test_an_unknown_job_name_says_where_it_looked(tmp_path: Path, state: Path, fake_engine: FakeBackend) -> None:
    with pytest.raises(UsageError) as info:
        api.logs("no-such-job", engine_name="fake")
    assert "not a job folder, not in the record of jobs run here, not in the engine" in info.value.message


def test_an_unwritable_record_never_fails_a_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                fake_engine: FakeBackend) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("HETERO_EMU_STATE_DIR", str(blocker / "state"))  # under a file: cannot be made
    result = api.run(two_hosts(tmp_path), engine_name="fake", reporter=RecordingReporter())  # type: ignore[arg-type]
    assert result.status == "Completed"
    assert job_records.find("api-job") is None


def test_ending_a_job_its_run_never_recorded_adds_the_final_transition_once(tmp_path: Path, state: Path) -> None:
    job_records.record("early", tmp_path / "early", "InProgress", SecondaryStatus="Starting",
                       SecondaryStatusTransitions=[{"Status": "Starting", "StatusMessage": "Launching",
                                                    "StartTime": "2026-01-01T00:00:00+00:00"}])
    ended = job_records.end("early", "Stopped")
    assert ended is not None and ended.status == "Stopped" and ended.doc["SecondaryStatus"] == "Stopped"
    assert [t["Status"] for t in ended.transitions] == ["Starting", "Stopped"]
    assert ended.transitions[0]["EndTime"] == ended.transitions[1]["StartTime"]
    # A job whose record says how it ended is left as it is.
    again = job_records.end("early", "Failed", "late news")
    assert again is not None and again.status == "Stopped" and "FailureReason" not in again.doc


def test_a_record_read_again_is_the_file_as_it_is_now_and_each_reader_owns_its_copy(
        tmp_path: Path, state: Path) -> None:
    """Records' texts are kept while their file is the same file (serve reads them thousands of times
    a second): a rewrite within the same clock tick (a new file), a later hand edit of the same size
    and a removal are each seen at once, and a reader changing its dict changes no other reader's."""
    job_records.record("kept", tmp_path / "kept", "InProgress")
    first = job_records.find("kept")
    assert first is not None and first.status == "InProgress"
    first.doc["TrainingJobStatus"] = "Mutated"
    again = job_records.find("kept")
    assert again is not None and again.doc["TrainingJobStatus"] == "InProgress"
    job_records.record("kept", tmp_path / "kept", "Completed")  # renamed into place: a new file
    rewritten = job_records.find("kept")
    assert rewritten is not None and rewritten.status == "Completed"
    path = state / "jobs" / "kept.json"
    text = path.read_text()
    before = path.stat()
    path.write_text(text.replace('"Completed"', '"Stopped"'.ljust(len('"Completed"'))))  # same size, same file
    # A person edits a file seconds after it was written, not within the file system's clock tick.
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
    edited = job_records.find("kept")
    assert edited is not None and edited.status == "Stopped"
    path.unlink()
    assert job_records.find("kept") is None
