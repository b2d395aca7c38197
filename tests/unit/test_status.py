"""`emulator.result.Status`: the service's TrainingJobStatus values as one str Enum with `is_final`;
the files and answers that hold a status keep the service's text, and what is read back is a Status.
`SecondaryStatus`: the service's SecondaryStatus values a run goes through."""

from __future__ import annotations

import json
from pathlib import Path

import botocore.session
import pytest
from fake_backend import FakeBackend, exits

from emulator import api
from emulator.backend import registry
from emulator.jobspec import JobSpec, validate
from emulator.reports.console import RecordingReporter
from emulator.result import SecondaryStatus, Status
from emulator.state import job_records


def service_enum(shape: str) -> list[str]:
    """The values botocore's SageMaker model (the service's own API definition) lists for a shape."""
    return list(botocore.session.get_session().get_service_model("sagemaker").shape_for(shape).enum)


@pytest.fixture
def fake_engine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeBackend:
    fake = FakeBackend({"algo-1": exits(0), "algo-2": exits(1, stderr=["boom\n"])})
    monkeypatch.setitem(registry._FACTORIES, "fake", lambda: fake)
    monkeypatch.setenv("HETERO_EMU_STATE_DIR", str(tmp_path / "state"))
    return fake


def two_hosts(tmp_path: Path) -> JobSpec:
    (tmp_path / "code").mkdir(exist_ok=True)
    (tmp_path / "code" / "t.py").write_text("")
    return validate({"job_name": "status-job", "entry_point": "t.py", "source_dir": "code",
                     "instance_groups": [{"instance_group_name": "g", "instance_type": "ml.c5.xlarge",
                                          "instance_count": 2}],
                     "output_path": "out"}, base_dir=tmp_path)


def test_the_values_are_the_services_training_job_statuses() -> None:
    service = service_enum("TrainingJobStatus")
    assert {s.value for s in Status} <= set(service)
    # Deleting belongs to DeleteTrainingJob, which the emulator does not answer.
    assert set(service) - {s.value for s in Status} <= {"Deleting"}


def test_the_secondary_statuses_are_the_services() -> None:
    assert {s.value for s in SecondaryStatus} <= set(service_enum("SecondaryStatus"))
    assert f"{SecondaryStatus.MAX_RUNTIME_EXCEEDED}" == "MaxRuntimeExceeded"


def test_only_completed_failed_and_stopped_are_final() -> None:
    assert {s for s in Status if s.is_final} == {Status.COMPLETED, Status.FAILED, Status.STOPPED}
    assert not Status.IN_PROGRESS.is_final and not Status.STOPPING.is_final


def test_a_status_is_written_and_compared_as_the_services_text() -> None:
    assert Status.COMPLETED == "Completed" and Status("Stopped") is Status.STOPPED
    assert (str(Status.IN_PROGRESS), f"{Status.FAILED}", f"{Status.STOPPED:>8}") == ("InProgress", "Failed",
                                                                                    " Stopped")
    assert json.dumps({"TrainingJobStatus": Status.COMPLETED}) == '{"TrainingJobStatus": "Completed"}'
    with pytest.raises(ValueError):
        Status("Done")


def test_a_run_returns_a_status_and_its_files_hold_the_services_text(
        tmp_path: Path, fake_engine: FakeBackend) -> None:
    result = api.run(two_hosts(tmp_path), engine_name="fake", reporter=RecordingReporter())
    assert type(result.status) is Status and result.status is Status.FAILED and result.exit_code == 1
    assert result.secondary_status is SecondaryStatus.FAILED
    text = (result.job_dir / "job.json").read_text()
    assert '"TrainingJobStatus": "Failed"' in text
    doc = json.loads(text)
    secondaries = set(service_enum("SecondaryStatus"))
    assert {t["Status"] for t in doc["SecondaryStatusTransitions"]} <= secondaries
    record = job_records.find("status-job")
    assert record is not None and type(record.status) is Status and record.status is Status.FAILED
    assert json.loads(next((tmp_path / "state" / "jobs").glob("*.json")).read_text())["TrainingJobStatus"] == "Failed"


def test_a_record_ended_by_its_driver_reads_back_as_a_status(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HETERO_EMU_STATE_DIR", str(tmp_path / "state"))
    job_records.record("early", tmp_path / "early", Status.IN_PROGRESS, SecondaryStatus="Starting")
    assert job_records.find("early").status is Status.IN_PROGRESS  # type: ignore[union-attr]
    ended = job_records.end("early", Status.STOPPED)
    assert ended is not None and ended.status is Status.STOPPED and ended.status.is_final
    assert ended.doc["SecondaryStatusTransitions"][-1]["Status"] == "Stopped"


def test_a_record_with_a_status_the_service_does_not_have_is_not_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HETERO_EMU_STATE_DIR", str(tmp_path / "state"))
    job_records.record("odd", tmp_path / "odd", Status.COMPLETED)
    path = tmp_path / "state" / "jobs" / "odd.json"
    path.write_text(path.read_text().replace('"Completed"', '"Done"'))
    assert job_records.find("odd") is None
