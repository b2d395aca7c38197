"""Injected faults and attempts (emulator/jobspec/faults.py, emulator/run/attempts.py): parsing, the
service's limits, and when each fault is due on the hosts' running clock."""

from __future__ import annotations

import pytest

from emulator.jobspec.faults import Injection, parse_duration, parse_injection, problems
from emulator.run.attempts import Attempt, Schedule, running_seconds


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30), ("2m", 120), ("1m30s", 90), ("90", 90), ("1h", 3600),
                                               ("1.5s", 1.5)])
def test_durations_are_read_as_people_write_them(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "s", "30x", "-5s", "soon", "1m-3s"])
def test_a_word_that_is_no_duration_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


def test_an_injection_names_its_kind_and_time() -> None:
    assert parse_injection("platform-error@10s") == Injection(10, "platform-error")
    assert parse_injection("spot-interruption@1m") == Injection(60, "spot-interruption")
    with pytest.raises(ValueError, match="KIND@TIME"):
        parse_injection("meteor@10s")
    with pytest.raises(ValueError, match="KIND@TIME"):
        parse_injection("10s")


def test_what_the_service_could_never_do_is_named() -> None:
    assert problems((Injection(30, "spot-interruption"),), max_run=600, spot=True) == []
    assert problems((Injection(30, "platform-error"),), max_run=600, spot=False) == []
    [late] = problems((Injection(700, "platform-error"),), max_run=600, spot=False)
    assert "max_run is 600 s" in late
    [on_demand] = problems((Injection(30, "spot-interruption"),), max_run=600, spot=False)
    assert "only a managed spot training job is interrupted" in on_demand
    [twice] = problems((Injection(30, "spot-interruption"), Injection(30, "platform-error")), max_run=600, spot=True)
    assert "two faults at 30 s" in twice


def test_faults_are_due_on_the_running_clock_in_time_order_and_once_each() -> None:
    schedule = Schedule((Injection(25, "spot-interruption"), Injection(10, "spot-interruption")))
    assert schedule.due(9.9) is None
    assert schedule.due(10.0) == Injection(10, "spot-interruption")
    assert schedule.due(10.0) is None  # given once
    assert schedule.next_at() == 25
    assert schedule.due(30) == Injection(25, "spot-interruption")
    assert schedule.due(1000) is None and schedule.next_at() is None


def test_the_running_clock_leaves_out_the_restarts_between_attempts() -> None:
    done = [Attempt(1, started=100.0, ended=110.0, ending="spot-interruption"),
            Attempt(2, started=130.0, ended=145.5, ending="spot-interruption")]
    assert running_seconds(done) == 25.5
