"""AWS inside a job: the gateway's DNS answers and TLS relay (emulator/run/job_gateway.py), the job's
endpoint on its Unix socket (emulator/aws/job_endpoint.py), and the role's credentials, each driven in
this process on loopback addresses with real boto3 clients."""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import botocore.session
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from emulator.aws.job_endpoint import serving
from emulator.aws.services import job_endpoint
from emulator.run import job_gateway
from emulator.run.job_ca import Authority

REGION = "us-west-2"
# The servers' threads look for shutdown() this often (socketserver's default is 0.5 s, each teardown's wait).
POLL = 0.02


def query(name: str, qtype: int = job_gateway.TYPE_A, ident: int = 0x1234) -> bytes:
    """A DNS query as a stub resolver sends it (RFC 1035, 4.1): header with RD, one question."""
    labels = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    return struct.pack("!HHHHHH", ident, 0x0100, 1, 0, 0, 0) + labels + struct.pack("!HH", qtype, 1)


def records(reply: bytes) -> tuple[int, int, list[str]]:
    """(id, rcode, the A records' addresses) of a reply, read by RFC 1035's layout."""
    ident, flags, qd, an = struct.unpack("!HHHH", reply[:8])
    assert flags & 0x8000, "QR: a response"
    at = 12
    for _ in range(qd):
        while reply[at]:
            at += 1 + reply[at]
        at += 5
    found = []
    for _ in range(an):
        assert reply[at] & 0xC0 == 0xC0  # a pointer to the question's name
        rtype, _, _, size = struct.unpack("!HHIH", reply[at + 2:at + 12])
        if rtype == job_gateway.TYPE_A:
            found.append(socket.inet_ntoa(reply[at + 12:at + 12 + size]))
        at += 12 + size
    return ident, flags & 0xF, found


@pytest.mark.parametrize("name", ["s3.us-west-2.amazonaws.com", "my-bucket.s3.us-west-2.amazonaws.com",
                                  "sts.amazonaws.com", "api.sagemaker.eu-west-1.amazonaws.com", "AMAZONAWS.COM"])
def test_aws_names_resolve_to_the_gateway(name: str) -> None:
    reply = job_gateway.answer(query(name), "172.16.9.254")
    assert reply is not None
    assert records(reply) == (0x1234, 0, ["172.16.9.254"])


def test_another_record_type_of_an_aws_name_is_no_record_and_other_names_are_not_answered() -> None:
    reply = job_gateway.answer(query("s3.amazonaws.com", qtype=28), "172.16.9.254")  # AAAA
    assert reply is not None and records(reply) == (0x1234, 0, [])
    for name in ("example.org", "amazonaws.com.evil.org", "notamazonaws.com", "algo-1"):
        assert job_gateway.answer(query(name), "172.16.9.254") is None


@pytest.fixture
def fake_upstream() -> Iterator[tuple[str, int]]:
    """A resolver that answers every query with 10.9.8.7."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        sock.settimeout(POLL)
        while not stop.is_set():
            try:
                packet, peer = sock.recvfrom(4096)
            except OSError:
                continue
            end = job_gateway.question(packet)[3]  # type: ignore[index]
            sock.sendto(struct.pack("!HHHHHH", struct.unpack("!H", packet[:2])[0], 0x8180, 1, 1, 0, 0)
                        + packet[12:end] + struct.pack("!HHHIH", 0xC00C, 1, 1, 5, 4) + socket.inet_aton("10.9.8.7"),
                        peer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield sock.getsockname()
    stop.set()
    thread.join()
    sock.close()


def ask(server: tuple[str, int], packet: bytes) -> bytes:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(10)
        sock.sendto(packet, server)
        return sock.recvfrom(65535)[0]


def test_the_dns_server_answers_aws_names_and_asks_upstream_for_the_rest(fake_upstream: tuple[str, int],
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(job_gateway, "UPSTREAM_SECONDS", 0.3)  # the silent upstream below: SERVFAIL sooner
    dns = job_gateway.DnsServer(("127.0.0.1", 0), "172.16.9.254", fake_upstream)
    threading.Thread(target=dns.serve_forever, args=(POLL,), daemon=True).start()
    try:
        assert records(ask(dns.server_address, query("logs.us-west-2.amazonaws.com")))[2] == ["172.16.9.254"]
        assert records(ask(dns.server_address, query("pypi.org", ident=7))) == (7, 0, ["10.9.8.7"])
    finally:
        dns.shutdown()
        dns.server_close()
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent.bind(("127.0.0.1", 0))
    dns = job_gateway.DnsServer(("127.0.0.1", 0), "172.16.9.254", silent.getsockname())
    threading.Thread(target=dns.serve_forever, args=(POLL,), daemon=True).start()
    try:
        assert records(ask(dns.server_address, query("pypi.org")))[1] == job_gateway.SERVFAIL
    finally:
        dns.shutdown()
        dns.server_close()
        silent.close()


@pytest.fixture
def gateway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """The job's endpoint on its socket and the gateway's relays before it, on loopback ports, with a
    certificate that also names `localhost` (the hosts reach AWS's own names through the DNS above)."""
    monkeypatch.setenv("HETERO_EMU_STATE_DIR", str(tmp_path / "state"))
    root = tmp_path / "s3"
    root.mkdir()
    authority = Authority.make([REGION], extra_names=["localhost"])
    (tmp_path / "ca.pem").write_bytes(authority.ca_pem)
    (tmp_path / "cert.pem").write_bytes(authority.cert_pem)
    (tmp_path / "key.pem").write_bytes(authority.key_pem)
    with serving(lambda: job_endpoint(root, REGION, "docker")) as folder:
        sock = str(folder / "aws.sock")
        tls = job_gateway.tls_context(str(tmp_path / "cert.pem"), str(tmp_path / "key.pem"))
        relays = [job_gateway.RelayServer(("127.0.0.1", 0), sock), job_gateway.RelayServer(("127.0.0.1", 0), sock, tls)]
        for relay in relays:
            threading.Thread(target=relay.serve_forever, args=(POLL,), daemon=True).start()
        try:
            yield {"http": relays[0].server_address[1], "https": relays[1].server_address[1],
                   "ca": str(tmp_path / "ca.pem"), "root": root}
        finally:
            for relay in relays:
                relay.shutdown()
                relay.server_close()


def client(service: str, url: str, **config: Any) -> Any:
    session = boto3.Session(aws_access_key_id="ASIAEXAMPLE", aws_secret_access_key="x", aws_session_token="t",
                            region_name=REGION)
    return session.client(service, endpoint_url=url, config=Config(retries={"max_attempts": 1}, **config))


def test_s3_and_sts_over_tls_trusting_the_jobs_authority_through_aws_ca_bundle(
        gateway: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_CA_BUNDLE", gateway["ca"])
    url = f"https://localhost:{gateway['https']}"
    s3 = client("s3", url, s3={"addressing_style": "path"})
    s3.create_bucket(Bucket="job-bucket", CreateBucketConfiguration={"LocationConstraint": REGION})
    body = b"x" * (3 * 1024 * 1024)
    s3.put_object(Bucket="job-bucket", Key="model/weights.bin", Body=body)
    assert s3.get_object(Bucket="job-bucket", Key="model/weights.bin")["Body"].read() == body
    assert (gateway["root"] / "job-bucket" / "model" / "weights.bin").read_bytes() == body
    assert s3.get_bucket_location(Bucket="job-bucket")["LocationConstraint"] == REGION
    assert client("sts", url).get_caller_identity()["Account"]


def test_tls_without_the_jobs_authority_is_refused(gateway: dict[str, Any]) -> None:
    from botocore.exceptions import SSLError

    with pytest.raises(SSLError):
        client("sts", f"https://localhost:{gateway['https']}").get_caller_identity()


def test_a_job_may_name_no_path_of_this_machine(gateway: dict[str, Any]) -> None:
    sagemaker = client("sagemaker", f"http://127.0.0.1:{gateway['http']}")
    with pytest.raises(ClientError) as raised:
        sagemaker.create_training_job(
            TrainingJobName="from-a-job", RoleArn="arn:aws:iam::111122223333:role/R",
            AlgorithmSpecification={"TrainingImage": "img", "TrainingInputMode": "File"},
            InputDataConfig=[{"ChannelName": "train", "DataSource": {"S3DataSource": {
                "S3DataType": "S3Prefix", "S3Uri": "file:///etc"}}}],
            OutputDataConfig={"S3OutputPath": "s3://job-bucket/out"},
            ResourceConfig={"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 1},
            StoppingCondition={"MaxRuntimeInSeconds": 60})
    assert raised.value.response["Error"]["Code"] == "ValidationException"
    assert "s3Uri" in raised.value.response["Error"]["Message"]


def test_the_roles_credentials_are_temporary_and_refreshed(monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore's container credentials provider, as a host's SDK uses it, gets new keys before the
    old ones expire (with 60 s left, every look is inside its refresh window)."""
    server = job_gateway.CredentialsServer(("127.0.0.1", 0), seconds=60)
    threading.Thread(target=server.serve_forever, args=(POLL,), daemon=True).start()
    try:
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
        monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI",
                           f"http://127.0.0.1:{server.server_address[1]}/v2/credentials/job-token")
        found = botocore.session.get_session().get_credentials()
        assert found is not None and found.method == "container-role"
        first = found.get_frozen_credentials()
        second = found.get_frozen_credentials()
        assert first.access_key.startswith("ASIA") and first.token
        assert second.access_key != first.access_key
    finally:
        server.shutdown()
        server.server_close()


def test_the_gateway_tells_when_the_jobs_endpoint_socket_answers_and_when_not(tmp_path: Path) -> None:
    # On a swarm node of another machine the driver's socket in the shared job folder is a file no one
    # listens on: the gateway says so instead of claiming to be ready (the driver then runs without AWS).
    path = str(tmp_path / "aws.sock")
    assert "No such file" in job_gateway.endpoint_unreachable(path, seconds=0.3)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listening:
        listening.bind(path)
        listening.listen(1)
        assert job_gateway.endpoint_unreachable(path, seconds=0.3) == ""
    assert "refused" in job_gateway.endpoint_unreachable(path, seconds=0.3).lower()


def test_the_endpoint_serves_on_a_socket_whose_path_is_longer_than_linux_allows(tmp_path: Path) -> None:
    # A swarm's socket is in the job folder, which may be deep: it is bound through /proc/self/fd.
    deep = tmp_path / ("d" * 100) / "aws" / "run"
    assert len(str(deep / "aws.sock")) > 107
    with serving(lambda: job_endpoint(tmp_path, "us-west-2", "docker"), deep) as folder:
        assert (folder / "aws.sock").is_socket()
        short = os.open(folder, os.O_PATH)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(f"/proc/self/fd/{short}/aws.sock")
            os.close(short)
            client.sendall(b"GET / HTTP/1.1\r\nHost: sts.us-west-2.amazonaws.com\r\nConnection: close\r\n\r\n")
            assert client.recv(12).startswith(b"HTTP/1.")


def test_the_certificate_names_every_region_botocore_knows_and_no_pseudo_region() -> None:
    """`aws_regions` reads botocore's small partitions.json instead of parsing its endpoints.json at
    each job's start: no region of the aws partition that endpoints.json lists is lost."""
    import botocore.loaders

    from emulator.run import job_aws

    regions = job_aws.aws_regions()
    partitions = botocore.loaders.Loader().load_data("endpoints")["partitions"]
    listed = set(next(p for p in partitions if p["partition"] == "aws")["regions"])
    assert listed <= set(regions)
    assert "us-west-2" in regions and "aws-global" not in regions
    assert regions == sorted(regions)


def test_the_gateway_starts_without_http_server(tmp_path: Path) -> None:
    """Every host waits for the gateway to be ready: its start leaves out http.server (~20 ms in a
    container), which only `--credentials-only` needs, and what only the credentials need."""
    import subprocess
    import sys

    program = (f"import runpy, sys; runpy.run_path({job_gateway.__file__!r}); "
               "print(sorted(m for m in sys.modules if m.startswith(('http', 'email'))"
               " or m in ('json', 'secrets', 'hmac')))")
    done = subprocess.run([sys.executable, "-I", "-c", program], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


# --------------------------------------------------------------------------------------------------
# The hosts' start-up hook holds a host's first process until the gateway started beside it answers
# (emulator/data/startup/sitecustomize.py).


@pytest.fixture
def hook(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The hook's module, loaded under another name (it does nothing without its variables)."""
    import importlib.util

    from emulator.planning.hooks import SOURCES

    monkeypatch.delenv("HETERO_EMU_AWS_GATEWAY", raising=False)
    found = importlib.util.spec_from_file_location("hetero_emu_gateway_hook", SOURCES["sitecustomize.py"])
    assert found is not None and found.loader is not None
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    return module


def test_the_hook_and_the_driver_name_the_same_files_variable_and_wait(hook: Any) -> None:
    from emulator.run import job_aws

    assert hook.GATEWAY_VARIABLE == job_aws.GATEWAY_VARIABLE
    failed = f"{job_aws.HOSTS_TARGET}/{job_aws.FAILED_FILE}"
    assert failed == hook.GATEWAY_FAILED
    assert hook.GATEWAY_SECONDS == job_aws.HOLD_SECONDS
    # The gateway reads the hook's query and answers it itself, never asking upstream.
    reply = job_gateway.answer(hook.dns_query(hook.PROBE_NAME, 0x4321), "172.16.9.254")
    assert reply is not None and reply[:2] == b"\x43\x21"


def test_the_first_process_waits_until_the_gateway_answers_and_the_next_ones_not(
        hook: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # The gateway's DNS server comes up 0.3 s after the process started, on a port known beforehand.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    servers: list[job_gateway.DnsServer] = []

    def late() -> None:
        servers.append(job_gateway.DnsServer(("127.0.0.1", port), "172.16.9.254"))
        threading.Thread(target=servers[0].serve_forever, args=(POLL,), daemon=True).start()

    monkeypatch.setenv("HETERO_EMU_AWS_GATEWAY", "127.0.0.1")
    waited = tmp_path / "waited"
    timer = threading.Timer(0.3, late)
    timer.start()
    try:
        began = time.monotonic()
        hook.await_gateway(seconds=5, port=port, failed=str(tmp_path / "failed"), waited=str(waited))
        assert 0.25 < time.monotonic() - began < 2
        assert waited.exists() and capsys.readouterr().err == ""
        began = time.monotonic()
        hook.await_gateway(seconds=5, port=port + 1, failed=str(tmp_path / "failed"), waited=str(waited))
        assert time.monotonic() - began < 0.05  # the mark: no query at all
    finally:
        timer.join()
        for server in servers:
            server.shutdown()
            server.server_close()


def test_the_wait_ends_when_the_driver_says_the_gateway_failed_or_at_its_bound_and_says_so(
        hook: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:  # bound, never answers
        silent.bind(("127.0.0.1", 0))
        port = silent.getsockname()[1]
        monkeypatch.setenv("HETERO_EMU_AWS_GATEWAY", "127.0.0.1")
        failed = tmp_path / "failed"
        failed.touch()
        began = time.monotonic()
        hook.await_gateway(seconds=5, port=port, failed=str(failed), waited=str(tmp_path / "waited-1"))
        assert time.monotonic() - began < 1
        assert "did not start" in capsys.readouterr().err
        began = time.monotonic()
        hook.await_gateway(seconds=0.5, port=port, failed=str(tmp_path / "none"), waited=str(tmp_path / "waited-2"))
        assert 0.5 < time.monotonic() - began < 2
        assert "did not answer within" in capsys.readouterr().err
        assert (tmp_path / "waited-2").exists()


def test_a_host_without_the_gateways_variable_is_never_held(hook: Any, tmp_path: Path) -> None:
    hook.await_gateway(seconds=5, port=1, failed=str(tmp_path / "failed"), waited=str(tmp_path / "waited"))
    assert not (tmp_path / "waited").exists()
