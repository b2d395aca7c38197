"""The watcher that removes a run's containers and networks when its driver cannot (backend/reaper.py).

No Docker: the order protocol (`read_orders`), the retrying removal (`reap`, with fake removers, a fake
clock and a fake sleep) and `main` (with `_docker_removers` replaced) run in-process; one test starts
the real watcher process through `Reaper` and lets it go with `release()` / `hand_over()` when
nothing is tracked, the two ways it must exit at once without touching an engine.
"""

from __future__ import annotations

import functools
import io
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from emulator.backend import reaper
from emulator.backend.reaper import Reaper, main, read_orders, reap

CONTAINER_ID = "c0ffee" * 10 + "abcd"  # 64 hex digits, as the engine gives them
NETWORK_ID = "beef42" * 10 + "0123"


class FakeTime:
    """A monotonic clock that only moves when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        # A reap() that never gave up would loop forever on a clock that only moves here: fail instead.
        assert len(self.sleeps) < 1000, "reap() keeps retrying past any patience"
        self.sleeps.append(seconds)
        self.now += seconds


class Removers:
    """Fake removers that record each attempt; `failures[id]` attempts fail first (None: always)."""

    def __init__(self, failures: dict[str, int | None] | None = None, gone: set[str] | None = None) -> None:
        self.failures = dict(failures or {})
        self.gone = set(gone or ())
        self.attempts: list[tuple[str, str]] = []
        self.removed: list[tuple[str, str]] = []

    def _remove(self, kind: str, ident: str) -> None:
        self.attempts.append((kind, ident))
        if ident in self.gone:
            raise LookupError(ident)
        left = self.failures.get(ident, 0)
        if left is None or left > 0:
            if left is not None:
                self.failures[ident] = left - 1
            raise RuntimeError(f"engine busy removing {ident}\nsecond line of the error")
        self.removed.append((kind, ident))

    def container(self, ident: str) -> None:
        self._remove("container", ident)

    def network(self, ident: str) -> None:
        self._remove("network", ident)


def run_reap(
    containers: list[str], networks: list[str], removers: Removers, fake: FakeTime, patience: float = 600.0
) -> tuple[bool, list[str]]:
    lines: list[str] = []
    ok = reap(containers, networks, removers.container, removers.network, lines.append,
              patience=patience, sleep=fake.sleep, clock=fake.clock)
    return ok, lines


# ---------------------------------------------------------------------------------------------------
# read_orders: what the driver said over the pipe


def test_done_means_no_reaping() -> None:
    must_reap, containers, networks = read_orders(["network n1\n", "container c1\n", "container c2\n", "done\n"])
    assert must_reap is False
    assert (containers, networks) == (["c1", "c2"], ["n1"])


def test_end_of_input_without_done_means_reap_every_id_given() -> None:
    # The pipe closed: the driver was killed or crashed before it could say `done`.
    must_reap, containers, networks = read_orders(["network n1\n", "container c1\n", "container c2\n"])
    assert must_reap is True
    assert (containers, networks) == (["c1", "c2"], ["n1"])


def test_reap_line_means_reap_now() -> None:
    # `reap` is the driver's last word (hand_over): nothing after it is read.
    must_reap, containers, networks = read_orders(["container c1\n", "reap\n", "container late\n", "done\n"])
    assert must_reap is True
    assert (containers, networks) == (["c1"], [])


def test_junk_lines_are_ignored() -> None:
    lines = ["\n", "   \n", "hello world\n", "container\n", "network \n", "volume v1\n", "CONTAINER c9\n",
             "  container c1  \n", "network n1\n"]
    must_reap, containers, networks = read_orders(lines)
    assert must_reap is True
    assert (containers, networks) == (["c1"], ["n1"])


def test_done_after_junk_still_means_no_reaping() -> None:
    assert read_orders(["bogus\n", "container c1\n", "done\n"])[0] is False


# ---------------------------------------------------------------------------------------------------
# reap: removal with retries


def test_containers_are_removed_before_networks() -> None:
    removers, fake = Removers(), FakeTime()
    ok, lines = run_reap(["c1", "c2"], ["n1", "n2"], removers, fake)

    assert ok is True
    assert removers.attempts == [("container", "c1"), ("container", "c2"), ("network", "n1"), ("network", "n2")]
    assert lines == ["removed container c1", "removed container c2", "removed network n1", "removed network n2"]
    assert fake.sleeps == []


def test_ids_are_shortened_to_twelve_characters_in_the_log() -> None:
    ok, lines = run_reap([CONTAINER_ID], [NETWORK_ID], Removers(), FakeTime())
    assert ok is True
    assert lines == [f"removed container {CONTAINER_ID[:12]}", f"removed network {NETWORK_ID[:12]}"]


def test_lookup_error_counts_as_already_gone() -> None:
    removers, fake = Removers(gone={"c1", "n1"}), FakeTime()
    ok, lines = run_reap(["c1", "c2"], ["n1"], removers, fake)

    assert ok is True
    assert removers.attempts == [("container", "c1"), ("container", "c2"), ("network", "n1")]  # no retry
    # what was gone already is said so, not claimed as removed by the watcher
    assert lines == ["removed container c1 (already gone)", "removed container c2", "removed network n1 (already gone)"]
    assert fake.sleeps == []


def test_a_remover_failing_twice_then_succeeding_is_retried() -> None:
    removers, fake = Removers(failures={"c1": 2}), FakeTime()
    ok, lines = run_reap(["c1"], ["n1"], removers, fake)

    assert ok is True
    assert [a for a in removers.attempts if a[1] == "c1"] == [("container", "c1")] * 3
    # the network went on the first pass; only what failed is tried again
    assert [a for a in removers.attempts if a[1] == "n1"] == [("network", "n1")]
    assert removers.removed == [("network", "n1"), ("container", "c1")]
    assert len(fake.sleeps) == 2
    assert fake.sleeps[1] > fake.sleeps[0] > 0  # backing off
    assert "removed container c1" in lines
    assert not any("gave up" in line for line in lines)


def test_a_remover_failing_forever_gives_up_after_patience() -> None:
    removers, fake = Removers(failures={CONTAINER_ID: None, "n1": None}), FakeTime()
    start = fake.now
    ok, lines = run_reap([CONTAINER_ID, "c2"], ["n1"], removers, fake, patience=30.0)

    assert ok is False
    assert ("container", "c2") in removers.removed  # what could go, went
    assert removers.attempts.count(("container", CONTAINER_ID)) >= 3  # it kept trying
    assert 0 < fake.now - start <= 30.0  # and never slept past its patience
    gave_up = [line for line in lines if "gave up" in line]
    assert len(gave_up) == 1
    assert lines[-1] == gave_up[0]
    message = gave_up[0]
    assert "30 s" in message
    assert CONTAINER_ID[:12] in message and "n1" in message  # the ids left
    assert "c2" not in message.split("left:")[1]  # not one that was removed
    assert "engine busy removing" in message  # the last error, its first line only
    assert "second line" not in message
    assert "hetero-emu clean" in message


def test_nothing_to_remove_is_done_at_once() -> None:
    removers, fake = Removers(), FakeTime()
    assert run_reap([], [], removers, fake) == (True, [])
    assert removers.attempts == []


# ---------------------------------------------------------------------------------------------------
# main: the watcher's program, with the Docker removers replaced


def fake_docker_removers(removers: Removers) -> Callable[[], tuple[Callable[[str], None], Callable[[str], None]]]:
    return lambda: (removers.container, removers.network)


def log_lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_main_reaps_when_the_driver_is_gone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    removers = Removers()
    monkeypatch.setattr(reaper, "_docker_removers", fake_docker_removers(removers))
    log = tmp_path / "reaper.log"
    stdin = io.StringIO(f"container {CONTAINER_ID}\ncontainer c2\nnetwork {NETWORK_ID}\n")  # EOF, no `done`

    assert main(["reaper", str(log)], stdin) == 0

    assert removers.removed == [("container", CONTAINER_ID), ("container", "c2"), ("network", NETWORK_ID)]
    lines = log_lines(log)
    assert len(lines) == 4
    assert "the driver is gone" in lines[0] and "2 containers, 1 networks" in lines[0]
    assert lines[1].endswith(f"removed container {CONTAINER_ID[:12]}")
    assert lines[2].endswith("removed container c2")
    assert lines[3].endswith(f"removed network {NETWORK_ID[:12]}")
    assert all(f"reaper (pid {os.getpid()})" in line for line in lines)


def test_main_reaps_on_a_reap_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    removers = Removers()
    monkeypatch.setattr(reaper, "_docker_removers", fake_docker_removers(removers))
    log = tmp_path / "reaper.log"

    assert main(["reaper", str(log)], io.StringIO("container c1\nnetwork n1\nreap\n")) == 0
    assert removers.removed == [("container", "c1"), ("network", "n1")]
    assert any(line.endswith("removed network n1") for line in log_lines(log))


@pytest.mark.parametrize("orders", ["container c1\nnetwork n1\ndone\n", "", "junk\n", "reap\n"],
                         ids=["done", "nothing-said", "junk-only", "reap-with-nothing-tracked"])
def test_main_exits_quietly_without_docker_when_nothing_is_to_be_reaped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, orders: str,
) -> None:
    def no_docker() -> None:
        raise AssertionError("the watcher reached for the engine with nothing to remove")

    monkeypatch.setattr(reaper, "_docker_removers", no_docker)
    log = tmp_path / "reaper.log"
    assert main(["reaper", str(log)], io.StringIO(orders)) == 0
    assert not log.exists()


def test_main_returns_1_and_logs_when_it_gives_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    removers, fake = Removers(failures={"c1": None}), FakeTime()
    monkeypatch.setattr(reaper, "_docker_removers", fake_docker_removers(removers))
    monkeypatch.setattr(reaper, "reap", functools.partial(reap, patience=5.0, sleep=fake.sleep, clock=fake.clock))
    log = tmp_path / "reaper.log"

    assert main(["reaper", str(log)], io.StringIO("container c1\n")) == 1
    last = log_lines(log)[-1]
    assert "gave up after 5 s" in last and "c1" in last


def test_main_without_a_log_path_still_reaps(monkeypatch: pytest.MonkeyPatch) -> None:
    removers = Removers()
    monkeypatch.setattr(reaper, "_docker_removers", fake_docker_removers(removers))
    assert main(["reaper"], io.StringIO("container c1\n")) == 0
    assert removers.removed == [("container", "c1")]


# ---------------------------------------------------------------------------------------------------
# Reaper: the real watcher process (exits at once when there is nothing to remove; no Docker needed)


def test_released_watcher_exits_promptly_with_0_and_writes_no_log(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "reaper.log"
    log.parent.mkdir()
    watcher = Reaper(log)
    proc = watcher._proc
    assert proc is not None and watcher.pid == proc.pid
    # Its own session: a Ctrl-C in the driver's terminal does not reach it.
    assert os.getsid(proc.pid) != os.getsid(0)
    assert proc.poll() is None  # it waits for orders
    watcher.track("container", CONTAINER_ID)
    watcher.track("network", NETWORK_ID)

    started = time.monotonic()
    watcher.release()

    assert proc.returncode == 0  # release() waited for it
    assert time.monotonic() - started < 5
    assert not log.exists()
    assert watcher.pid is None
    # Once released, further orders are ignored instead of failing.
    watcher.track("container", "late")
    watcher.release()
    watcher.hand_over()


def test_handed_over_watcher_with_nothing_tracked_exits_with_0(tmp_path: Path) -> None:
    log = tmp_path / "reaper.log"
    watcher = Reaper(log)
    proc = watcher._proc
    assert proc is not None
    watcher.hand_over()  # does not wait
    assert proc.wait(timeout=10) == 0
    assert not log.exists()


def test_forget_drops_what_the_driver_removed_itself() -> None:
    # The network the driver creates only to learn a free subnet is removed at once: the watcher
    # must neither try to remove it again nor report it.
    orders = ["network probe1\n", "forget probe1\n", "network net1\n", "container c1\n"]
    assert read_orders(orders) == (True, ["c1"], ["net1"])
