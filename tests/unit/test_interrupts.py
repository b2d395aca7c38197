"""backend/calls.py `interrupts_deferred`: a Ctrl-C or SIGTERM that lands while the engine creates
something is delivered once the create is recorded, never lost and never in the middle."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from emulator.backend.calls import interrupts_deferred


def test_ctrl_c_inside_is_delivered_after_the_block() -> None:
    steps: list[str] = []
    with pytest.raises(KeyboardInterrupt), interrupts_deferred():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # a real handler would have raised by now
        steps.append("created")
        steps.append("recorded")
    assert steps == ["created", "recorded"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_sigterm_goes_to_the_handler_that_was_there_before() -> None:
    seen: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, _frame: seen.append(signum))
    try:
        with interrupts_deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            assert seen == []
        assert seen == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_nothing_is_raised_without_a_signal() -> None:
    with interrupts_deferred():
        pass
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_outside_the_main_thread_it_changes_nothing() -> None:
    # signal.signal only works in the main thread; elsewhere the block just runs.
    errors: list[BaseException] = []

    def body() -> None:
        try:
            with interrupts_deferred():
                pass
        except BaseException as err:  # noqa: BLE001
            errors.append(err)

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert errors == []
