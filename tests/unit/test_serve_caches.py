"""`hetero-emu serve` keeps what it read from a job's record and log files while each file stays the
same file (emulator/state/job_records.py `identity`): these tests change a record or a log between two calls
to a real server process and see the new answer, at once and once the file has settled."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from serving import Server, running_server

from emulator.aws.logs import GROUP, stream_name
from emulator.result import Status
from emulator.run import warm_pools
from emulator.state import job_records

SETTLE = job_records.SETTLED_NS / 1e9 * 2  # long enough for a read to be kept


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running_server(tmp_path_factory.mktemp("serve-caches")) as running:
        yield running


@pytest.fixture
def state(server: Server, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The server's state folder, where this process writes records as a job's run would."""
    monkeypatch.setenv("HETERO_EMU_STATE_DIR", str(server.state_dir))
    return server.state_dir


def client(server: Server, service: str) -> Any:
    return server.client(service)


def test_a_record_rewritten_with_the_same_size_is_described_anew(server: Server, state: Path,
                                                                  tmp_path: Path) -> None:
    sagemaker = client(server, "sagemaker")
    job_records.record("cached-job", tmp_path / "cached-job", Status.IN_PROGRESS, SecondaryStatus="Starting")
    time.sleep(SETTLE)
    assert sagemaker.describe_training_job(TrainingJobName="cached-job")["SecondaryStatus"] == "Starting"
    assert sagemaker.describe_training_job(TrainingJobName="cached-job")["SecondaryStatus"] == "Starting"
    size = (state / "jobs" / "cached-job.json").stat().st_size
    # The same length of text: only the inode, the mtime or the racy-file rule tells the files apart.
    job_records.record("cached-job", tmp_path / "cached-job", Status.IN_PROGRESS, SecondaryStatus="Training")
    assert (state / "jobs" / "cached-job.json").stat().st_size == size
    assert sagemaker.describe_training_job(TrainingJobName="cached-job")["SecondaryStatus"] == "Training"
    listed = sagemaker.list_training_jobs(NameContains="cached-job")["TrainingJobSummaries"]
    assert [s["SecondaryStatus"] for s in listed] == ["Training"]
    time.sleep(SETTLE)
    assert sagemaker.describe_training_job(TrainingJobName="cached-job")["SecondaryStatus"] == "Training"
    job_records.record("cached-job", tmp_path / "cached-job", Status.STOPPED, SecondaryStatus="Stopped")
    assert sagemaker.describe_training_job(TrainingJobName="cached-job")["TrainingJobStatus"] == "Stopped"


def test_a_log_that_grew_is_read_again(server: Server, state: Path, tmp_path: Path) -> None:
    created = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    folder = tmp_path / "growing-job"
    (folder / "logs").mkdir(parents=True)
    log = folder / "logs" / "algo-1.log"
    log.write_text("first\nsecond\n")
    job_records.record("growing-job", folder, Status.IN_PROGRESS, CreationTime=created.isoformat())
    time.sleep(SETTLE)
    logs = client(server, "logs")
    stream = stream_name("growing-job", "algo-1", created)

    def messages() -> list[str]:
        got = logs.get_log_events(logGroupName=GROUP, logStreamName=stream, startFromHead=True)
        return [e["message"] for e in got["events"]]

    assert messages() == ["first", "second"]
    assert messages() == ["first", "second"]  # kept, and still the same answer
    with log.open("a") as f:
        f.write("third\n")
    assert messages() == ["first", "second", "third"]
    time.sleep(SETTLE)
    assert messages() == ["first", "second", "third"]
    # Rewritten in place to the same size: another mtime, another answer.
    log.write_text("FIRST\nSECOND\nthird\n")
    assert messages() == ["FIRST", "SECOND", "third"]


def ended_job(folder: Path, end: datetime, **record: Any) -> None:
    """A job that ended as a run leaves it: logs/, a job.json, and its record."""
    (folder / "logs").mkdir(parents=True, exist_ok=True)
    (folder / "job.json").write_text(json.dumps({
        "TrainingJobName": folder.name, "TrainingJobStatus": "Completed", "SecondaryStatus": "Completed",
        "CreationTime": T0.isoformat(), "TrainingEndTime": end.isoformat()}))
    job_records.record(folder.name, folder, Status.COMPLETED, CreationTime=T0.isoformat(), **record)


T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def test_a_listed_jobs_row_follows_its_job_json(server: Server, state: Path, tmp_path: Path) -> None:
    sagemaker = client(server, "sagemaker")
    folder = tmp_path / "listed-job"
    ended_job(folder, T0 + timedelta(minutes=5))
    time.sleep(SETTLE)

    def end_time() -> datetime:
        (row,) = sagemaker.list_training_jobs(NameContains="listed-job")["TrainingJobSummaries"]
        return row["TrainingEndTime"]  # type: ignore[no-any-return]

    assert end_time() == T0 + timedelta(minutes=5)
    assert end_time() == T0 + timedelta(minutes=5)  # kept, and still the same row
    (folder / "job.json").write_text((folder / "job.json").read_text().replace("03:09:05", "03:10:05"))
    assert end_time() == T0 + timedelta(minutes=6)
    time.sleep(SETTLE)
    assert end_time() == T0 + timedelta(minutes=6)


def test_a_kept_row_shows_its_warm_pool_as_it_is_now(server: Server, state: Path, tmp_path: Path) -> None:
    """The row is kept, its WarmPoolStatus is not: a pool whose keep-alive ends between two calls is
    Terminated in the second, and its folders are removed (by a worker: the event loop may not)."""
    sagemaker = client(server, "sagemaker")
    folder = tmp_path / "pooled-job"
    cache = folder / warm_pools.FOLDER / "algo-1"
    cache.mkdir(parents=True)
    since = datetime.now(timezone.utc)
    ended_job(folder, since, **{warm_pools.FIELD: {"Key": "k", "KeepAlive": 3, "Status": warm_pools.AVAILABLE,
                                                   "Since": since.isoformat(), "Ended": None, "ReusedByJob": None}})
    time.sleep(SETTLE)

    def pool() -> str:
        (row,) = sagemaker.list_training_jobs(NameContains="pooled-job")["TrainingJobSummaries"]
        return str(row["WarmPoolStatus"]["Status"])

    assert pool() == warm_pools.AVAILABLE
    assert pool() == warm_pools.AVAILABLE
    time.sleep(max(0.0, (since + timedelta(seconds=3) - datetime.now(timezone.utc)).total_seconds()) + 0.2)
    assert pool() == warm_pools.TERMINATED
    assert not cache.exists()
    assert sagemaker.describe_training_job(TrainingJobName="pooled-job")["WarmPoolStatus"]["Status"] == \
        warm_pools.TERMINATED


def test_a_kept_description_is_each_callers_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What one caller does to a described job (the in-process session hands it to the user's code)
    never shows in the next answer: each answer is read anew from the kept text."""
    from emulator.aws.training import SageMakerTraining

    monkeypatch.setenv("HETERO_EMU_STATE_DIR", str(tmp_path / "state"))
    folder = tmp_path / "own-job"
    ended_job(folder, T0 + timedelta(minutes=5), Request={"AlgorithmSpecification": {
        "TrainingImage": "img", "MetricDefinitions": [{"Name": "loss", "Regex": "loss=(.*)"}]}})
    time.sleep(SETTLE)
    training = SageMakerTraining(tmp_path / "s3", region="us-west-2")
    first = training.describe({"TrainingJobName": "own-job"})
    first["AlgorithmSpecification"]["MetricDefinitions"][0]["Name"] = "changed"
    viewed = training.description(training.found("own-job"))  # the emulator's view, for the page
    viewed["Emulator"]["Image"] = "changed"
    again = training.describe({"TrainingJobName": "own-job"})
    assert again["AlgorithmSpecification"]["MetricDefinitions"] == [{"Name": "loss", "Regex": "loss=(.*)"}]
    assert training.description(training.found("own-job"))["Emulator"]["Image"] == "img"
    assert again["TrainingEndTime"] == (T0 + timedelta(minutes=5)).isoformat()
