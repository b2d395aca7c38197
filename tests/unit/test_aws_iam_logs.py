"""IAM's role checks and CloudWatch Logs over the jobs' log files, answered locally through a real
boto3 session's clients (their parameter checks, paginators, botocore's decoding of IAM's policy
documents and its modelled exceptions). The log readers of both SDKs are driven as they read: v3's
loop until an empty page, v2's `sagemaker.logs.multi_stream_iter` with its positions."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from sagemaker.logs import Position, multi_stream_iter

from emulator.aws import stub
from emulator.aws.iam import IAM
from emulator.aws.logs import GROUP, Logs
from emulator.state import job_records

CREATED = datetime(2024, 5, 6, 7, 8, 9, tzinfo=timezone.utc)
EPOCH = int(CREATED.timestamp())


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HETERO_EMU_STATE_DIR", str(tmp_path / "state"))


@pytest.fixture
def session() -> boto3.Session:
    made = boto3.Session(aws_access_key_id="x", aws_secret_access_key="y", region_name="eu-west-1")
    stub.install(made, [IAM(), Logs(region="eu-west-1")])
    return made


@pytest.fixture
def logs(session: boto3.Session) -> Any:
    return session.client("logs")


def job(tmp_path: Path, name: str, files: dict[str, bytes], status: str = "InProgress") -> Path:
    """A recorded job whose hosts wrote `files` (host -> log bytes)."""
    job_dir = tmp_path / "out" / name
    (job_dir / "logs").mkdir(parents=True)
    for host, data in files.items():
        (job_dir / "logs" / f"{host}.log").write_bytes(data)
    job_records.record(name, job_dir, status, CreationTime=CREATED.isoformat())
    return job_dir


def code(err: pytest.ExceptionInfo[ClientError]) -> str:
    return str(err.value.response["Error"]["Code"])


def messages(response: dict[str, Any]) -> list[str]:
    return [e["message"] for e in response["events"]]


# --------------------------------------------------------------------------------------------------
# IAM


def test_every_action_is_allowed_for_every_resource(session: boto3.Session) -> None:
    iam = session.client("iam")
    role = "arn:aws:iam::111122223333:role/SageMakerRole"
    pages = iam.get_paginator("simulate_principal_policy").paginate(
        PolicySourceArn=role, ActionNames=["s3:PutObject", "ecr:GetAuthorizationToken"])
    results = [r for page in pages for r in page["EvaluationResults"]]
    assert [(r["EvalActionName"], r["EvalResourceName"], r["EvalDecision"]) for r in results] == [
        ("s3:PutObject", "*", "allowed"), ("ecr:GetAuthorizationToken", "*", "allowed")]
    scoped = iam.simulate_principal_policy(PolicySourceArn=role, ActionNames=["s3:PutObject"],
                                           ResourceArns=["arn:aws:s3:::a/*", "arn:aws:s3:::b/*"])
    assert [r["EvalResourceName"] for r in scoped["EvaluationResults"]] == ["arn:aws:s3:::a/*", "arn:aws:s3:::b/*"]


def test_any_role_exists_and_trusts_sagemaker(session: boto3.Session) -> None:
    iam = session.client("iam")
    role = iam.get_role(RoleName="SageMakerRole")["Role"]
    assert role["Arn"] == "arn:aws:iam::000000000000:role/SageMakerRole"
    assert role["RoleId"] == iam.get_role(RoleName="SageMakerRole")["Role"]["RoleId"]
    assert role["RoleId"].startswith("AROA") and len(role["RoleId"]) == 21
    # Sent URL-encoded as IAM sends it, decoded by botocore as for a real answer.
    statement = role["AssumeRolePolicyDocument"]["Statement"][0]
    assert statement["Principal"] == {"Service": "sagemaker.amazonaws.com"} and statement["Effect"] == "Allow"
    with pytest.raises(ClientError) as err:
        iam.get_role(RoleName="x" * 65)
    assert code(err) == "ValidationError"


# --------------------------------------------------------------------------------------------------
# CloudWatch Logs: streams


def test_a_jobs_streams_are_its_hosts_in_host_order(tmp_path: Path, logs: Any) -> None:
    job(tmp_path, "j1", {f"algo-{n}": b"" for n in (1, 2, 10)})
    job(tmp_path, "j10", {"algo-1": b"x\n"})
    (tmp_path / "out" / "j1" / "logs" / "notes.txt").write_text("not a host's log")
    found = logs.describe_log_streams(logGroupName=GROUP, logStreamNamePrefix="j1/", orderBy="LogStreamName")
    streams = found["logStreams"]
    assert [s["logStreamName"] for s in streams] == [f"j1/algo-{n}-{EPOCH}" for n in (1, 2, 10)]
    assert {s["creationTime"] for s in streams} == {EPOCH * 1000}
    assert streams[0]["arn"] == f"arn:aws:logs:eu-west-1:000000000000:log-group:{GROUP}:log-stream:j1/algo-1-{EPOCH}"
    # A prefix without '/' may match several jobs; limit and nextToken page through them.
    page = logs.describe_log_streams(logGroupName=GROUP, logStreamNamePrefix="j1", limit=2)
    assert len(page["logStreams"]) == 2 and page["nextToken"]
    rest = logs.describe_log_streams(logGroupName=GROUP, logStreamNamePrefix="j1", nextToken=page["nextToken"])
    assert [s["logStreamName"] for s in rest["logStreams"]] == [f"j1/algo-10-{EPOCH}", f"j10/algo-1-{EPOCH}"]
    assert "nextToken" not in rest
    assert logs.describe_log_streams(logGroupName=GROUP, logStreamNamePrefix="nothing/")["logStreams"] == []
    descending = logs.describe_log_streams(logGroupName=GROUP, logStreamNamePrefix="j1/", descending=True)
    assert descending["logStreams"][0]["logStreamName"] == f"j1/algo-10-{EPOCH}"
    assert [g["logGroupName"] for g in logs.describe_log_groups(logGroupNamePrefix="/aws/sagemaker/")["logGroups"]] \
        == [GROUP]


def test_unknown_groups_streams_and_tokens_are_the_services_errors(tmp_path: Path, logs: Any) -> None:
    job(tmp_path, "j", {"algo-1": b"a\n"})
    with pytest.raises(ClientError) as err:
        logs.describe_log_streams(logGroupName="/aws/sagemaker/Endpoints/x")
    assert code(err) == "ResourceNotFoundException"
    for name in ("j/algo-2-" + str(EPOCH), f"j/algo-1-{EPOCH + 1}", "other/algo-1-1", "j"):
        with pytest.raises(ClientError) as err:
            logs.get_log_events(logGroupName=GROUP, logStreamName=name)
        assert code(err) == "ResourceNotFoundException", name
    with pytest.raises(ClientError) as err:
        logs.get_log_events(logGroupName=GROUP, logStreamName=f"j/algo-1-{EPOCH}", nextToken="f/999")
    assert code(err) == "InvalidParameterException"
    with pytest.raises(ClientError) as err:
        logs.describe_log_streams(logGroupName=GROUP, logStreamNamePrefix="j/", orderBy="LastEventTime")
    assert code(err) == "InvalidParameterException"


# --------------------------------------------------------------------------------------------------
# CloudWatch Logs: events


def test_events_page_forward_from_the_head_until_an_empty_page(tmp_path: Path, logs: Any) -> None:
    job(tmp_path, "j", {"algo-1": b"one\r\n\ntwo\nthree\nfour\n"})
    stream = f"j/algo-1-{EPOCH}"
    seen: list[str] = []
    token = None
    for _ in range(10):  # v3's LogStreamHandler loop: page until a page is empty
        extra = {"nextToken": token} if token else {}
        page = logs.get_log_events(logGroupName=GROUP, logStreamName=stream, startFromHead=True, limit=2, **extra)
        assert all(e["timestamp"] == EPOCH * 1000 for e in page["events"])
        seen += messages(page)
        if not page["events"]:
            assert page["nextForwardToken"] == token  # at the end: the same token back
            break
        token = page["nextForwardToken"]
    # CRLF's \r dropped, the empty line no event (CloudWatch takes none).
    assert seen == ["one", "two", "three", "four"]


def test_a_running_jobs_unfinished_line_waits_and_new_lines_follow_the_token(tmp_path: Path, logs: Any) -> None:
    job_dir = job(tmp_path, "j", {"algo-1": b"a\nhalf"})
    stream = f"j/algo-1-{EPOCH}"
    first = logs.get_log_events(logGroupName=GROUP, logStreamName=stream, startFromHead=True)
    assert messages(first) == ["a"]
    with open(job_dir / "logs" / "algo-1.log", "ab") as f:
        f.write(b" done\nb\npartial")
    more = logs.get_log_events(logGroupName=GROUP, logStreamName=stream, nextToken=first["nextForwardToken"])
    assert messages(more) == ["half done", "b"]
    job_records.record("j", job_dir, "Completed")
    last = logs.get_log_events(logGroupName=GROUP, logStreamName=stream, nextToken=more["nextForwardToken"])
    assert messages(last) == ["partial"]  # the job ended: its last line is complete
    end = logs.get_log_events(logGroupName=GROUP, logStreamName=stream, nextToken=last["nextForwardToken"])
    assert messages(end) == [] and end["nextForwardToken"] == last["nextForwardToken"]


def test_without_start_from_head_the_newest_events_come_first_and_page_backward(tmp_path: Path, logs: Any) -> None:
    job(tmp_path, "j", {"algo-1": b"".join(b"line %d\n" % n for n in range(1, 8)) + b"tail"}, status="Failed")
    stream = f"j/algo-1-{EPOCH}"
    newest = logs.get_log_events(logGroupName=GROUP, logStreamName=stream, limit=3)
    assert messages(newest) == ["line 6", "line 7", "tail"]
    older = logs.get_log_events(logGroupName=GROUP, logStreamName=stream, limit=3,
                                nextToken=newest["nextBackwardToken"])
    assert messages(older) == ["line 3", "line 4", "line 5"]
    oldest = logs.get_log_events(logGroupName=GROUP, logStreamName=stream, limit=3,
                                 nextToken=older["nextBackwardToken"])
    assert messages(oldest) == ["line 1", "line 2"]
    # Forward again from a backward page: what comes after it.
    after = logs.get_log_events(logGroupName=GROUP, logStreamName=stream, limit=2,
                                nextToken=oldest["nextForwardToken"])
    assert messages(after) == ["line 3", "line 4"]


def test_the_time_window_holds_all_events_of_a_stream_or_none(tmp_path: Path, logs: Any) -> None:
    job(tmp_path, "j", {"algo-1": b"a\nb\n"})
    stream = f"j/algo-1-{EPOCH}"
    millis = EPOCH * 1000
    inside = logs.get_log_events(logGroupName=GROUP, logStreamName=stream, startFromHead=True,
                                 startTime=millis, endTime=millis + 1)
    assert messages(inside) == ["a", "b"]
    assert messages(logs.get_log_events(logGroupName=GROUP, logStreamName=stream, startFromHead=True,
                                        startTime=millis + 1)) == []


def test_sdk_v2s_multi_stream_reader_follows_every_host(tmp_path: Path, logs: Any) -> None:
    job_dir = job(tmp_path, "j", {"algo-1": b"a1\na2\n", "algo-2": b"b1\n"})
    streams = [s["logStreamName"] for s in logs.describe_log_streams(
        logGroupName=GROUP, logStreamNamePrefix="j/", orderBy="LogStreamName")["logStreams"]]
    positions = {s: Position(timestamp=0, skip=0) for s in streams}

    def read() -> list[tuple[int, str]]:
        out = []
        for index, event in multi_stream_iter(logs, GROUP, streams, positions):
            out.append((index, event["message"]))
            # How the SDK's logs_for_job keeps its place: the timestamp and how many it saw at it.
            stream = streams[index]
            count = positions[stream].skip + 1 if event["timestamp"] == positions[stream].timestamp else 1
            positions[stream] = Position(timestamp=event["timestamp"], skip=count)
        return out

    assert sorted(read()) == [(0, "a1"), (0, "a2"), (1, "b1")]
    with open(job_dir / "logs" / "algo-2.log", "ab") as f:
        f.write(b"b2\n")
    assert read() == [(1, "b2")]  # only what is new, on the next poll
