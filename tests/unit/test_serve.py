"""`hetero-emu serve` answered over real HTTP: boto3 clients (botocore's own serializers, parsers,
retries and exceptions) against a server process, for every service it answers, and the bad input the
issue names. No Docker: the training jobs' own tests are in tests/integration/test_serve_clients.py."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import requests
from boto3.s3.transfer import TransferConfig
from botocore import UNSIGNED
from botocore.config import Config
from botocore.exceptions import ClientError
from serving import Server, running_server

from emulator.aws.endpoint import Endpoint
from emulator.aws.sts import ACCOUNT
from emulator.sagemaker.local import local_aws, services
from emulator.serve.server import App

MB = 1024 * 1024


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running_server(tmp_path_factory.mktemp("serve")) as running:
        yield running


def client(server: Server, service: str, **kwargs: Any) -> Any:
    session = boto3.Session(aws_access_key_id=kwargs.pop("key", "emu"),
                            aws_secret_access_key=kwargs.pop("secret", "emu"),
                            region_name=kwargs.pop("region", server.region))
    return session.client(service, endpoint_url=server.url,  # type: ignore[call-overload]
                          config=Config(retries={"max_attempts": 1}, **kwargs))


def signed(server: Server, service: str, body: bytes | dict[str, str], headers: dict[str, str]) -> dict[str, str]:
    """`headers` with botocore's own SigV4 signature over a POST of `body` to the server (`service`: the
    signing name): a request the server must see signed, since it answers unsigned POSTs with the
    service's MissingAuthenticationToken (emulator/serve/guard.py)."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    request = AWSRequest(method="POST", url=server.url + "/", data=body, headers=headers)
    SigV4Auth(Credentials("emu", "emu"), service, server.region).add_auth(request)
    return dict(request.headers.items())


def error_of(call: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    with pytest.raises(ClientError) as caught:
        call(*args, **kwargs)
    return dict(caught.value.response)


# --------------------------------------------------------------------------------------------------
# S3


def test_s3_objects_round_trip_with_awkward_keys(server: Server) -> None:
    s3 = client(server, "s3")
    s3.create_bucket(Bucket="round-trip", CreateBucketConfiguration={"LocationConstraint": server.region})
    for key in ("data/a b+c.txt", "data/ünïcode~/x.bin", "top.json"):
        body = key.encode() * 3
        s3.put_object(Bucket="round-trip", Key=key, Body=body, Metadata={"who": "serve-test"})
        got = s3.get_object(Bucket="round-trip", Key=key)
        assert got["Body"].read() == body
        assert got["Metadata"] == {}  # a file on the local root keeps its bytes, not S3's metadata
        assert got["ETag"] == f'"{hashlib.md5(body).hexdigest()}"'
        assert (server.s3_root / "round-trip" / key).read_bytes() == body
    listed = s3.list_objects_v2(Bucket="round-trip", Prefix="data/", Delimiter="/")
    assert [p["Prefix"] for p in listed["CommonPrefixes"]] == ["data/ünïcode~/"]
    assert [o["Key"] for o in listed["Contents"]] == ["data/a b+c.txt"]
    ranged = s3.get_object(Bucket="round-trip", Key="top.json", Range="bytes=2-5")
    assert ranged["Body"].read() == (b"top.json" * 3)[2:6]
    assert ranged["ResponseMetadata"]["HTTPStatusCode"] == 206


def test_s3_missing_things_are_s3s_own_errors(server: Server) -> None:
    s3 = client(server, "s3")
    s3.create_bucket(Bucket="errors-here", CreateBucketConfiguration={"LocationConstraint": server.region})
    with pytest.raises(s3.exceptions.NoSuchKey):
        s3.get_object(Bucket="errors-here", Key="nothing")
    with pytest.raises(s3.exceptions.NoSuchBucket):
        s3.list_objects_v2(Bucket="no-such-bucket-here")
    head = error_of(s3.head_object, Bucket="errors-here", Key="nothing")
    assert head["Error"]["Code"] == "404"
    bad = error_of(s3.create_bucket, Bucket="Bad_Bucket")
    assert bad["Error"]["Code"] == "InvalidBucketName"


def test_a_multipart_upload_and_a_copy_and_a_batch_delete(server: Server, tmp_path: Path) -> None:
    s3 = client(server, "s3")
    s3.create_bucket(Bucket="multi", CreateBucketConfiguration={"LocationConstraint": server.region})
    data = os.urandom(13 * MB)
    source = tmp_path / "big.bin"
    source.write_bytes(data)
    s3.upload_file(str(source), "multi", "big/part.bin",
                   Config=TransferConfig(multipart_threshold=5 * MB, multipart_chunksize=5 * MB, max_concurrency=4))
    assert (server.s3_root / "multi" / "big" / "part.bin").read_bytes() == data
    s3.copy_object(Bucket="multi", Key="copy.bin", CopySource={"Bucket": "multi", "Key": "big/part.bin"})
    back = tmp_path / "back.bin"
    s3.download_file("multi", "copy.bin", str(back))
    assert back.read_bytes() == data
    gone = s3.delete_objects(Bucket="multi", Delete={"Objects": [{"Key": "copy.bin"}, {"Key": "big/part.bin"}]})
    assert sorted(d["Key"] for d in gone["Deleted"]) == ["big/part.bin", "copy.bin"]
    assert s3.list_objects_v2(Bucket="multi")["KeyCount"] == 0


def test_a_presigned_url_and_virtual_host_addressing(server: Server) -> None:
    s3 = client(server, "s3")
    s3.create_bucket(Bucket="hosted", CreateBucketConfiguration={"LocationConstraint": server.region})
    s3.put_object(Bucket="hosted", Key="dir/file.txt", Body=b"virtual")
    url = s3.generate_presigned_url("get_object", Params={"Bucket": "hosted", "Key": "dir/file.txt"})
    assert requests.get(url, timeout=10).content == b"virtual"
    # What a client with addressing_style "virtual" sends: the bucket in the Host header.
    port = server.url.rsplit(":", 1)[1]
    answer = requests.get(f"{server.url}/dir/file.txt", headers={"Host": f"hosted.localhost:{port}"}, timeout=10)
    assert answer.status_code == 200 and answer.content == b"virtual"


# --------------------------------------------------------------------------------------------------
# the other services


def test_sts_iam_logs_and_cloudwatch_answer(server: Server) -> None:
    assert client(server, "sts").get_caller_identity()["Account"] == ACCOUNT
    role = client(server, "iam").get_role(RoleName="SageMakerRole")["Role"]
    assert role["Arn"].endswith(":role/SageMakerRole")
    streams = client(server, "logs").describe_log_streams(logGroupName="/aws/sagemaker/TrainingJobs",
                                                           logStreamNamePrefix="nothing/")
    assert streams["logStreams"] == []
    assert client(server, "cloudwatch").list_metrics(Namespace="/aws/sagemaker/TrainingJobs")["Metrics"] == []


def test_cloudwatch_answers_its_older_query_protocol_too(server: Server) -> None:
    form = {"Action": "ListMetrics", "Version": "2010-08-01", "Namespace": "/aws/sagemaker/TrainingJobs"}
    answer = requests.post(server.url, data=form, timeout=10, headers=signed(server, "monitoring", form, {
        "Content-Type": "application/x-www-form-urlencoded; charset=utf-8"}))
    assert answer.status_code == 200
    assert b"<ListMetricsResponse" in answer.content


def test_sagemaker_lists_and_refuses_as_the_service_does(server: Server) -> None:
    sagemaker = client(server, "sagemaker")
    assert sagemaker.list_training_jobs()["TrainingJobSummaries"] == []
    missing = error_of(sagemaker.describe_training_job, TrainingJobName="never-ran")
    assert missing["Error"] == {"Code": "ValidationException", "Message": "Requested resource not found."}
    assert missing["ResponseMetadata"]["HTTPStatusCode"] == 400


# --------------------------------------------------------------------------------------------------
# bad input


def test_an_operation_not_emulated_is_named_in_the_services_error(server: Server) -> None:
    endpoints = error_of(client(server, "sagemaker").list_endpoints)
    assert endpoints["Error"]["Code"] == "UnknownOperationException"
    assert "ListEndpoints" in endpoints["Error"]["Message"]
    tagging = error_of(client(server, "s3").get_bucket_tagging, Bucket="any")
    assert tagging["Error"]["Code"] == "NotImplemented" and "GetBucketTagging" in tagging["Error"]["Message"]
    assume = error_of(client(server, "sts").assume_role, RoleArn=f"arn:aws:iam::{ACCOUNT}:role/x",
                      RoleSessionName="session")
    assert assume["Error"]["Code"] == "InvalidAction" and "AssumeRole" in assume["Error"]["Message"]


def test_a_request_signed_for_another_region_gets_the_services_answer(server: Server) -> None:
    wrong = error_of(client(server, "sagemaker", region="eu-west-1").list_training_jobs)
    assert wrong["Error"]["Code"] == "InvalidSignatureException"
    assert "'eu-west-1'" in wrong["Error"]["Message"] and server.region in wrong["Error"]["Message"]
    # S3 names the right region, and botocore's S3 client follows it by itself, as with AWS.
    s3 = client(server, "s3", region="eu-west-1")
    client(server, "s3").create_bucket(Bucket="elsewhere",
                                       CreateBucketConfiguration={"LocationConstraint": server.region})
    s3.put_object(Bucket="elsewhere", Key="k", Body=b"found")
    assert (server.s3_root / "elsewhere" / "k").read_bytes() == b"found"


def test_malformed_requests_are_400s_and_the_server_goes_on(server: Server) -> None:
    headers = {"X-Amz-Target": "SageMaker.ListTrainingJobs", "Content-Type": "application/x-amz-json-1.1"}
    bad_json = requests.post(server.url, data=b"{not json", timeout=10,
                             headers=signed(server, "sagemaker", b"{not json", headers))
    assert bad_json.status_code == 400
    assert bad_json.json()["__type"].endswith("SerializationException")
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        raw.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        assert raw.recv(100).startswith(b"HTTP/1.1 400")
    assert client(server, "sts").get_caller_identity()["Account"] == ACCOUNT


def test_a_client_that_disconnects_mid_upload_leaves_the_server_serving(server: Server) -> None:
    client(server, "s3").create_bucket(Bucket="cut-off",
                                       CreateBucketConfiguration={"LocationConstraint": server.region})
    host, port = server.url.removeprefix("http://").split(":")
    for _ in range(3):
        with socket.create_connection((host, int(port)), timeout=10) as raw:
            raw.sendall(b"PUT /cut-off/half HTTP/1.1\r\nHost: localhost\r\nContent-Length: 10000000\r\n"
                        b"Authorization: AWS4-HMAC-SHA256 Credential=emu/20261204/us-west-2/s3/aws4_request, "
                        b"SignedHeaders=host, Signature=0\r\n\r\n" + b"x" * MB)
    s3 = client(server, "s3")
    assert s3.list_objects_v2(Bucket="cut-off")["KeyCount"] == 0  # nothing half-written is an object
    s3.put_object(Bucket="cut-off", Key="whole", Body=b"ok")
    assert s3.get_object(Bucket="cut-off", Key="whole")["Body"].read() == b"ok"


def test_too_large_a_body_is_refused_in_each_services_shape(tmp_path: Path) -> None:
    from starlette.testclient import TestClient

    aws = local_aws(s3_root=tmp_path, images=None, region="us-west-2", engine="docker", origin="test")
    app = App(Endpoint(services(aws.training, aws.s3_root, aws.region), aws.region), body_limit=1000)
    (tmp_path / "bucket").mkdir()
    with TestClient(app) as http:
        put = http.put("/bucket/key", content=b"x" * 1001)
        assert put.status_code == 400 and b"<Code>EntityTooLarge</Code>" in put.content
        create = http.post("/", content=b"{" + b" " * 2000 + b"}", headers={
            "X-Amz-Target": "SageMaker.CreateTrainingJob", "Content-Type": "application/x-amz-json-1.1"})
        assert create.status_code == 413 and create.json()["__type"].endswith("RequestEntityTooLarge")
        assert not (tmp_path / "bucket" / "key").exists()


def test_a_port_in_use_is_one_message_and_exit_code_3(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "emulator", "serve", "--port", str(port), "--s3-root",
                               str(tmp_path)], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "HETERO_EMU_STATE_DIR": str(tmp_path / "state")})
    assert done.returncode == 3
    assert f"127.0.0.1:{port}: the port is in use" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout


def test_serving_beyond_this_machine_needs_credentials(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "emulator", "serve", "--host", "0.0.0.0", "--port", "0",
                           "--s3-root", str(tmp_path)], capture_output=True, text=True, timeout=60,
                          env={k: v for k, v in os.environ.items() if k != "HETERO_EMU_CREDENTIALS"})
    assert done.returncode == 2
    assert "--credentials" in done.stderr and "Traceback" not in done.stderr


def test_with_credentials_every_request_must_be_signed_with_them(tmp_path: Path) -> None:
    with running_server(tmp_path, ["--host", "0.0.0.0", "--credentials", "teacher:s3cret"]) as secured:
        secured.url = secured.url.replace("0.0.0.0", "127.0.0.1")
        assert "token=" in "\n".join(secured.lines)
        good = client(secured, "sts", key="teacher", secret="s3cret")
        assert good.get_caller_identity()["Account"] == ACCOUNT
        s3 = client(secured, "s3", key="teacher", secret="s3cret")
        s3.create_bucket(Bucket="signed", CreateBucketConfiguration={"LocationConstraint": secured.region})
        wrong_secret = error_of(client(secured, "s3", key="teacher", secret="guess").list_objects_v2, Bucket="signed")
        assert wrong_secret["Error"]["Code"] == "SignatureDoesNotMatch"
        wrong_key = error_of(client(secured, "sagemaker", key="other", secret="s3cret").list_training_jobs)
        assert wrong_key["Error"]["Code"] == "UnrecognizedClientException"
        unsigned = error_of(client(secured, "s3", signature_version=UNSIGNED).list_objects_v2, Bucket="signed")
        assert unsigned["Error"]["Code"] == "AccessDenied"
        wrong_query = error_of(client(secured, "sts", key="teacher", secret="guess").get_caller_identity)
        assert wrong_query["Error"]["Code"] == "SignatureDoesNotMatch"


def test_ctrl_c_stops_the_server_cleanly(tmp_path: Path) -> None:
    with running_server(tmp_path) as running:
        threads = [threading.Thread(target=lambda: client(running, "sts").get_caller_identity()) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        code, output = running.stop()
    assert code in (0, 130), output
    assert "Traceback" not in output
    with pytest.raises(requests.ConnectionError):
        requests.get(running.url, timeout=5)


def test_the_ready_lines_can_be_pasted_into_a_shell(server: Server) -> None:
    exports = [line for line in server.lines if line.strip().startswith("export ")]
    shell = subprocess.run(["bash", "-c", "\n".join(exports) + "\nenv"], capture_output=True, text=True,
                           timeout=30, check=True)
    env = dict(line.split("=", 1) for line in shell.stdout.splitlines() if "=" in line)
    assert env["AWS_ENDPOINT_URL"] == server.url
    # botocore reads AWS_DEFAULT_REGION; other SDKs AWS_REGION.
    assert env["AWS_DEFAULT_REGION"] == env["AWS_REGION"] == server.region
    assert Path(env["SAGEMAKER_USER_CONFIG_OVERRIDE"]).is_file()
    assert env["AWS_ACCESS_KEY_ID"] == "emu"


def test_keys_cannot_leave_the_s3_root(server: Server, tmp_path: Path) -> None:
    """`..`, encoded or not, and a link in the root to a folder outside it: refused, nothing read."""
    (tmp_path / "secret.txt").write_text("not for the endpoint")
    (server.s3_root / "escape-here").mkdir()
    (server.s3_root / "escape-here" / "link").symlink_to(tmp_path)
    host, port = server.url.removeprefix("http://").split(":")
    for path in ("/escape-here/../../secret.txt", "/escape-here/%2E%2E/%2E%2E/secret.txt",
                 "/escape-here/link/secret.txt"):
        with socket.create_connection((host, int(port)), timeout=10) as raw:
            raw.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
                        "Authorization: AWS4-HMAC-SHA256 Credential=emu/20261204/us-west-2/s3/aws4_request, "
                        "SignedHeaders=host, Signature=0\r\n\r\n"
                        .encode())
            answer = b""
            while chunk := raw.recv(65536):
                answer += chunk
        assert answer.split(b" ", 2)[1] in (b"400", b"403"), (path, answer[:300])
        assert b"not for the endpoint" not in answer


def test_a_header_section_over_the_limit_is_refused(server: Server) -> None:
    answer = requests.get(f"{server.url}/any-bucket/key", headers={"X-Amz-Date": "20261204T000000Z",
                                                                   "X-Padding": "a" * 100_000}, timeout=10)
    assert answer.status_code == 400 and b"RequestHeaderSectionTooLarge" in answer.content


def test_the_servers_connections_send_each_answer_at_once() -> None:
    """Nagle's algorithm is off on every accepted connection: with it on, an answer's body (written
    after its head) waited for the client's delayed ACK, 40 ms per call. asyncio turns it off only
    for a listening socket whose proto says TCP, which `bind` must therefore name."""
    import asyncio

    from emulator.serve.server import bind

    async def accepted_nodelay() -> int:
        listening = bind("127.0.0.1", 0)
        seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        class Probe(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                sock = transport.get_extra_info("socket")
                seen.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        server = await asyncio.get_running_loop().create_server(Probe, sock=listening)
        port = listening.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)):
            value = await asyncio.wait_for(seen, 10)
        server.close()
        await server.wait_closed()
        return value

    assert asyncio.run(accepted_nodelay()) != 0
