"""Engines by name. Every front end (the CLI, the Python API, the SDK session and the pytest plugin)
asks `engine(name)` through `emulator.api`; none constructs a backend itself, so a second
engine is one `register` call, with no front end touched (the shape of kind's
`cluster.NewProvider(...)` and torchx's scheduler registry). What an engine must and may have:
`emulator.backend`.
"""

from __future__ import annotations

from collections.abc import Callable

from emulator.backend import Backend
from emulator.defaults import DEFAULT_ENGINE
from emulator.errors import UsageError

_FACTORIES: dict[str, Callable[[], Backend]] = {}


def register(name: str, factory: Callable[[], Backend]) -> None:
    """Make `factory` the engine called `name` (a later registration of the name replaces it)."""
    _FACTORIES[name] = factory


def names() -> list[str]:
    return sorted(_FACTORIES)


def engine(name: str = DEFAULT_ENGINE) -> Backend:
    """A new backend of the engine called `name`, or a UsageError listing the known ones."""
    factory = _FACTORIES.get(name)
    if factory is None:
        raise UsageError(f"unknown engine {name!r}", hint=f"known engines: {', '.join(names())}")
    return factory()


def _docker() -> Backend:
    # Imported on use: docker-py is only needed by commands that talk to the engine.
    from emulator.backend.docker import DockerBackend

    return DockerBackend()


def _swarm() -> Backend:
    from emulator.backend.swarm import SwarmBackend

    return SwarmBackend()


register("docker", _docker)
register("swarm", _swarm)
