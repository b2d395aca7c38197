"""The HTTP server of `hetero-emu serve`: AWS requests to the endpoint (`emulator.aws.endpoint`), a
browser's requests to the live page (`emulator.serve.page`), on one port.

Starlette and Uvicorn (the `serve` extra) because they are the best-kept small ASGI pair: Uvicorn's
HTTP/1.1 parser bounds request lines and headers, Starlette streams request and response bodies, and
neither pulls in more than a few packages. The operations themselves are blocking (files, the
engine), so each request's work runs in a pool of worker threads; the event loop only moves bytes,
and answers the few operations that only read small files of the emulator's own (emulator/state/blocking.py).

Which side a request is for: anything an AWS SDK sends is signed (an `Authorization` header or a
presigned query) or carries an AWS header (`X-Amz-Target`, `X-Amz-Date`, `smithy-protocol`, ...);
a browser's request carries none. Unmarked requests for the page's own paths (`/`, `/jobs/...`,
`/_hetero-emu/...`) go to the page, every other one to the endpoint (an anonymous S3 request).

Bodies are read in chunks into a spooled temporary file (in memory up to SPOOL_IN_MEMORY, then on
disk), so a 1 GiB upload never sits in memory, and a body over the limit is refused as soon as it
passes it, in the service's own error shape.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import errno
import hashlib
import socket
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import parse_qsl

from starlette.exceptions import HTTPException
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Router
from starlette.types import Receive, Scope, Send

from emulator.aws.endpoint import Endpoint
from emulator.aws.wire import HttpRequest, HttpResponse
from emulator.aws.wire.chunked import aws_chunked, unchunk
from emulator.errors import EnvironmentProblem
from emulator.serve import guard, limits
from emulator.state import blocking

# The largest request body accepted: a single PutObject or UploadPart of 1 GiB (S3 allows 5 GiB; the
# SDKs switch to multipart uploads far below that).
BODY_LIMIT = 1024**3
SPOOL_IN_MEMORY = 8 * 1024**2
# The largest header section accepted, in bytes (S3 allows 8 KiB of user metadata in all).
HEADER_LIMIT = 64 * 1024
# Threads answering AWS calls at once, as many as Starlette's own pool (anyio's default limiter) allows.
WORKERS = 40
PAGE_PREFIXES = ("/jobs/", "/_hetero-emu/")
AWS_HEADERS = ("authorization", "x-amz-target", "x-amz-date", "x-amz-content-sha256", "smithy-protocol",
               "amz-sdk-invocation-id", "x-amz-security-token")
AWS_QUERY = ("X-Amz-Credential", "X-Amz-Signature", "Action")


def for_aws(method: str, path: str, headers: Any, query: Any) -> bool:
    """Whether a request is an AWS API call rather than a browser's request for the page."""
    if any(name in headers for name in AWS_HEADERS) or any(name in query for name in AWS_QUERY):
        return True
    if path == "/" or path.startswith(PAGE_PREFIXES):
        return method not in ("GET", "HEAD", "POST") or (method == "POST" and not path.startswith("/jobs/"))
    return True


_Arg = TypeVar("_Arg")
_Result = TypeVar("_Result")


@dataclass
class _Spooled:
    body: Any  # bytes, or a file positioned at its start
    sha256: str  # hex, or "" when no signature will be checked (the endpoint has no credentials)


class App:
    """The ASGI application: AWS requests to `endpoint`, the rest to `page` routes."""

    def __init__(self, endpoint: Endpoint, page: Sequence[BaseRoute] = (), body_limit: int = BODY_LIMIT, *,
                 names: guard.HostNames | None = None, tally: limits.Tally | None = None) -> None:
        self.endpoint = endpoint
        self.body_limit = body_limit
        # `names`: the Host names answered, and AWS calls that may change something must be signed
        # (emulator/serve/guard.py); None (an App a test drives in-process) answers any request.
        self.names = names
        self.tally = tally
        self.page = Router(routes=list(page))
        # A page route's HTTPException (StaticFiles' 404 for a file it does not have, a 405) is its
        # status; without this, Starlette's Router lets it through and Uvicorn answers 500.
        self._page = ExceptionMiddleware(self.page, handlers={HTTPException: _http_error})
        # The last resort: whatever still escapes is a bare 500 ("Internal Server Error", never the
        # traceback: debug is off), and Uvicorn logs the traceback once.
        self._guarded = ServerErrorMiddleware(self._dispatch)
        self._workers = concurrent.futures.ThreadPoolExecutor(WORKERS, thread_name_prefix="serve")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await self.page(scope, receive, send)
            return
        await self._guarded(scope, receive, send)

    async def _dispatch(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The request is read straight off the ASGI scope, not through Starlette's Request: its
        # Headers, QueryParams and URL objects cost about 50 us of CPU per call on the AWS path (the
        # page still gets them, through its routes).
        head = _head(scope)
        aws = for_aws(head.method, scope["path"], head.headers, dict(head.query))
        if self.names is not None and not self.names.allows(_first_host(scope)):
            await self._misdirected(Request(scope, receive), aws)(scope, receive, send)
            return
        if not aws:
            await self._page(scope, receive, send)
            return
        try:
            answer = await self.answer(scope, receive, head)
        except Exception as err:  # noqa: BLE001 - a bug of ours, answered in the service's shape
            answer = self.endpoint.failed(_head(scope), err)
        if isinstance(answer, Response):
            await answer(scope, receive, send)
        elif isinstance(answer.body, (bytes, bytearray)):
            await send({"type": "http.response.start", "status": answer.status,
                        "headers": _raw_headers(answer.status, answer.headers, len(answer.body))})
            await send({"type": "http.response.body", "body": bytes(answer.body)})
        else:
            await _response(answer)(scope, receive, send)

    async def answer(self, scope: Scope, receive: Receive, head: HttpRequest) -> HttpResponse | Response:
        """The endpoint's answer to the request `head` was read from (its body still to come from
        `receive`), or a bare Response when nobody is left to read one."""
        if self.names is not None:
            head.host = self.names.as_endpoint_reads(head.host)
        # Uvicorn's httptools parser takes headers of any size: the limit is kept here.
        if sum(len(k) + len(v) for k, v in scope["headers"]) > HEADER_LIMIT:
            return self.endpoint.headers_too_large(head, HEADER_LIMIT)
        declared = head.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.body_limit:
            return self.endpoint.too_large(head, self.body_limit)
        try:
            spooled = await self._read_body(receive)
        except _TooLarge:
            return self.endpoint.too_large(head, self.body_limit)
        except ClientDisconnect:
            return Response(status_code=400)  # nobody is listening; the server goes on
        head.body = spooled.body
        head.payload_sha256 = spooled.sha256
        if aws_chunked(head.headers):
            try:
                head.body = await self._in_worker(unchunk, spooled.body)
            except ValueError as err:
                return self.endpoint.malformed(head, f"the aws-chunked body cannot be read: {err}")
            finally:
                if not isinstance(spooled.body, bytes):
                    spooled.body.close()
            spooled = _Spooled(head.body, spooled.sha256)
        try:
            if self.endpoint.quick(head):
                # On the event loop: the hop to a worker thread and back costs these operations more
                # CPU than their own work; one that would wait says so, and goes to a worker after all.
                with contextlib.suppress(blocking.WouldBlock), blocking.forbidden():
                    return self._handle(head)
            answer = await self._in_worker(self._handle, head)
        finally:
            if not isinstance(spooled.body, bytes):
                spooled.body.close()
        return answer

    async def _in_worker(self, work: Callable[[_Arg], _Result], arg: _Arg) -> _Result:
        """`work(arg)` in a worker thread: the operations block on files and the engine, and the event
        loop must go on moving every other connection's bytes meanwhile.

        A plain executor rather than Starlette's `run_in_threadpool`: that goes through anyio's
        `to_thread.run_sync` (a capacity limiter, a cancel scope, a task-group handshake), which cost
        the server about 0.1 ms of CPU per call more than `loop.run_in_executor`, measured with the
        ASGI app driven in process (docs/benchmarks.md, "The AWS endpoint"). The context is copied
        as anyio does, so a context variable set around a call is seen in it."""
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(self._workers, context.run, work, arg)

    def _handle(self, head: HttpRequest) -> HttpResponse:
        """The endpoint's answer, unless the request must be signed and is not (emulator/serve/guard.py);
        with --credentials the endpoint checks every signature itself."""
        if self.names is None or self.endpoint.credentials is not None or guard.signed(head.headers, head.query):
            return self.endpoint.handle(head)
        try:
            service, protocol = self.endpoint.identify(head)
        except Exception:  # noqa: BLE001 - a form that cannot be read: S3's shape, as the endpoint's
            service, protocol = "s3", "rest-xml"
        if not guard.needs_signature(head, service):
            return self.endpoint.handle(head)
        refused = guard.unsigned_refusal(guard.family_of(protocol))
        return self.endpoint.error(service, protocol, refused.code, refused.message, refused.status, head)

    def _misdirected(self, request: Request, aws: bool) -> Response:
        """421 Misdirected Request, for a Host this server does not serve as: in the service's shape for
        an AWS request, a line of text for a browser's."""
        if self.tally is not None:
            self.tally.note("misdirected")
        host = (request.headers.get("host") or "")[:100]
        message = (f"hetero-emu serve does not serve as {host!r}: it answers localhost, its own addresses and "
                   "the names given with --host-name")
        if not aws:
            return Response(message + "\n", 421, media_type="text/plain",
                            headers={"X-Content-Type-Options": "nosniff", "Connection": "close"})
        head = _head(request.scope)
        head.body = b""
        try:
            service, protocol = self.endpoint.identify(head)
        except Exception:  # noqa: BLE001 - an unreadable request: S3's shape
            service, protocol = "s3", "rest-xml"
        answer = self.endpoint.error(service, protocol, "MisdirectedRequest", message, 421, head)
        answer.headers["connection"] = "close"
        return _response(answer)

    async def _read_body(self, receive: Receive) -> _Spooled:
        # The body's hash is only for a signature check (emulator/aws/sigv4.py): without credentials a
        # 1 GiB upload need not spend seconds of CPU on it.
        digest = hashlib.sha256() if self.endpoint.credentials is not None else None
        size = 0
        spool: Any = None
        small = bytearray()
        async for chunk in _chunks(receive):
            size += len(chunk)
            if size > self.body_limit:
                if spool is not None:
                    spool.close()
                raise _TooLarge
            if digest is not None:
                digest.update(chunk)
            if spool is None and len(small) + len(chunk) <= SPOOL_IN_MEMORY:
                small += chunk
                continue
            if spool is None:
                spool = tempfile.SpooledTemporaryFile(max_size=0)  # noqa: SIM115 - closed by answer()
                spool.write(small)
            spool.write(chunk)
        if spool is None:
            return _Spooled(bytes(small), digest.hexdigest() if digest is not None else "")
        spool.seek(0)
        return _Spooled(spool, digest.hexdigest() if digest is not None else "")


class _TooLarge(Exception):
    pass


def _head(scope: Scope) -> HttpRequest:
    """The request as the endpoint reads it, without its body yet. As Starlette's Request reads a
    scope: names and values as Latin-1, the query as `parse_qsl(..., keep_blank_values=True)` (for a
    name given twice, the headers keep the last value and the host is the first `Host`)."""
    return HttpRequest(method=scope["method"], path=scope_path(scope),
                       query=parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True),
                       headers={k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]},
                       host=(_first_host(scope) or "").rsplit(":", 1)[0])


def _first_host(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"host":
            return str(value.decode("latin-1"))
    return None


async def _chunks(receive: Receive) -> AsyncIterator[bytes]:
    """A request body's chunks as they arrive (what Starlette's `Request.stream` does); ClientDisconnect
    when the client goes away first."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        if message["type"] != "http.request":
            continue
        body = message.get("body", b"")
        if body:
            yield body
        if not message.get("more_body", False):
            return


def _raw_headers(status: int, headers: dict[str, str], length: int) -> list[tuple[bytes, bytes]]:
    """An answer's headers as ASGI sends them, with the Content-Length Starlette's Response adds when
    the answer has none (never on a 1xx, 204 or 304: RFC 9110, section 8.6)."""
    raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    if not (status < 200 or status in (204, 304)) and all(k != b"content-length" for k, _ in raw):
        raw.append((b"content-length", str(length).encode("latin-1")))
    return raw


def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return PlainTextResponse(exc.detail, exc.status_code,
                             headers={**(exc.headers or {}), "X-Content-Type-Options": "nosniff"})


def scope_path(scope: Scope) -> str:
    """The path as the client sent it, percent-encoding kept: S3 keys are signed and parsed in that form."""
    raw = scope.get("raw_path")
    if raw:
        return bytes(raw).split(b"?", 1)[0].decode("latin-1")
    return str(scope.get("path", "/"))


def _response(answer: HttpResponse) -> Response:
    if isinstance(answer.body, (bytes, bytearray)):
        return Response(content=bytes(answer.body), status_code=answer.status, headers=answer.headers)
    return StreamingResponse(_closing(answer.body), status_code=answer.status, headers=answer.headers)


def _closing(chunks: Any) -> Iterator[bytes]:
    """The chunks of a streamed answer; whatever ends the stream (the end, a client that went away),
    the file behind it is closed."""
    try:
        yield from chunks
    finally:
        close = getattr(chunks, "close", None)
        if callable(close):
            with contextlib.suppress(Exception):
                close()


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before anything else starts: a port in use is one clear message."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, not 0: asyncio turns Nagle's algorithm off (TCP_NODELAY) only on an accepted
    # socket whose proto says TCP (asyncio/base_events.py `_set_nodelay`). With it on, an answer's body,
    # written after its head, waited for the client's delayed ACK: 40 ms per call on Linux.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        if err.errno == errno.EADDRINUSE:
            raise EnvironmentProblem(f"cannot serve on {host}:{port}: the port is in use",
                                     hint="stop what listens there, or choose another port with --port") from None
        if err.errno == errno.EADDRNOTAVAIL:
            raise EnvironmentProblem(f"cannot serve on {host}:{port}: no interface of this machine has that "
                                     "address", hint="--host 127.0.0.1, or an address of this machine") from None
        raise EnvironmentProblem(f"cannot serve on {host}:{port}: {err.strerror}") from None
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def run(app: App, sock: socket.socket, bounds: limits.Limits | None = None) -> None:
    """Serve on `sock` until Ctrl-C or SIGTERM, within `bounds` (emulator/serve/limits.py): at Ctrl-C,
    requests still being answered get a moment, then their connections are closed (the live page's
    event streams never end by themselves)."""
    import logging

    import uvicorn
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    bounds = bounds or limits.Limits()
    tally = app.tally or limits.Tally(bounds)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                            http=limits.guarded(AutoHTTPProtocol, bounds, tally),
                            h11_max_incomplete_event_size=HEADER_LIMIT, timeout_keep_alive=limits.KEEP_ALIVE_SECONDS,
                            timeout_graceful_shutdown=limits.SHUTDOWN_SECONDS)
    folded = limits.FoldedLogs(tally)
    for name in ("asyncio", "uvicorn.error"):
        logging.getLogger(name).addFilter(folded)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        for name in ("asyncio", "uvicorn.error"):
            logging.getLogger(name).removeFilter(folded)
        tally.report()  # what was counted since the last line
