"""Jobs of the SDK sessions on the fake engine, and a fake engine that ends a job in each of its final
states (`ending`).

A CreateTrainingJob's driver (emulator.driver) is a process of its own (emulator/jobs/service.py),
which could not reach an engine registered in the test's process (the fake one,
tests/support/fake_backend.py). `install` runs it in a thread of the test's process instead: the same
`main`, on the same ticket; only the process around it is the test's. SDK v3's user code in
.venv-sdk3 uses it too (tests/data/sdk_v3/shape.py).

What only a process of its own gives is not there: StopTrainingJob's SIGTERM would reach the test's
own process (a test stops a job through the fake engine's `interrupt_on_states_call` instead), and
the driver's console output goes to the test's stdout instead of the job's driver log.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Callable, MutableMapping, Sequence
from types import SimpleNamespace
from typing import Any, Protocol

from fake_backend import FakeBackend, exits, runs_until_stopped

from emulator import driver
from emulator.backend import Backend, registry
from emulator.defaults import DEFAULT_IMAGE
from emulator.jobs import service
from emulator.result import Status

# The final states a job reaches on the fake engine, each with `ending`.
ENDS = (Status.COMPLETED, Status.FAILED, Status.STOPPED)


def ending(ends: Status, hosts: int = 2) -> FakeBackend:
    """A fake engine on which a job of `hosts` hosts ends as `ends`: every host exits 0; algo-1 exits 1
    (Failed); or every host runs until the run is interrupted while they run (Stopped: the Ctrl-C,
    or StopTrainingJob's SIGTERM to the driver, that the runner stops the hosts for)."""
    names = [f"algo-{i}" for i in range(1, hosts + 1)]
    if ends == Status.STOPPED:
        return FakeBackend({n: runs_until_stopped() for n in names}, images=(DEFAULT_IMAGE,),
                           interrupt_on_states_call=3)
    assert ends in (Status.COMPLETED, Status.FAILED), ends
    return FakeBackend({n: exits(1 if ends == Status.FAILED and n == "algo-1" else 0) for n in names},
                       images=(DEFAULT_IMAGE,))


class ThreadDriver:
    """Stands in for the driver's `subprocess.Popen`: `pid` (the test's own, alive while it runs, as
    the job's record's DriverPid is checked), `wait`, `poll` and `returncode`."""

    def __init__(self, args: Sequence[str], **_popen: Any) -> None:
        self.pid = os.getpid()
        self.returncode: int | None = None
        self.thread = threading.Thread(target=self._main, args=(str(args[-1]),), name="driver", daemon=True)
        self.thread.start()

    def _main(self, ticket: str) -> None:
        self.returncode = driver.main([ticket])

    def wait(self, timeout: float | None = None) -> int | None:
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise subprocess.TimeoutExpired("emulator.driver", timeout or 0)
        return self.returncode

    def poll(self) -> int | None:
        return None if self.thread.is_alive() else self.returncode


class Patch(Protocol):
    """What replaces attributes and items: pytest's MonkeyPatch (which puts them back after the
    test), or `Assign` in a process of its own."""

    def setattr(self, target: object, name: str, value: Any) -> None: ...

    def setitem(self, mapping: MutableMapping[str, Any], name: str, value: Any) -> None: ...


class Assign:
    """Plain assignment, for a process that ends with the job (SDK v3's user code)."""

    def setattr(self, target: object, name: str, value: Any) -> None:
        setattr(target, name, value)

    def setitem(self, mapping: MutableMapping[str, Any], name: str, value: Any) -> None:
        mapping[name] = value


def install(engine_name: str, backend: Callable[[], Backend], patch: Patch) -> None:
    """Jobs created from now on run their driver in a thread, on the engine `backend` makes,
    registered as `engine_name`."""
    patch.setitem(registry._FACTORIES, engine_name, backend)
    # The driver's SIGTERM handler can only be set from the main thread, and would be the test's.
    patch.setattr(driver, "signal", SimpleNamespace(signal=lambda *_: None, SIGTERM=signal.SIGTERM,
                                                    default_int_handler=signal.default_int_handler))
    patch.setattr(service, "subprocess", SimpleNamespace(Popen=ThreadDriver, DEVNULL=subprocess.DEVNULL,
                                                         STDOUT=subprocess.STDOUT))
