"""How a backend calls an engine, whichever engine it is (Docker, swarm): a lost engine becomes one
error, interrupts wait while something is being created, and the engine's words become ours."""

from __future__ import annotations

import contextlib
import functools
import signal
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Any, Protocol, TypeVar

import requests

from emulator.errors import EmulatorError


class _LosesEngine(Protocol):
    def _lost_engine(self, err: BaseException) -> EmulatorError: ...


def first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0][:300] if text else type(err).__name__


def epoch(stamp: object) -> float | None:
    """Docker's RFC 3339 timestamp with nanoseconds -> seconds since the epoch."""
    if not isinstance(stamp, str) or stamp.startswith("0001-"):
        return None
    whole, _, fraction = stamp.rstrip("Z").partition(".")
    try:
        seconds = datetime.fromisoformat(whole).replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return None
    digits = "".join(ch for ch in fraction if ch.isdigit())
    return seconds + (int(digits) / 10 ** len(digits) if digits else 0.0)


_Method = TypeVar("_Method", bound=Callable[..., Any])


def engine_call(method: _Method) -> _Method:
    """An engine that stops answering (connection refused, reset, timed out) mid-job becomes one
    DockerUnavailable (exit code 3) and marks the backend so that teardown leaves the removal to
    the watcher instead of waiting out one timeout per container."""

    @functools.wraps(method)
    def call(self: _LosesEngine, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except requests.exceptions.RequestException as err:
            raise self._lost_engine(err) from None

    return call  # type: ignore[return-value]


SIGNALS_DEFERRED = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def interrupts_deferred(on_signal: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM while the engine creates something, and deliver them once it is
    recorded. Interrupted while waiting for the engine's answer, the driver would never learn the
    id of a container the engine still creates: nobody would remove it. A create takes tens of
    milliseconds, so the delay is not felt. Only the main thread can handle signals. `on_signal`
    is called when one is held (to give up work not begun yet)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []

    def hold(signum: int, _frame: object) -> None:
        held.append(signum)
        if on_signal is not None:
            on_signal()

    previous = {sig: signal.signal(sig, hold) for sig in SIGNALS_DEFERRED}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if held:
            signal.raise_signal(held[0])  # the restored handler runs now (KeyboardInterrupt)
