"""Which of a container's ulimits the engine can give, learnt once per engine and remembered.

The plan asks for memlock unlimited and a 64 MiB stack (`emulator.planning.container.MPI_ULIMITS`). An engine
that may raise a hard limit (root with CAP_SYS_RESOURCE, as dockerd usually is) gives them; an engine
confined below them (dockerd in a sandbox whose own hard memlock is 8 MiB) refuses to start such a
container at all: runc's "error setting rlimits ... operation not permitted". A job must not fail for
a limit it may never need, so each ulimit is tried once in a throwaway container; one the engine
refuses is left to the engine's default, and the verdict is kept per engine address in the engine's
memory (backend/engine_memory.py: the state folder), so the 1-2 s probe is paid once per engine, not
per job, and a known verdict costs no call to the engine (a busy engine can take seconds to answer
any). The engine only reports what it refuses; whether that deserves a warning is the runner's call
(`emulator.run.runner.ulimit_warnings`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from emulator.backend.engine_memory import EngineMemory
from emulator.planning.container import Ulimit

# What runc says when the engine may not raise a limit (moby/runc libcontainer/init_linux.go).
REFUSED = "setting rlimit"
TABLE = "engine-ulimits.json"


def engine_key() -> str:
    """The engine's address, as docker-py's `from_env` picks it: DOCKER_HOST, else the default socket."""
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def cache_path(memory: EngineMemory | None = None) -> Path:
    return (memory or EngineMemory()).path(TABLE)


def _key(engine: str, ulimit: Ulimit) -> str:
    return f"{engine} {ulimit.name}={ulimit.soft}:{ulimit.hard}"


def refused(engine: str, wanted: Sequence[Ulimit], probe: Callable[[Sequence[Ulimit]], bool | None],
            memory: EngineMemory | None = None) -> set[Ulimit]:
    """The ulimits of `wanted` the engine at `engine` (`engine_key`) refuses. `probe(ulimits)` starts a
    container with them and says whether the engine accepted them (None: it could not tell, e.g. no
    image to try with: nothing is refused and nothing remembered). Known verdicts come from `memory`
    (None: the state folder's); when none is known, all are tried at once and, only if refused, one by one."""
    memory = memory or EngineMemory()
    verdicts = {k: v for k, v in memory.read(TABLE).items() if isinstance(v, bool)}
    unknown = [u for u in wanted if _key(engine, u) not in verdicts]
    if unknown and (together := probe(unknown)) is not None:
        if together or len(unknown) == 1:
            found: dict[Ulimit, bool | None] = dict.fromkeys(unknown, together)
        else:
            found = {u: probe([u]) for u in unknown}
        verdicts.update({_key(engine, u): ok for u, ok in found.items() if ok is not None})
        memory.write(TABLE, dict(verdicts))
    return {u for u in wanted if verdicts.get(_key(engine, u)) is False}
