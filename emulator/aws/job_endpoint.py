"""The AWS a job's hosts reach: the emulator's endpoint, served by the job's driver on a Unix socket.

On the service a job's code calls AWS with its role's temporary credentials: boto3 in a script, the
TensorFlow toolkit asking S3 where the SDK's default `model_dir` bucket is, the AWS CLI. Here each
job's hosts reach the very endpoint `hetero-emu serve` answers with (emulator/aws/endpoint.py: S3 on
the job's S3 root, STS, IAM, CloudWatch, Logs, SageMaker), through the job's gateway container
(emulator/run/job_gateway.py), which resolves AWS's names to itself and relays each connection here.

A job may name only what a remote client of `serve` may: S3 locations, never this machine's paths
(`HostPaths.only(())`). The endpoint is served on a Unix socket in a folder of its own, which only the
gateway container mounts: nothing on the machine's network listens for it.

The endpoint does not check signatures (neither does a loopback `serve` without --credentials): the
temporary credentials the hosts are given (emulator/run/job_gateway.py `credentials`) are there so
that code which needs credentials finds some, as on the service.

The TLS certificate the gateway shows is made for each job by the run (emulator/run/job_ca.py).
"""

from __future__ import annotations

import contextlib
import http.server
import logging
import os
import shutil
import socketserver
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

from emulator.aws.wire import HttpRequest, HttpResponse
from emulator.aws.wire.chunked import aws_chunked, unchunk

if TYPE_CHECKING:
    # Only named here: the endpoint's modules (botocore's session and models, ~40 ms) load when a
    # host first calls AWS, if ever.
    from emulator.aws.endpoint import Endpoint

# The largest request body read: S3's largest single PUT is 5 GiB; SDKs go multipart far below.
BODY_LIMIT = 1024**3
log = logging.getLogger(__name__)


class _Handler(http.server.BaseHTTPRequestHandler):
    """One HTTP/1.1 connection from the gateway: each request answered by the endpoint."""

    protocol_version = "HTTP/1.1"
    server: _UnixServer
    # The Server header: not Python's version (the services name themselves; `serve` says nothing more).
    server_version = "hetero-emu"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass  # the job's own log is the hosts'

    def address_string(self) -> str:
        return "gateway"

    def _any(self) -> None:
        path, _, query = self.path.partition("?")
        headers = {k.lower(): v for k, v in self.headers.items()}
        body = self._body(headers)
        if body is None:
            return
        try:
            endpoint = self.server.endpoint
        except Exception:  # noqa: BLE001 - answered, and said in the driver's log
            log.exception("the job's AWS endpoint could not be made")
            self._send(HttpResponse(500, {"content-type": "text/plain"}, b"the job's AWS endpoint could not be made\n"))
            return
        request = HttpRequest(self.command, path, parse_qsl(query, keep_blank_values=True), headers, body,
                              headers.get("host", "").rsplit(":", 1)[0])
        if aws_chunked(headers):
            try:
                request.body = unchunk(body)
            except ValueError as err:
                self._send(endpoint.malformed(request, f"the aws-chunked body cannot be read: {err}"))
                return
        self._send(endpoint.handle(request))

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = _any

    def _body(self, headers: dict[str, str]) -> Any:
        """The request's body (bytes, or a spooled file when large); None when it cannot be read (the
        connection is closed)."""
        if headers.get("transfer-encoding", "").lower() == "chunked":
            spool = tempfile.SpooledTemporaryFile(max_size=8 << 20)  # noqa: SIM115 - the request's body
            while True:
                line = self.rfile.readline(1024)
                try:
                    size = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    self.close_connection = True
                    return None
                if size == 0:
                    while self.rfile.readline(1024).strip():
                        pass  # trailers
                    break
                spool.write(self.rfile.read(size))
                self.rfile.readline(8)
            spool.seek(0)
            return spool
        length = int(headers.get("content-length") or 0)
        if length > BODY_LIMIT:
            self.close_connection = True
            return None
        if length <= 8 << 20:
            return self.rfile.read(length)
        spool = tempfile.SpooledTemporaryFile(max_size=0)  # noqa: SIM115 - the request's body
        left = length
        while left:
            chunk = self.rfile.read(min(left, 1 << 20))
            if not chunk:
                break
            spool.write(chunk)
            left -= len(chunk)
        spool.seek(0)
        return spool

    def _send(self, answer: HttpResponse) -> None:
        self.send_response(answer.status)
        headers = {k.lower(): v for k, v in answer.headers.items()}
        chunks: Iterable[bytes]
        if isinstance(answer.body, (bytes, bytearray)):
            chunks = [bytes(answer.body)] if self.command != "HEAD" else []
            headers.setdefault("content-length", str(len(answer.body)))
            chunked = False
        else:
            chunks = answer.body
            chunked = "content-length" not in headers
            if chunked:
                headers["transfer-encoding"] = "chunked"
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        try:
            for chunk in chunks:
                if not chunk:
                    continue
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
            if chunked:
                self.wfile.write(b"0\r\n\r\n")
        finally:
            close = getattr(answer.body, "close", None)
            if callable(close):
                close()


class _UnixServer(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str, make: Callable[[], Endpoint]) -> None:
        self._make = make
        self._made: Endpoint | None = None
        self._making = threading.Lock()
        super().__init__(path, _Handler)

    def server_bind(self) -> None:
        """Bind the socket at its path, however long: Linux bounds a socket's path at 107 bytes, and a
        job folder (a swarm's socket is in it) may be deeper, so a long one is bound through the
        `/proc/self/fd` link of its folder, which names the same folder in a few bytes."""
        path = str(self.server_address)
        if len(path.encode()) <= SOCKET_PATH_LIMIT:
            super().server_bind()
            return
        folder = os.open(os.path.dirname(path), os.O_PATH | os.O_DIRECTORY)
        try:
            self.socket.bind(f"/proc/self/fd/{folder}/{os.path.basename(path)}")
        finally:
            os.close(folder)

    @property
    def endpoint(self) -> Endpoint:
        """The endpoint, made at the first call: loading the services' models costs about 0.5 s of
        CPU, which a job that never calls AWS (most) need not spend while its hosts start."""
        with self._making:
            if self._made is None:
                self._made = self._make()
            return self._made


@contextlib.contextmanager
def serving(make: Callable[[], Endpoint], folder: Path | None = None) -> Iterator[Path]:
    """The endpoint `make()` builds, served on a Unix socket, `aws.sock` in `folder` (made, and emptied
    of an earlier socket; by default a new folder in the temporary folder), until the block ends;
    yields the folder, which is removed at the end. The endpoint is made at the first call
    (`_UnixServer.endpoint`)."""
    if folder is None:
        folder = Path(tempfile.mkdtemp(prefix="hetero-emu-aws-"))
    else:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        (folder / SOCKET_NAME).unlink(missing_ok=True)
    server = _UnixServer(str(folder / SOCKET_NAME), make)
    # A short poll: `shutdown` waits for the loop to look again, which at the default 0.5 s kept
    # every job's end waiting that long, and at 50 ms still 25 ms on average (a look costs a few µs).
    thread = threading.Thread(target=server.serve_forever, args=(SHUTDOWN_POLL_SECONDS,), name="job-aws",
                              daemon=True)
    thread.start()
    try:
        yield folder
    finally:
        server.shutdown()
        server.server_close()
        shutil.rmtree(folder, ignore_errors=True)


SOCKET_NAME = "aws.sock"
SHUTDOWN_POLL_SECONDS = 0.01
SOCKET_PATH_LIMIT = 107  # bytes of a Unix socket's path (sun_path, less its NUL)
