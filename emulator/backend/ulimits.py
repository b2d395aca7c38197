"""Which of a container's ulimits the engine can give, learnt once per engine and remembered.

The plan asks for memlock unlimited and a 64 MiB stack (`emulator.container.MPI_ULIMITS`). An engine
that may raise a hard limit (root with CAP_SYS_RESOURCE, as dockerd usually is) gives them; an engine
confined below them (dockerd in a sandbox whose own hard memlock is 8 MiB) refuses to start such a
container at all: runc's "error setting rlimits ... operation not permitted". A job must not fail for
a limit it may never need, so each ulimit is tried once in a throwaway container; one the engine
refuses is left to the engine's default, with a warning, and the verdict is kept per engine address
in the state folder (`emulator.job_records.state_dir`), so the 1-2 s probe is paid once per engine, not per
job, and a known verdict costs no call to the engine (a busy engine can take seconds to answer any).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from emulator.container import Ulimit
from emulator.job_records import state_dir, write_atomically

# What runc says when the engine may not raise a limit (moby/runc libcontainer/init_linux.go).
REFUSED = "setting rlimit"


def engine_key() -> str:
    """The engine's address, as docker-py's `from_env` picks it: DOCKER_HOST, else the default socket."""
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def cache_path() -> Path:
    return state_dir() / "engine-ulimits.json"


def _key(engine: str, ulimit: Ulimit) -> str:
    return f"{engine} {ulimit.name}={ulimit.soft}:{ulimit.hard}"


def _read() -> dict[str, bool]:
    try:
        data = json.loads(cache_path().read_text())
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, bool)} if isinstance(data, dict) \
        else {}


def _write(verdicts: dict[str, bool]) -> None:
    """Best effort (a read-only home only costs probing again), atomic (two runs may write at once)."""
    with contextlib.suppress(OSError):
        write_atomically(cache_path(), json.dumps(verdicts, indent=1, sort_keys=True))


def refused(engine: str, wanted: Sequence[Ulimit],
            probe: Callable[[Sequence[Ulimit]], bool | None]) -> set[Ulimit]:
    """The ulimits of `wanted` the engine at `engine` (`engine_key`) refuses. `probe(ulimits)` starts a
    container with them and says whether the engine accepted them (None: it could not tell, e.g. no
    image to try with: nothing is refused and nothing remembered). Known verdicts come from the cache;
    when none is known, all are tried at once and, only if refused, one by one."""
    verdicts = _read()
    unknown = [u for u in wanted if _key(engine, u) not in verdicts]
    if unknown and (together := probe(unknown)) is not None:
        if together or len(unknown) == 1:
            found: dict[Ulimit, bool | None] = dict.fromkeys(unknown, together)
        else:
            found = {u: probe([u]) for u in unknown}
        verdicts.update({_key(engine, u): ok for u, ok in found.items() if ok is not None})
        _write(verdicts)
    return {u for u in wanted if verdicts.get(_key(engine, u)) is False}


def refusal_notes(refused: Iterable[Ulimit]) -> list[str]:
    """One warning per ulimit the engine refuses."""
    return [f"the Docker engine may not raise ulimit {u.name} to {'unlimited' if u.hard < 0 else u.hard} (its own "
            f"limit is lower): hosts keep the engine's default, which MPI or NCCL pinning memory may find too small"
            for u in sorted(refused, key=lambda u: u.name)]
