"""What one `hetero-emu serve` process gives its clients at most: connections, time to send a request
head, time idle between requests, time to finish at Ctrl-C; and one log line a minute about what it
refused, instead of one per connection.

Why (issue 30): a client that opens connections and sends half a request head kept each one open for
minutes; 20,000 of them used up the process's file descriptors, after which every accept failed and
asyncio logged a traceback for each (`socket.accept() out of system resource`, 161 MB of log in 40 s),
and normal requests went unanswered. Uvicorn bounds the idle time between requests (`timeout_keep_alive`)
but not the time to send a head, and its `limit_concurrency` answers 503 only once a request head has
arrived, so neither frees a half-open connection. Both are added here by a subclass of the HTTP protocol
Uvicorn picks (h11's, or httptools' when installed: `uvicorn.protocols.http.auto`), through what both keep
alike: `server_state.connections` (every open connection), `cycle` (the request being answered, set once
its head is parsed) and `shutdown()` (what Uvicorn calls on each connection when it stops).

The limit on connections sits below the limit on file descriptors (raised from its soft to its hard
value at start, `raise_open_files`), so accepting never fails for want of one. A connection beyond the
limit takes the place of the one that has waited longest for a request head (a flood of half-open
connections then displaces itself, while a real client, which sends its head at once, is answered); when
every open connection is in a request, it is answered 503 and closed at once, and costs no more than that.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import resource
import time
from dataclasses import dataclass
from typing import Any

# A client has this long from connecting (or from the first byte after an answer) to send a whole
# request head. Apache's mod_reqtimeout gives 20-40 s and nginx 60 s to clients across the internet;
# the server's clients are SDKs and a browser, which send a head in one write.
HEADER_SECONDS = 10.0
# An idle connection between requests is closed after this long: Uvicorn's own default, which botocore's
# connection pool copes with (it checks a pooled connection before reusing it).
KEEP_ALIVE_SECONDS = 5
# At Ctrl-C, requests still being answered get this long before their connections are closed: the live
# page's event streams never end by themselves, and a slow client must not hold the server's exit.
GRACE_SECONDS = 0.3
# Uvicorn's own deadline for what is still running after that (it cancels it, logging a traceback):
# above GRACE_SECONDS, so it is only reached by a request whose work in a thread is still going on.
SHUTDOWN_SECONDS = 1
# The connections open at once by default, and the file descriptors kept for everything else (the
# spooled bodies of requests in flight, the job files being read, the engine's socket, the drivers).
MAX_CONNECTIONS = 1000
RESERVED_FILES = 256
# The most a process asks for when its hard limit is "unlimited" (macOS's OPEN_MAX).
UNLIMITED_FILES = 10240
REPORT_SECONDS = 60.0
# The most bytes of one request head held while it arrives. h11's parser stops at its own bound
# (`h11_max_incomplete_event_size`), httptools' keeps every header it is sent: a client writing one
# endless header section grew the server by 4 GB in 8 s on localhost. Above the 64 KiB the app
# itself answers in the service's shape (RequestHeaderSectionTooLarge), so only a flood reaches it.
HEAD_BYTES = 1024 * 1024
_LARGE_TEXT = b"hetero-emu serve: the request head is too large\n"
LARGE_HEAD = (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain; charset=utf-8\r\n"
              b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(_LARGE_TEXT), _LARGE_TEXT))
_BUSY_TEXT = b"hetero-emu serve: too many connections open; try again soon\n"
BUSY = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\n"
        b"retry-after: 1\r\ncontent-length: %d\r\n\r\n%s" % (len(_BUSY_TEXT), _BUSY_TEXT))

# What each counted event is, as the minute's log line says it.
WORDS = {
    "over_limit": "connections refused over the limit of {limit} open at once, all in requests (--max-connections)",
    "displaced": "connections closed that waited longest for a request head, for new ones over the limit of "
                 "{limit}",
    "slow_head": "connections closed that sent no whole request head within {header:g} s",
    "large_head": "connections closed whose request head passed {head_bytes} bytes, answered 431",
    "misdirected": "requests for a host name this server does not serve as, answered 421 (--host-name)",
    "bad_request": "requests that were not HTTP, answered 400",
    "no_files": "accepts that failed for want of a file descriptor",
}

log = logging.getLogger("uvicorn.error")


@dataclass(frozen=True)
class Limits:
    max_connections: int = MAX_CONNECTIONS
    header_seconds: float = HEADER_SECONDS
    grace_seconds: float = GRACE_SECONDS
    head_bytes: int = HEAD_BYTES


class Tally:
    """Counts what the server refused, and logs the counts: at once for the first, then at most once a
    minute."""

    def __init__(self, limits: Limits, every: float = REPORT_SECONDS) -> None:
        self.limits = limits
        self.every = every
        self.counts: collections.Counter[str] = collections.Counter()
        self._last = float("-inf")
        self._due: asyncio.TimerHandle | None = None

    def note(self, kind: str) -> None:
        self.counts[kind] += 1
        if self._due is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not on the server's loop (a thread): the line waits for the next count there
            return
        self._due = loop.call_later(max(0.0, self._last + self.every - time.monotonic()), self.report)

    def report(self) -> None:
        self._due = None
        if not self.counts:
            return
        self._last = time.monotonic()
        words = {"limit": self.limits.max_connections, "header": self.limits.header_seconds,
                 "head_bytes": self.limits.head_bytes}
        parts = [f"{count} {WORDS[kind].format(**words)}" for kind, count in sorted(self.counts.items())]
        self.counts.clear()
        log.warning("refused: %s (counted since the previous such line; one a minute at most)", "; ".join(parts))


class FoldedLogs(logging.Filter):
    """Turns the log lines that come once per connection (asyncio's failed accept with its traceback,
    Uvicorn's invalid request) into counts of the tally."""

    def __init__(self, tally: Tally) -> None:
        super().__init__()
        self.tally = tally

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        if message.startswith("socket.accept() out of system resource"):
            self.tally.note("no_files")
            return False
        if message.startswith("Invalid HTTP request received"):
            self.tally.note("bad_request")
            return False
        return True


def guarded(base: type[asyncio.Protocol], limits: Limits, tally: Tally) -> type[asyncio.Protocol]:
    """Uvicorn's HTTP protocol `base` with the limits: a request head that takes over `header_seconds`
    closes its connection; a connection over `max_connections` takes the place of the one that has waited
    longest for a request head, or, when every open connection is in a request, is answered 503 and
    closed; at shutdown, what is still being answered after `grace_seconds` is closed.

    Why the oldest waiting one goes first: a flood of half-open connections would otherwise hold every
    place until the head timeout, and refuse real clients (which send their head at once) meanwhile."""
    # The connections waiting for a request head, oldest first (a dict keeps the order of insertion).
    waiting: dict[Any, None] = {}

    class Guarded(base):  # type: ignore[valid-type,misc]
        _refused = False
        _head_timer: asyncio.TimerHandle | None = None
        _seen: Any = None  # the request whose head came last
        _head_bytes = 0  # received since the wait for the current head began

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            if len(self.server_state.connections) >= limits.max_connections:
                oldest = next(iter(waiting), None)
                if oldest is None:
                    self._refused = True
                    tally.note("over_limit")
                    assert isinstance(transport, asyncio.Transport)
                    transport.write(BUSY)
                    transport.close()
                    return
                tally.note("displaced")
                oldest._drop()
            super().connection_made(transport)
            self._await_head()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._refused:
                return
            self._cancel_head_timer()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._head_timer is not None:
                self._head_bytes += len(data)
                if self._head_bytes > limits.head_bytes:
                    tally.note("large_head")
                    self._cancel_head_timer()
                    self.transport.write(LARGE_HEAD)
                    self.transport.close()
                    return
            super().data_received(data)
            cycle = getattr(self, "cycle", None)
            if cycle is not None and cycle is not self._seen:  # a whole head has come: a new request
                self._seen = cycle
                self._cancel_head_timer()
            elif cycle is None or cycle.response_complete:  # the start of a next request, its head not whole
                self._await_head()

        def shutdown(self) -> None:
            super().shutdown()
            if not self.transport.is_closing():
                self.loop.call_later(limits.grace_seconds, self.transport.abort)

        def _await_head(self) -> None:
            if self._head_timer is None and not self.transport.is_closing():
                self._head_bytes = 0
                self._head_timer = self.loop.call_later(limits.header_seconds, self._head_too_slow)
                waiting[self] = None

        def _cancel_head_timer(self) -> None:
            waiting.pop(self, None)
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_too_slow(self) -> None:
            self._head_timer = None
            if not self.transport.is_closing():
                tally.note("slow_head")
            self._drop()

        def _drop(self) -> None:
            """Closes the connection now; abort, not close: a client that does not read must not keep
            the socket open either."""
            self._cancel_head_timer()
            self.transport.abort()

    Guarded.__name__ = Guarded.__qualname__ = f"Guarded{base.__name__}"
    return Guarded


def raise_open_files() -> int:
    """Raises this process's soft limit on open files to its hard limit (the soft one is often 1024,
    the hard one far more); the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = UNLIMITED_FILES if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):
            pass
    return int(soft) if soft != resource.RLIM_INFINITY else UNLIMITED_FILES


def connection_limit(asked: int | None, open_files: int) -> int:
    """The connections allowed at once: as asked (else MAX_CONNECTIONS), and never so many that they and
    a spooled body each would use up the file descriptors."""
    room = max(1, (open_files - RESERVED_FILES) // 2)
    return max(1, min(asked if asked is not None else MAX_CONNECTIONS, room))
