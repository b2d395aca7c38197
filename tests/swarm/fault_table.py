"""The table of the swarm's faults (test_swarm_faults.py): fault, status reached, seconds to full
teardown, resources left; printed at the end of the session (conftest.py), as tests/faults prints
the Docker engine's."""

from __future__ import annotations

ROWS: list[tuple[str, str, float, int]] = []


def record(fault: str, status: str, teardown_seconds: float, left: int) -> None:
    ROWS.append((fault, status, teardown_seconds, left))


def table() -> str:
    lines = ["| fault | status reached | seconds to full teardown | resources left |", "|---|---|---|---|"]
    lines += [f"| {fault} | {status} | {seconds:.1f} | {left} |" for fault, status, seconds, left in ROWS]
    return "\n".join(lines)
