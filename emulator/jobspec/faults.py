"""The faults a job is given on purpose: spot interruptions and platform errors, each at a time of
the hosts' running (`--inject`, `--interrupt-at`, the spec's `inject`; docs/service-features.md).

On the service a managed spot job is interrupted when EC2 reclaims its capacity, and a job with a
RetryStrategy is started again after an internal error; neither can be caused on purpose, so the
resume logic they exercise is never tested before it is needed. Here a run names them:
`--interrupt-at 30s` (a spot interruption) or `--inject platform-error@30s`. Each is due when the
job's hosts have *run* that long in all, across attempts: the clock MaxRuntimeInSeconds counts and
BillableTimeInSeconds bills, not the wall clock, which also holds the restarts between attempts.

These are part of what a job is asked to do, so the spec's rules check them here; when each is due
and the attempts it ends are the run's (emulator/run/attempts.py). Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Kind = Literal["spot-interruption", "platform-error"]
KINDS: tuple[Kind, ...] = ("spot-interruption", "platform-error")

# 30s, 2m, 1h, 1m30s, 90 (seconds), 1.5s
_DURATION = re.compile(r"(?:(?P<h>\d+(?:\.\d+)?)h)?(?:(?P<m>\d+(?:\.\d+)?)m)?(?:(?P<s>\d+(?:\.\d+)?)s?)?")


def parse_duration(text: str) -> float:
    """Seconds from `30s`, `2m`, `1m30s`, `1h` or a bare number of seconds; ValueError otherwise."""
    match = _DURATION.fullmatch(text.strip())
    if not text.strip() or match is None or not any(match.groupdict().values()):
        raise ValueError(f"{text!r} is not a duration (e.g. 30s, 2m, 1m30s, 90)")
    parts = match.groupdict()
    return sum(float(parts[unit] or 0) * factor for unit, factor in (("h", 3600), ("m", 60), ("s", 1)))


@dataclass(frozen=True, order=True)
class Injection:
    """One fault the run causes: `kind` when the hosts have run `at` seconds in all."""

    at: float
    kind: Kind

    def __str__(self) -> str:
        return f"{self.kind}@{self.at:g}s"


def parse_injection(text: str) -> Injection:
    """`spot-interruption@30s` or `platform-error@1m` (`--inject`, the spec's `inject`)."""
    kind, sep, when = text.strip().partition("@")
    if not sep or kind not in KINDS:
        raise ValueError(f"{text!r} is not KIND@TIME with KIND one of {', '.join(KINDS)} (e.g. platform-error@30s)")
    return Injection(parse_duration(when), kind)


def problems(injections: tuple[Injection, ...], max_run: int, spot: bool) -> list[str]:
    """What the service could never do to this job: interrupt a job that is not on spot capacity,
    or at a time past MaxRuntimeInSeconds (the job has been stopped by then); two faults at one time."""
    found = []
    for inj in injections:
        if inj.at <= 0:
            found.append(f"{inj}: the time must be after the hosts start (above 0 s)")
        elif inj.at >= max_run:
            found.append(f"{inj}: the job's max_run is {max_run} s, so it would have been stopped by then")
        if inj.kind == "spot-interruption" and not spot:
            found.append(f"{inj}: only a managed spot training job is interrupted (use_spot_instances: true, "
                         "the request's EnableManagedSpotTraining)")
    times = [inj.at for inj in injections]
    found += [f"two faults at {t:g} s of running time: give each its own time"
              for t in sorted({t for t in times if times.count(t) > 1})]
    return found
