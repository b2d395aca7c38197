"""Whether the code running now may wait: on `hetero-emu serve`'s event loop it must not.

`hetero-emu serve` answers a few read-only operations (DescribeTrainingJob, ListTrainingJobs,
GetLogEvents, ...) on its event loop instead of handing each to a worker thread: the hop to a thread
and back cost more server CPU than the operations' own work (docs/benchmarks.md, "The AWS endpoint").
Those operations read small files of the emulator's own; where one of them would have to wait (a
lock another process holds, a large file, the engine, a pool's folders to remove), it calls
`may_block()` first, which raises `WouldBlock` while `forbidden()` is in force. The server then runs
the operation again in a worker thread, from the start: these operations change nothing before the
point where they ask. Everywhere else (the CLI, the in-process session, worker threads) `may_block()`
does nothing. A leaf module (the standard library only), so any layer may ask it.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

_FORBIDDEN: contextvars.ContextVar[bool] = contextvars.ContextVar("hetero_emu_no_waiting", default=False)


# The most bytes of a file read where waiting is forbidden: a job.json, a page of a host's log (about
# 2,500 lines, whose answer takes a few ms to write).
QUICK_BYTES = 256 * 1024


class WouldBlock(Exception):
    """The operation would have to wait: run it where waiting is allowed (a worker thread)."""


@contextlib.contextmanager
def forbidden() -> Iterator[None]:
    """Within this block, `may_block()` raises `WouldBlock`."""
    token = _FORBIDDEN.set(True)
    try:
        yield
    finally:
        _FORBIDDEN.reset(token)


def may_block() -> None:
    """Say that what comes next may wait; raises `WouldBlock` inside `forbidden()`."""
    if _FORBIDDEN.get():
        raise WouldBlock


def allowed() -> bool:
    """Whether the code running now may wait (False inside `forbidden()`)."""
    return not _FORBIDDEN.get()
