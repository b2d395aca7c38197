"""`hetero-emu serve` answers a few read-only operations on its event loop (emulator/state/blocking.py): which
ones, that they do run there, that an operation which would wait goes to a worker thread and still
gets its answer, and that each place where one of them could wait says so."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import boto3
import pytest
from starlette.types import Message

from emulator import api
from emulator.aws.endpoint import Endpoint
from emulator.aws.logs import GROUP, Logs, stream_name
from emulator.aws.stub import Operation, Service
from emulator.aws.training import SageMakerTraining
from emulator.result import Status
from emulator.run import warm_pools
from emulator.serve import guard, server
from emulator.state import blocking, job_records

REGION = "us-west-2"
NOW = datetime.now(timezone.utc)


@pytest.fixture(autouse=True)
def own_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HETERO_EMU_STATE_DIR", str(tmp_path / "state"))


class _Captured(Exception):
    pass


def prepared(service: str, call: Callable[[Any], Any]) -> tuple[dict[str, Any], bytes]:
    """The ASGI scope and body of the request boto3 sends for `call`, captured before it is sent."""
    captured: list[Any] = []

    def grab(request: Any, **_: Any) -> None:
        captured.append(request)
        raise _Captured

    session = boto3.Session(aws_access_key_id="emu", aws_secret_access_key="emu", region_name=REGION)
    client = session.client(service, endpoint_url="http://127.0.0.1:4590")
    client.meta.events.register("before-send", grab)
    with pytest.raises(_Captured):
        call(client)
    request = captured[0]
    url = urlsplit(request.url)
    body = request.body or b""
    body = body.encode() if isinstance(body, str) else body if isinstance(body, bytes) else body.read()
    headers = [(k.lower().encode(), v if isinstance(v, bytes) else v.encode()) for k, v in request.headers.items()]
    scope = {"type": "http", "method": request.method, "path": url.path, "raw_path": url.path.encode(),
             "query_string": url.query.encode(), "headers": [*headers, (b"host", b"127.0.0.1:4590")],
             "http_version": "1.1", "scheme": "http", "server": ("127.0.0.1", 4590), "client": ("127.0.0.1", 1),
             "root_path": ""}
    return scope, body


def head_of(service: str, call: Callable[[Any], Any]) -> Any:
    scope, body = prepared(service, call)
    head = server._head(scope)
    head.body = body
    return head


def endpoint(tmp_path: Path) -> Endpoint:
    from emulator.sagemaker.local import local_aws, services

    (tmp_path / "s3").mkdir(exist_ok=True)
    aws = local_aws(s3_root=tmp_path / "s3", images=None, region=REGION, engine="docker", origin="test")
    return Endpoint(services(aws.training, aws.s3_root, aws.region), aws.region)


QUICK = [
    ("sagemaker", lambda c: c.describe_training_job(TrainingJobName="a-job")),
    ("sagemaker", lambda c: c.list_training_jobs()),
    ("logs", lambda c: c.get_log_events(logGroupName=GROUP, logStreamName="a-job/algo-1-1")),
    ("logs", lambda c: c.describe_log_streams(logGroupName=GROUP)),
    ("sts", lambda c: c.get_caller_identity()),
]
NOT_QUICK = [
    ("sagemaker", lambda c: c.stop_training_job(TrainingJobName="a-job")),
    ("sagemaker", lambda c: c.update_training_job(TrainingJobName="a-job",
                                                  ResourceConfig={"KeepAlivePeriodInSeconds": 60})),
    ("logs", lambda c: c.describe_log_groups()),
    ("s3", lambda c: c.get_object(Bucket="a-bucket", Key="a-key")),
    ("s3", lambda c: c.list_objects_v2(Bucket="a-bucket")),
]


@pytest.mark.parametrize(("service", "call"), QUICK)
def test_the_read_only_operations_on_the_emulators_own_files_are_quick(
        service: str, call: Callable[[Any], Any], tmp_path: Path) -> None:
    assert endpoint(tmp_path).quick(head_of(service, call))


@pytest.mark.parametrize(("service", "call"), NOT_QUICK)
def test_operations_that_change_things_or_read_users_data_are_not(
        service: str, call: Callable[[Any], Any], tmp_path: Path) -> None:
    assert not endpoint(tmp_path).quick(head_of(service, call))


def test_a_body_on_disk_or_one_that_cannot_be_read_is_not_quick(tmp_path: Path) -> None:
    served = endpoint(tmp_path)
    head = head_of("sts", lambda c: c.get_caller_identity())
    head.body = open(os.devnull, "rb")  # noqa: SIM115 - a spooled body is a file
    try:
        assert not served.quick(head)
    finally:
        head.body.close()
    head.body = b"Action=GetCallerIdentity&Version=\xff"
    assert not served.quick(head)


class _Identity(Service):
    """STS's GetCallerIdentity, noting the thread it ran on; it asks to wait when `wait` is set."""

    name = "sts"
    quick = frozenset({"GetCallerIdentity"})

    def __init__(self) -> None:
        self.threads: list[str] = []
        self.wait = False

    def operations(self) -> Mapping[str, Operation]:
        return {"GetCallerIdentity": self.identity}

    def identity(self, params: dict[str, Any]) -> dict[str, Any]:
        self.threads.append(threading.current_thread().name)
        if self.wait:
            blocking.may_block()
        return {"Account": "123456789012", "Arn": "arn:aws:iam::123456789012:user/x", "UserId": "x"}


def answer(app: server.App, scope: dict[str, Any], body: bytes) -> tuple[int, bytes]:
    sent: list[Message] = []
    given = False

    async def receive() -> Message:
        nonlocal given
        if given:
            return {"type": "http.disconnect"}
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def test_a_quick_operation_runs_on_the_event_loop_and_one_that_would_wait_in_a_worker() -> None:
    service = _Identity()
    app = server.App(Endpoint([service], REGION), names=guard.HostNames("127.0.0.1", ()))
    scope, body = prepared("sts", lambda c: c.get_caller_identity())
    loop_thread = threading.current_thread().name  # asyncio.run's loop runs on this thread
    try:
        status, text = answer(app, scope, body)
        assert status == 200 and b"123456789012" in text
        assert service.threads == [loop_thread]
        service.wait = True
        status, text = answer(app, scope, body)
        # Asked on the loop, refused there, then run again from the start in a worker: the same answer.
        assert status == 200 and b"123456789012" in text
        assert service.threads[1] == loop_thread
        assert service.threads[2].startswith("serve") and len(service.threads) == 3
    finally:
        app._workers.shutdown()


def test_may_block_raises_only_inside_forbidden() -> None:
    blocking.may_block()
    assert blocking.allowed()
    with blocking.forbidden():
        assert not blocking.allowed()
        with pytest.raises(blocking.WouldBlock):
            blocking.may_block()
    assert blocking.allowed()


# --------------------------------------------------------------------------------------------------
# Each place a quick operation could wait


def expired_pool(tmp_path: Path) -> Path:
    """A job whose warm pool is Available and past its keep-alive, with a host's cache folder."""
    job_dir = tmp_path / "out" / "pooled"
    cache = job_dir / warm_pools.FOLDER / "algo-1"
    cache.mkdir(parents=True)
    (cache / "weights.bin").write_bytes(b"x")
    since = NOW - timedelta(hours=1)
    job_records.record("pooled", job_dir, Status.COMPLETED, **{warm_pools.FIELD: {
        "Key": "k", "KeepAlive": 60, "Status": warm_pools.AVAILABLE, "Since": since.isoformat(), "Ended": None,
        "ReusedByJob": None}})
    return job_dir


def test_a_pool_to_terminate_would_wait_and_is_left_as_it_was(tmp_path: Path) -> None:
    job_dir = expired_pool(tmp_path)
    with blocking.forbidden(), pytest.raises(blocking.WouldBlock):
        warm_pools.status("pooled")
    assert (job_dir / warm_pools.FOLDER / "algo-1" / "weights.bin").exists()
    assert warm_pools.find("pooled").status == warm_pools.AVAILABLE  # type: ignore[union-attr]
    assert warm_pools.status("pooled")["Status"] == warm_pools.TERMINATED  # type: ignore[index]
    assert not (job_dir / warm_pools.FOLDER).exists()


def test_a_job_whose_driver_died_would_wait_to_be_failed(tmp_path: Path) -> None:
    training = SageMakerTraining(tmp_path / "s3", region=REGION)
    gone = 2**22 + 12345  # above the default pid_max: no process has it
    job_records.record("orphan", tmp_path / "orphan", Status.IN_PROGRESS, DriverPid=gone)
    with blocking.forbidden(), pytest.raises(blocking.WouldBlock):
        training.describe({"TrainingJobName": "orphan"})
    assert job_records.find("orphan").status == Status.IN_PROGRESS  # type: ignore[union-attr]
    assert training.describe({"TrainingJobName": "orphan"})["TrainingJobStatus"] == Status.FAILED


def test_many_records_would_wait_and_a_few_do_not(tmp_path: Path) -> None:
    for i in range(job_records.QUICK_JOBS):
        job_records.record(f"job-{i}", tmp_path / f"job-{i}", Status.COMPLETED)
    with blocking.forbidden():
        assert len(job_records.all_jobs()) == job_records.QUICK_JOBS
    job_records.record("one-more", tmp_path / "one-more", Status.COMPLETED)
    with blocking.forbidden(), pytest.raises(blocking.WouldBlock):
        job_records.all_jobs()
    assert len(job_records.all_jobs()) == job_records.QUICK_JOBS + 1


def test_a_large_page_of_a_log_would_wait_and_a_small_one_does_not(tmp_path: Path) -> None:
    folder = tmp_path / "logged"
    (folder / "logs").mkdir(parents=True)
    log = folder / "logs" / "algo-1.log"
    log.write_text("a line\n" * 10)
    job_records.record("logged", folder, Status.COMPLETED, CreationTime=NOW.isoformat())
    logs = Logs(region=REGION)
    params = {"logGroupName": GROUP, "logStreamName": stream_name("logged", "algo-1", NOW), "startFromHead": True}
    with blocking.forbidden():
        assert len(logs.get_log_events(dict(params))["events"]) == 10
    line = "x" * 99 + "\n"
    log.write_text(line * (blocking.QUICK_BYTES // len(line) + 1))
    for asked in (params, {**params, "startFromHead": False}):
        with blocking.forbidden(), pytest.raises(blocking.WouldBlock):
            logs.get_log_events(dict(asked))
    assert len(logs.get_log_events(dict(params))["events"]) == blocking.QUICK_BYTES // len(line) + 1


def test_a_large_job_json_would_wait(tmp_path: Path) -> None:
    folder = tmp_path / "big-job"
    (folder / "logs").mkdir(parents=True)
    (folder / "job.json").write_text(json.dumps({"TrainingJobName": "big-job", "Notes": "n" * blocking.QUICK_BYTES}))
    with blocking.forbidden(), pytest.raises(blocking.WouldBlock):
        api.describe(str(folder))
    assert api.describe(str(folder))["TrainingJobName"] == "big-job"
    (folder / "job.json").write_text(json.dumps({"TrainingJobName": "big-job"}))
    with blocking.forbidden():
        assert api.describe(str(folder))["TrainingJobName"] == "big-job"


def test_asking_the_engine_for_a_job_would_wait(tmp_path: Path) -> None:
    with blocking.forbidden(), pytest.raises(blocking.WouldBlock):
        api.job_folder("no-such-job-anywhere")
