"""Who `hetero-emu serve` answers and how much it gives (issue 30), against the real server process:
only the names it serves as (DNS rebinding gets 421), AWS calls that may change something only when
signed (a cross-site form cannot delete objects), the page's stop only with its token; half-open and
surplus connections closed without stopping normal requests or flooding the log; Ctrl-C with the live
page's event streams open ends in well under 2 s with one line. Raw sockets and http.client forge what
a browser or an attacker sends; boto3 is the legitimate client."""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import json
import os
import re
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import boto3
import pytest
import requests
from botocore import UNSIGNED
from botocore.exceptions import ClientError
from serving import Server, running_server

from emulator.result import Status
from emulator.serve import limits, page
from emulator.state import job_records

NAME = "emu.test"  # given with --host-name; never resolved (the tests connect to 127.0.0.1)
LIVE_JOB = "live-job"
PARTIAL_HEAD = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n"  # and then nothing: a head that never ends
# The page asks the container engine for a job's hosts; these tests are about the server, so its engine
# is one that answers "not there" at once, however busy this machine's engine is.
NO_ENGINE = {"DOCKER_HOST": "unix:///nonexistent/hetero-emu-tests.sock"}
# An S3 signature the server does not check (no --credentials) but which a browser cannot send.
SIGNED_S3 = ("AWS4-HMAC-SHA256 Credential=emu/20261204/us-west-2/s3/aws4_request, SignedHeaders=host, "
             "Signature=0")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running_server(tmp_path_factory.mktemp("guard"), ["--host-name", NAME], env=NO_ENGINE) as running:
        yield running


def client(server: Server, service: str, **config: Any) -> Any:
    return server.client(service, **config)


def address(server: Server) -> tuple[str, int]:
    parts = urlsplit(server.url)
    assert parts.hostname is not None and parts.port is not None
    return parts.hostname, parts.port


def ask(server: Server, method: str, path: str, host: str, body: bytes = b"",
        headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """One request over http.client with this exact Host header: (status, headers, body)."""
    connection = http.client.HTTPConnection(*address(server), timeout=10)
    try:
        connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        connection.putheader("Host", host)
        for name, value in (headers or {}).items():
            connection.putheader(name, value)
        connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        answer = connection.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        connection.close()


def bucket_with(server: Server, bucket: str, keys: list[str]) -> Any:
    s3 = client(server, "s3")
    s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": server.region})
    for key in keys:
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
    return s3


def output_after_ready(output: str, server: Server) -> list[str]:
    """What the server printed after its ready lines."""
    rest = output[len("\n".join(server.lines)):]
    return [line for line in rest.splitlines() if line.strip()]


def counted(lines: list[str], what: str) -> int:
    """The sum of the counts the server's refusal lines give for `what`."""
    return sum(int(n) for line in lines for n in re.findall(rf"(\d+) {re.escape(what)}", line))


# --------------------------------------------------------------------------------------------------
# Host names (DNS rebinding)


def test_a_host_it_does_not_serve_as_gets_421_on_the_page_and_from_aws(server: Server) -> None:
    port = address(server)[1]
    bucket_with(server, "rebind", []).put_object(Bucket="rebind", Key="secret.txt", Body=b"the secret itself")
    for host in ("evil.example", f"evil.example:{port}", f"127.0.0.1.evil.example:{port}",
                 f"localhost.evil.example:{port}", "10.1.2.3"):
        status, headers, body = ask(server, "GET", "/", host)
        assert status == 421 and headers["content-type"].startswith("text/plain"), (host, body)
        assert len(body) < 300 and b"--host-name" in body
        status, _, body = ask(server, "GET", f"/jobs/{LIVE_JOB}", host)
        assert status == 421
        # An S3 read, anonymous or signed: S3's error shape, nothing of the object.
        for extra in ({}, {"Authorization": SIGNED_S3}):
            status, _, body = ask(server, "GET", "/rebind/secret.txt", host, headers=extra)
            assert status == 421 and b"<Code>MisdirectedRequest</Code>" in body and b"the secret" not in body
    # A JSON service's request: its own error shape, which botocore reads as the error's code.
    status, _, body = ask(server, "POST", "/", "evil.example", b"{}", {
        "X-Amz-Target": "SageMaker.ListTrainingJobs", "Content-Type": "application/x-amz-json-1.1",
        "Authorization": SIGNED_S3.replace("/s3/", "/sagemaker/")})
    assert status == 421 and json.loads(body)["__type"].endswith("MisdirectedRequest")


def test_its_own_names_are_answered(server: Server) -> None:
    port = address(server)[1]
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "LOCALHOST", f"[::1]:{port}", "127.0.0.2",
                 f"{NAME}:{port}", f"page.localhost:{port}"):
        status, _, body = ask(server, "GET", "/", host)
        assert status == 200 and b"<html" in body.lower(), host


def test_virtual_host_addressing_under_localhost_and_a_given_name(server: Server) -> None:
    port = address(server)[1]
    bucket_with(server, "hosted-here", ["dir/file.txt"])
    for host in (f"hosted-here.localhost:{port}", f"hosted-here.{NAME}:{port}", f"hosted-here.{NAME}"):
        status, _, body = ask(server, "GET", "/dir/file.txt", host)
        assert (status, body) == (200, b"dir/file.txt"), host


def test_an_invalid_host_name_is_a_usage_error(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "emulator", "serve", "--port", "0", "--s3-root", str(tmp_path),
                           "--host-name", "not a name"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "HETERO_EMU_STATE_DIR": str(tmp_path / "state")})
    assert done.returncode == 2
    assert "--host-name 'not a name'" in done.stderr and "Traceback" not in done.stderr


# --------------------------------------------------------------------------------------------------
# Requests that change something must be signed


def test_a_cross_site_form_post_deletes_nothing(server: Server) -> None:
    s3 = bucket_with(server, "victim", ["a.txt", "b.txt"])
    body = b"<Delete><Object><Key>a.txt</Key></Object><Object><Key>b.txt</Key></Object></Delete>"
    browser = {"Content-Type": "text/plain", "Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}
    status, _, answer = ask(server, "POST", "/victim?delete", address(server)[0], body, browser)
    assert status == 403 and b"<Code>AccessDenied</Code>" in answer and b"signed" in answer
    # A presigned URL's query can be written into a form's address: it does not count for another site.
    forged = ("/victim?delete&X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=emu%2F20261204%2Fus-west-2%2Fs3%2F"
              "aws4_request&X-Amz-Date=20261204T000000Z&X-Amz-Expires=600&X-Amz-SignedHeaders=host&X-Amz-Signature=0")
    for marks in ({"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"}, {"Origin": "null"}):
        status, _, answer = ask(server, "POST", forged, address(server)[0], body,
                                {"Content-Type": "text/plain", **marks})
        assert status == 403 and b"<Code>AccessDenied</Code>" in answer, marks
    assert sorted(o["Key"] for o in s3.list_objects_v2(Bucket="victim")["Contents"]) == ["a.txt", "b.txt"]


def test_unsigned_calls_get_each_services_missing_token_error(server: Server) -> None:
    bucket_with(server, "open-reads", ["public.txt"])
    anonymous = {"signature_version": UNSIGNED}
    with pytest.raises(ClientError) as sagemaker:
        client(server, "sagemaker", **anonymous).list_training_jobs()
    assert sagemaker.value.response["Error"]["Code"] == "MissingAuthenticationTokenException"
    with pytest.raises(ClientError) as sts:
        client(server, "sts", **anonymous).get_caller_identity()
    assert sts.value.response["Error"]["Code"] == "MissingAuthenticationToken"
    with pytest.raises(ClientError) as put:
        client(server, "s3", **anonymous).put_object(Bucket="open-reads", Key="new.txt", Body=b"x")
    assert put.value.response["Error"]["Code"] == "AccessDenied"
    assert not (server.s3_root / "open-reads" / "new.txt").exists()
    # S3's anonymous reads stay open: they change nothing.
    assert client(server, "s3", **anonymous).get_object(Bucket="open-reads", Key="public.txt")["Body"].read() \
        == b"public.txt"


def test_presigned_urls_still_work_for_reads_and_writes(server: Server) -> None:
    s3 = bucket_with(server, "presigned", ["in.txt"])
    v4 = client(server, "s3", signature_version="s3v4")
    get = v4.generate_presigned_url("get_object", Params={"Bucket": "presigned", "Key": "in.txt"})
    assert requests.get(get, timeout=10).content == b"in.txt"
    put = v4.generate_presigned_url("put_object", Params={"Bucket": "presigned", "Key": "out.txt"})
    assert requests.put(put, data=b"uploaded", timeout=10).status_code == 200
    assert s3.get_object(Bucket="presigned", Key="out.txt")["Body"].read() == b"uploaded"


def test_the_pages_stop_needs_the_servers_stop_token(server: Server) -> None:
    _live_job(server)
    html = requests.get(f"{server.url}/jobs/{LIVE_JOB}", timeout=10).text
    embedded = re.search(r'<script type="application/json" id="job-data">(.*?)</script>', html, re.S)
    assert embedded is not None
    token = json.loads(embedded[1])["stopToken"]
    assert len(token) >= 20 and token in html  # also in the plain form's hidden field
    # A job this server does not know: past the guard, StopTrainingJob's own answer is a 404.
    stop = f"{server.url}/jobs/no-such-job/stop"
    same_site = {"Origin": server.url, "Accept": "application/json"}
    assert requests.post(stop, headers=same_site, timeout=10).status_code == 403
    wrong = token[:-1] + ("y" if token.endswith("x") else "x")  # one character off (a token may end in x)
    assert requests.post(stop, headers={**same_site, page.STOP_HEADER: wrong}, timeout=10).status_code == 403
    assert requests.post(stop, data={page.STOP_FIELD: "guess"}, timeout=10).status_code == 403
    assert requests.post(stop, headers={"Origin": "http://evil.example", page.STOP_HEADER: token},
                         timeout=10).status_code == 403  # the Origin check stays
    assert requests.post(stop, headers={**same_site, page.STOP_HEADER: token}, timeout=10).status_code == 404
    assert requests.post(stop, data={page.STOP_FIELD: token}, timeout=10, allow_redirects=False).status_code == 404


def _live_job(server: Server) -> None:
    """A job in progress in the server's own state folder: its page streams events until it ends."""
    folder = server.state_dir.parent / "out" / LIVE_JOB
    (folder / "logs").mkdir(parents=True, exist_ok=True)
    previous = os.environ["HETERO_EMU_STATE_DIR"]  # the test session's own (tests/conftest.py)
    os.environ["HETERO_EMU_STATE_DIR"] = str(server.state_dir)
    try:
        job_records.record(LIVE_JOB, folder, Status.IN_PROGRESS, SecondaryStatus="Training")
    finally:
        os.environ["HETERO_EMU_STATE_DIR"] = previous


# --------------------------------------------------------------------------------------------------
# Bounded resources


def half_open(server: Server, count: int, stack: ExitStack) -> list[socket.socket]:
    """`count` connections that each send the start of a request head and nothing more."""
    out = []
    for _ in range(count):
        connection = stack.enter_context(socket.create_connection(address(server), timeout=10))
        connection.sendall(PARTIAL_HEAD)
        out.append(connection)
    return out


def closed_by_server(connection: socket.socket, deadline: float) -> bool:
    """Whether the server closes the connection before `deadline` (time.monotonic())."""
    connection.settimeout(max(0.01, deadline - time.monotonic()))
    try:
        return connection.recv(1024) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def whole_answer(connection: socket.socket) -> bytes:
    """Everything the server sends on a connection until it closes it."""
    answer = b""
    while chunk := connection.recv(4096):
        answer += chunk
    return answer


def test_half_open_connections_neither_block_requests_nor_flood_the_log(tmp_path: Path) -> None:
    heads = 3.0  # the server's time to send a request head: limits.HEADER_SECONDS (10 s) by default
    with running_server(tmp_path, header_seconds=heads) as running, ExitStack() as stack:
        sts = client(running, "sts")  # botocore's models loaded before the clock starts
        # One connection that was answered once (kept alive) before its next head stalls.
        kept = stack.enter_context(socket.create_connection(address(running), timeout=10))
        kept.sendall(b"HEAD / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += kept.recv(4096)
        assert answer.startswith(b"HTTP/1.1 200 ")
        kept.sendall(PARTIAL_HEAD)
        waiting = [kept, *half_open(running, 500, stack)]
        started = time.monotonic()
        assert sts.get_caller_identity()["Account"]
        answered_in = time.monotonic() - started
        assert answered_in < 1.0
        deadline = started + heads + 5
        assert all(closed_by_server(c, deadline) for c in waiting)
        assert time.monotonic() - started >= heads - 1  # by the timeout, not at once
        code, output = running.stop()
    after = output_after_ready(output, running)
    assert code == 130 and "Traceback" not in output
    assert len(after) <= 3, after  # the tally's lines (at once, then at exit) and the stop's, not one per connection
    assert counted(after, f"connections closed that sent no whole request head within {heads:g} s") == 501


def test_over_the_limit_new_connections_displace_the_longest_waiting_for_a_head(tmp_path: Path) -> None:
    with running_server(tmp_path, ["--max-connections", "40"]) as running, ExitStack() as stack:
        sts = client(running, "sts")
        flood = half_open(running, 100, stack)
        started = time.monotonic()
        # A real client still gets its answer at once: its connection takes a half-open one's place.
        assert sts.get_caller_identity()["Account"]
        assert time.monotonic() - started < 1.0
        # The 60 oldest made way for the 60 newest, long before the head timeout.
        assert all(closed_by_server(c, started + 3) for c in flood[:60])
        assert time.monotonic() - started < limits.HEADER_SECONDS / 2
        code, output = running.stop()
    after = output_after_ready(output, running)
    assert "Traceback" not in output and len(after) <= 3, after
    assert counted(after, "connections closed that waited longest for a request head, for new ones over the "
                          "limit of 40") >= 60


def test_over_the_limit_with_every_connection_in_a_request_new_ones_get_503(tmp_path: Path) -> None:
    with running_server(tmp_path, ["--max-connections", "40"]) as running:
        with ExitStack() as stack:
            # 40 uploads whose heads came whole and whose bodies stall: none of them can make way.
            for _ in range(40):
                upload = stack.enter_context(socket.create_connection(address(running), timeout=10))
                upload.sendall(f"PUT /slow/key HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: {SIGNED_S3}\r\n"
                               "Content-Length: 1000000\r\n\r\n".encode() + b"x" * 1000)
            time.sleep(0.5)  # the server has accepted them all
            refused = [stack.enter_context(socket.create_connection(address(running), timeout=10))
                       for _ in range(60)]
            answers = [whole_answer(c) for c in refused]  # read to the end: the server closes each
            assert all(a.startswith(b"HTTP/1.1 503 ") for a in answers), answers[:3]
            head, _, body = answers[0].partition(b"\r\n\r\n")
            assert f"content-length: {len(body)}".encode() in head.lower() and b"too many connections" in body
        # Once the uploads are gone, the server takes requests again.
        sts = client(running, "sts")
        for _ in range(50):
            try:
                assert sts.get_caller_identity()["Account"]
                break
            except ClientError:
                time.sleep(0.1)
        else:
            raise AssertionError("the server did not take requests again")
        code, output = running.stop()
    after = output_after_ready(output, running)
    assert "Traceback" not in output and len(after) <= 3, after
    assert counted(after, "connections refused over the limit of 40 open at once, all in requests") == 60


def test_an_endless_header_section_is_cut_off_and_the_server_stays_small(server: Server) -> None:
    """httptools' parser (Uvicorn's choice when it is installed) keeps every header it is sent: one
    connection writing an endless header section grew the server by 4 GB in 8 s. The guard answers
    431 once a head passes limits.HEAD_BYTES (h11's parser refuses it sooner, with its 400)."""
    def resident_kib() -> int:
        status = Path(f"/proc/{server.process.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1))  # type: ignore[union-attr]

    before = resident_kib()
    line = b"X-Pad: " + b"a" * 8000 + b"\r\n"
    sent = 0
    with socket.create_connection(address(server), timeout=10) as flood:
        flood.sendall(b"GET /bucket/key HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Amz-Date: 20261204T000000Z\r\n")
        with contextlib.suppress(OSError):  # the server closes the connection while the flood goes on
            while sent < 64 * 1024**2:
                flood.sendall(line * 16)
                sent += len(line) * 16
        answer = whole_answer(flood)
    assert sent < 8 * limits.HEAD_BYTES, "the server read a head of 8 times the limit without closing"
    assert answer.split(b" ", 2)[1] in (b"400", b"431"), answer[:200]
    assert resident_kib() - before < 32 * 1024
    assert client(server, "sts").get_caller_identity()["Account"]  # and the server goes on


def test_the_open_file_limit_is_raised_to_the_hard_one() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 256:
        pytest.skip(f"the hard limit is {hard}: nothing to raise")
    script = ("import resource\nsoft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
              "resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))\n"
              "from emulator.serve.limits import raise_open_files\nprint(raise_open_files(), "
              "resource.getrlimit(resource.RLIMIT_NOFILE)[0])")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    expected = limits.UNLIMITED_FILES if hard == resource.RLIM_INFINITY else hard
    assert done.stdout.split() == [str(expected), str(expected)]
    assert limits.connection_limit(None, expected) == min(limits.MAX_CONNECTIONS, (expected - 256) // 2)
    assert limits.connection_limit(5000, 1024) == (1024 - limits.RESERVED_FILES) // 2  # never past the files


# --------------------------------------------------------------------------------------------------
# Ctrl-C


def test_ctrl_c_with_event_streams_and_slow_clients_open_exits_fast_in_one_line(tmp_path: Path) -> None:
    with running_server(tmp_path, env=NO_ENGINE) as running, ExitStack() as stack:
        _live_job(running)
        host = f"127.0.0.1:{address(running)[1]}"
        streams = []
        for _ in range(3):
            stream = stack.enter_context(socket.create_connection(address(running), timeout=10))
            stream.sendall(f"GET /jobs/{LIVE_JOB}/events HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            streams.append(stream)
        assert all(s.recv(100).startswith(b"HTTP/1.1 200 ") for s in streams)
        half_open(running, 20, stack)
        upload = stack.enter_context(socket.create_connection(address(running), timeout=10))
        upload.sendall(f"PUT /slow/key HTTP/1.1\r\nHost: {host}\r\nAuthorization: {SIGNED_S3}\r\n"
                       "Content-Length: 1000000\r\n\r\n".encode() + b"x" * 1000)
        time.sleep(1.5)  # the streams have polled the job
        started = time.monotonic()
        code, output = running.stop()
        took = time.monotonic() - started
    after = output_after_ready(output, running)
    assert code == 130
    assert took < 2.0, took
    assert "Traceback" not in output and len(after) == 1 and after[0].startswith("stopped by the user"), after


# --------------------------------------------------------------------------------------------------
# The banner


def test_beyond_loopback_the_banner_names_a_reachable_address_and_the_given_names(tmp_path: Path) -> None:
    with running_server(tmp_path, ["--host", "0.0.0.0", "--credentials", "teacher:s3cret", "--host-name",
                                   NAME]) as running:
        shown = urlsplit(running.url).hostname
        assert shown is not None and shown != "0.0.0.0"
        resolved = {info[4][0] for info in socket.getaddrinfo(shown, None, proto=socket.IPPROTO_TCP)}
        assert any(not ipaddress.ip_address(a).is_loopback for a in resolved), resolved
        assert any(line.strip() == f"also as http://{NAME}:{address(running)[1]}" for line in running.lines)
        sts = boto3.client("sts", endpoint_url=running.url, region_name=running.region,
                           aws_access_key_id="teacher", aws_secret_access_key="s3cret")
        assert sts.get_caller_identity()["Account"]
