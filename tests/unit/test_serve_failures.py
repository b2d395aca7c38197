"""`hetero-emu serve`'s own failures: an operation that raises, a form that is not UTF-8, a page path
or static file that does not exist, a local S3 root that fails. Each is one answer in the service's
shape (or a plain 404 for the page), with no traceback and no host path in it, and the server goes on.

The raising operation is real code over real HTTP: a server of this process (the same `App` and
`Endpoint` `serve` runs, under Uvicorn on a port of its own) whose services raise, asked by boto3.
The rest asks a real `hetero-emu serve` process (tests/support/serving.py)."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import boto3
import cbor2
import pytest
import requests
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError
from botocore.parsers import create_parser
from serving import Server, running_server

from emulator.aws.endpoint import INERT_HEADERS, Endpoint
from emulator.aws.stub import Operation, Service
from emulator.aws.wire import HttpRequest
from emulator.serve import server as serve_server

SECRET_PATH = "/home/someone/very/private/s3-root"


class Raising(Service):
    """A service each of whose operations fails with an exception naming a host path."""

    def __init__(self, name: str, operations: tuple[str, ...]) -> None:
        self.name = name
        self._names = operations

    def operations(self) -> Mapping[str, Operation]:
        def fail(params: dict[str, Any]) -> dict[str, Any]:
            raise OSError(2, "No such file or directory", f"{SECRET_PATH}/bucket/key")
        return {name: fail for name in self._names}


RAISING = [Raising("sagemaker", ("ListTrainingJobs",)), Raising("sts", ("GetCallerIdentity",)),
           Raising("s3", ("ListBuckets",)), Raising("logs", ("DescribeLogGroups",)),
           Raising("cloudwatch", ("ListMetrics",))]


@pytest.fixture(scope="module")
def broken() -> Iterator[str]:
    """The URL of a server (the real App under Uvicorn, in a thread) whose operations all raise."""
    import uvicorn

    app = serve_server.App(Endpoint(RAISING, "us-west-2"))
    sock = serve_server.bind("127.0.0.1", 0)
    config = uvicorn.Config(app, log_level="critical", access_log=False, lifespan="off")
    runner = uvicorn.Server(config)
    thread = threading.Thread(target=runner.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not runner.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert runner.started
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    runner.should_exit = True
    thread.join(timeout=30)
    sock.close()


def boto(url: str, service: str) -> Any:
    session = boto3.Session(aws_access_key_id="emu", aws_secret_access_key="emu", region_name="us-west-2")
    return session.client(service, endpoint_url=url,  # type: ignore[call-overload]
                           config=Config(retries={"max_attempts": 1, "mode": "standard"}))


CALLS = [("sagemaker", "list_training_jobs", "InternalFailure"), ("sts", "get_caller_identity", "InternalFailure"),
         ("s3", "list_buckets", "InternalError"), ("logs", "describe_log_groups", "InternalFailure"),
         ("cloudwatch", "list_metrics", "InternalFailure")]


@pytest.mark.parametrize(("service", "call", "code"), CALLS, ids=[c[0] for c in CALLS])
def test_an_operation_that_raises_is_a_500_botocore_parses_without_its_text(
        broken: str, service: str, call: str, code: str, caplog: pytest.LogCaptureFixture) -> None:
    client = boto(broken, service)
    with caplog.at_level(logging.ERROR, logger="emulator.aws.endpoint"), pytest.raises(ClientError) as caught:
        getattr(client, call)()
    error = caught.value.response
    message = error["Error"]["Message"]
    rid = error["ResponseMetadata"]["RequestId"]

    assert error["ResponseMetadata"]["HTTPStatusCode"] == 500
    assert error["Error"]["Code"] == code
    assert f"request ID {rid}" in message  # the ID the client reports is the one in the server's log
    assert SECRET_PATH not in message and "OSError" not in message and "Traceback" not in message
    logged = [r for r in caplog.records if f"request {rid}" in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is not None  # the traceback, once, on the server's side


def test_the_server_answers_again_after_an_operation_raised(broken: str) -> None:
    s3 = boto(broken, "s3")
    for _ in range(3):
        with pytest.raises(ClientError) as caught:
            s3.list_buckets()
        assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500


def test_a_raising_operation_in_the_cbor_protocol_is_a_500_botocore_parses() -> None:
    # boto3 speaks JSON 1.0 to CloudWatch; the CBOR protocol (newer SDKs) is asked here as they send it.
    endpoint = Endpoint(RAISING, "us-west-2")
    answer = endpoint.handle(HttpRequest(
        "POST", "/service/GraniteServiceVersion20100801/operation/ListMetrics", [],
        {"smithy-protocol": "rpc-v2-cbor", "content-type": "application/cbor", "accept": "application/cbor"},
        cbor2.dumps({})))
    assert isinstance(answer.body, bytes)
    parsed = create_parser("smithy-rpc-v2-cbor").parse(
        {"status_code": answer.status, "headers": answer.headers, "body": answer.body}, None)

    assert answer.status == 500 and parsed["Error"]["Code"] == "InternalFailure"
    assert f"request ID {answer.headers['x-amzn-requestid']}" in parsed["Error"]["Message"]
    assert SECRET_PATH not in parsed["Error"]["Message"]


def test_an_exception_outside_the_endpoint_is_a_500_in_the_services_shape(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """What escapes `App.answer` itself (reading the body, a codec) is still the service's 500."""
    from starlette.testclient import TestClient

    app = serve_server.App(Endpoint(RAISING, "us-west-2"))

    async def crash(self: object, request: object) -> None:
        raise RuntimeError(f"reading {SECRET_PATH} went wrong")

    monkeypatch.setattr(serve_server.App, "_read_body", crash)
    with TestClient(app, raise_server_exceptions=False) as http:
        got = http.post("/", headers={"X-Amz-Target": "SageMaker.ListTrainingJobs",
                                      "Content-Type": "application/x-amz-json-1.1"}, content=b"{}")
    assert got.status_code == 500 and got.json()["__type"] == "InternalFailure"
    assert SECRET_PATH not in got.text and "Traceback" not in got.text


def test_an_exception_in_a_page_route_is_a_bare_500(monkeypatch: pytest.MonkeyPatch) -> None:
    from starlette.responses import Response
    from starlette.routing import Route
    from starlette.testclient import TestClient

    async def crash(request: object) -> Response:
        raise RuntimeError(f"the page read {SECRET_PATH}")

    app = serve_server.App(Endpoint(RAISING, "us-west-2"), page=[Route("/", crash)])
    with TestClient(app, raise_server_exceptions=False) as http:
        got = http.get("/")
    assert got.status_code == 500 and got.text == "Internal Server Error"


# --------------------------------------------------------------------------------------------------
# A real server process


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running_server(tmp_path_factory.mktemp("serve-failures")) as running:
        yield running


def client(server: Server, service: str) -> Any:
    return server.client(service, retries={"max_attempts": 1, "mode": "standard"})


@pytest.mark.parametrize("body", [b"Action=GetCallerIdentity&Version=2011-06-15&Name=%FF%FE",
                                  b"Action=GetCallerIdentity&Version=2011-06-15&Name=\xff\xfe"],
                         ids=["percent-encoded", "raw"])
def test_a_form_that_is_not_utf8_is_a_400_in_the_query_shape(server: Server, body: bytes) -> None:
    # Signed as an SDK signs it (an unsigned POST is refused before its form is read: guard.py).
    signed = AWSRequest("POST", server.url + "/", data=body,
                        headers={"Content-Type": "application/x-www-form-urlencoded"})
    SigV4Auth(Credentials("emu", "emu"), "sts", server.region).add_auth(signed)
    got = requests.post(server.url + "/", data=body, headers=dict(signed.headers.items()), timeout=30)
    parsed = create_parser("query").parse({"status_code": got.status_code, "headers": dict(got.headers),
                                           "body": got.content}, None)

    assert got.status_code == 400 and got.headers["content-type"].startswith("text/xml")
    assert parsed["Error"]["Code"] == "MalformedQueryString"
    assert "UTF-8" in parsed["Error"]["Message"]
    assert client(server, "sts").get_caller_identity()["Account"]  # and the server goes on


def test_a_missing_static_file_is_a_404(server: Server) -> None:
    got = requests.get(server.url + "/_hetero-emu/static/no-such-file.js", timeout=30)
    assert got.status_code == 404 and "Traceback" not in got.text
    assert requests.get(server.url + "/_hetero-emu/static/job.js", timeout=30).status_code == 200


@pytest.mark.parametrize("path", ["/_hetero-emu/nothing-here", "/jobs/some-job/no/such/page"])
def test_an_unknown_page_path_is_a_404(server: Server, path: str) -> None:
    got = requests.get(server.url + path, timeout=30)
    assert got.status_code == 404 and "Traceback" not in got.text


def test_a_failing_s3_root_is_s3s_500_without_the_roots_path(server: Server) -> None:
    s3 = client(server, "s3")
    s3.create_bucket(Bucket="failing-root", CreateBucketConfiguration={"LocationConstraint": server.region})
    uploads = server.s3_root / ".hetero-emu-uploads"
    aside = server.s3_root.parent / "uploads-aside"
    if uploads.exists():
        uploads.rename(aside)
    uploads.write_text("a file where the uploads folder goes: every write fails")
    try:
        with pytest.raises(ClientError) as caught:
            s3.put_object(Bucket="failing-root", Key="k", Body=b"x")
    finally:
        uploads.unlink()
        if aside.exists():
            aside.rename(uploads)
    error = caught.value.response

    assert error["ResponseMetadata"]["HTTPStatusCode"] == 500 and error["Error"]["Code"] == "InternalError"
    assert str(server.s3_root) not in error["Error"]["Message"] and "/" not in error["Error"]["Message"]
    s3.put_object(Bucket="failing-root", Key="k", Body=b"x")  # and once the root is right again, it works


def test_s3s_messages_name_buckets_and_keys_never_folders(server: Server, tmp_path: Path) -> None:
    s3 = client(server, "s3")
    (server.s3_root / "a-file-not-a-bucket").write_text("in the way")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("not S3's")
    s3.create_bucket(Bucket="linked", CreateBucketConfiguration={"LocationConstraint": server.region})
    os.symlink(outside / "secret.txt", server.s3_root / "linked" / "out")
    messages = []
    for call, kwargs in [(s3.list_objects_v2, {"Bucket": "no-such-bucket"}),
                         (s3.create_bucket, {"Bucket": "a-file-not-a-bucket",
                                             "CreateBucketConfiguration": {"LocationConstraint": server.region}}),
                         (s3.create_bucket, {"Bucket": "linked",
                                             "CreateBucketConfiguration": {"LocationConstraint": server.region}}),
                         (s3.get_object, {"Bucket": "linked", "Key": "out"})]:
        with pytest.raises(ClientError) as caught:
            call(**kwargs)
        messages.append(caught.value.response["Error"]["Message"])

    assert [m.split(":")[0] for m in messages] == [
        "The specified bucket does not exist", "The requested bucket name is not available",
        "Your previous request to create the named bucket succeeded and you already own it (linked)",
        "Access Denied"]
    for message in messages:
        assert str(server.s3_root) not in message and str(outside) not in message


def test_every_answer_of_the_endpoint_carries_the_inert_headers(server: Server) -> None:
    s3 = client(server, "s3")
    with pytest.raises(ClientError) as caught:
        s3.list_objects_v2(Bucket="no-such-bucket-here")
    listed = client(server, "sagemaker").list_training_jobs()
    for headers in (caught.value.response["ResponseMetadata"]["HTTPHeaders"],
                    listed["ResponseMetadata"]["HTTPHeaders"]):
        assert {k: headers.get(k) for k in INERT_HEADERS} == INERT_HEADERS


def test_a_path_under_the_s3_root_in_any_message_is_written_as_its_uri(tmp_path: Path) -> None:
    """A service's message that names a file under the S3 root (a CreateTrainingJob check of an
    s3:// folder, say) reaches the client with the object's URI instead."""
    from emulator.aws.s3 import S3
    from emulator.aws.stub import ApiError

    root = tmp_path / "s3-root"
    root.mkdir()

    class Naming(Service):
        name = "sagemaker"

        def operations(self) -> Mapping[str, Operation]:
            def refuse(params: dict[str, Any]) -> dict[str, Any]:
                raise ApiError("ResourceInUse", f"the output folder {root}/bucket/out/job exists already (S3 root "
                               f"{root})")
            return {"ListTrainingJobs": refuse}

    endpoint = Endpoint([Naming(), S3(root, region="us-west-2")], "us-west-2")
    answer = endpoint.handle(HttpRequest("POST", "/", [], {"x-amz-target": "SageMaker.ListTrainingJobs",
                                                           "content-type": "application/x-amz-json-1.1"}, b"{}"))
    assert isinstance(answer.body, bytes)
    parsed = create_parser("json").parse({"status_code": answer.status, "headers": answer.headers,
                                          "body": answer.body}, None)

    assert parsed["Error"]["Code"] == "ResourceInUse"
    assert parsed["Error"]["Message"] == "the output folder s3://bucket/out/job exists already (S3 root)"
