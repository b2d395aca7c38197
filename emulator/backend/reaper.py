"""A watcher process that removes what a run created when the driver cannot (Testcontainers' Ryuk idea).

The driver starts it detached (its own session, so a Ctrl-C in the terminal does not reach it) and
tells it, over a pipe on its stdin, the id of every container and network it creates:

    container <id>      service <id>      network <id>      forget <id>      done      reap

`done` means the driver removed everything itself: the watcher exits. If the pipe closes without
`done` (the driver was SIGKILLed, crashed, or its machine session ended) or the driver sends `reap`
(it lost the engine and could not remove its resources), the watcher removes exactly the ids it was
given, retrying until the engine answers again or REAP_PATIENCE runs out.

Why a host process and not a container like Ryuk: no image can be pulled here, the job's own image
may have no Docker client, and mounting the Docker socket into a container is what isolation forbids.
The limit: a watcher killed together with the driver (e.g. `kill -9` of the whole process group in
its session) cannot help; `hetero-emu clean` finds anything left by its labels.

Run as `python -m emulator.backend.reaper LOGFILE`; only the driver starts it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from emulator.backend.networks import NetworkStuck, StuckNetworks
from emulator.backend.networks import remove_network as remove_job_network

# How long a watcher keeps trying to reach an engine that stopped answering before it gives up.
REAP_PATIENCE = 600.0


class Reaper:
    """The driver's end of the pipe. Writes are best effort: a watcher that died cannot be helped."""

    def __init__(self, log_path: Path, environment: Mapping[str, str] | None = None) -> None:
        self._proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            [sys.executable, "-m", "emulator.backend.reaper", str(log_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            # "/" so that a `docker/` folder in the user's working directory cannot shadow docker-py;
            # the package's own folder first on the path, so the watcher finds emulator even when it
            # is importable only from the driver's working directory (a source checkout).
            cwd="/",
            # `environment`: where the engine is (a swarm manager's DOCKER_HOST) when not in os.environ.
            env={**os.environ, **(environment or {}), "PYTHONPATH": os.pathsep.join(
                [str(Path(__file__).resolve().parents[2]), *filter(None, [os.environ.get("PYTHONPATH")])])},
        )

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def track(self, kind: str, ident: str) -> None:
        self._send(f"{kind} {ident}\n")

    def forget(self, ident: str) -> None:
        """The driver removed it itself (e.g. the network it creates to learn a free subnet)."""
        self._send(f"forget {ident}\n")

    def release(self) -> None:
        """Everything tracked is gone: let the watcher exit."""
        self._finish("done\n", wait=True)

    def hand_over(self) -> None:
        """The driver could not remove what it tracked: the watcher keeps trying after we exit."""
        self._finish("reap\n", wait=False)

    def _send(self, line: str) -> None:
        if self._proc is None or self._proc.stdin is None:
            return
        try:
            self._proc.stdin.write(line.encode())
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self._proc.stdin = None

    def _finish(self, line: str, wait: bool) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            with contextlib.suppress(BrokenPipeError, OSError):
                proc.stdin.write(line.encode())
                proc.stdin.close()
        if wait:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)


def read_orders(stream: Iterable[str]) -> tuple[bool, list[str], list[str]]:
    """(reap?, container ids, network ids) from the driver's lines; reap unless it said `done`. A
    swarm service is a host's container here (`service:<id>`), removed the same way by its kind."""
    containers: list[str] = []
    networks: list[str] = []
    for raw in stream:
        kind, _, ident = raw.strip().partition(" ")
        if kind == "done":
            return False, containers, networks
        if kind == "reap":
            break
        if kind == "container" and ident:
            containers.append(ident)
        elif kind == "service" and ident:
            containers.append(f"service:{ident}")
        elif kind == "network" and ident:
            networks.append(ident)
        elif kind == "forget":
            containers = [c for c in containers if c not in (ident, f"service:{ident}")]
            networks = [n for n in networks if n != ident]
    return True, containers, networks


def reap(
    containers: list[str],
    networks: list[str],
    remove_container: Callable[[str], None],
    remove_network: Callable[[str], None],
    log: Callable[[str], None],
    patience: float = REAP_PATIENCE,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> bool:
    """Remove containers first (a network with endpoints cannot go), then networks; retry failures.

    The callables raise LookupError for "already gone" (success), NetworkStuck for a network no retry
    can remove (given up at once), and any other exception for "try again". Returns True when
    everything is gone.
    """
    pending = [("container", c) for c in containers] + [("network", n) for n in networks]
    stuck = False
    deadline = clock() + patience
    delay = 0.5
    last = ""
    while pending:
        still: list[tuple[str, str]] = []
        for kind, ident in pending:
            try:
                (remove_container if kind == "container" else remove_network)(ident)
                log(f"removed {kind} {ident[:12]}")
            except LookupError:
                log(f"removed {kind} {ident[:12]} (already gone)")
            except NetworkStuck as err:
                # No retry can remove it (backend/networks.py): said now, not after the patience.
                stuck = True
                log(f"left {kind} {ident[:12]}: {err.message}; {err.hint}")
            except Exception as err:  # noqa: BLE001 - any engine trouble means "later"
                still.append((kind, ident))
                previous = last
                last = f"{kind} {ident[:12]}: {str(err).splitlines()[0] if str(err) else type(err).__name__}"
                if last != previous:
                    log(f"will retry {last}")
        pending = still
        if pending:
            if clock() + delay > deadline:
                log(f"gave up after {patience:g} s; left: {', '.join(i[:12] for _, i in pending)} ({last}); "
                    "run `hetero-emu clean`")
                return False
            sleep(delay)
            delay = min(delay * 2, 10.0)
    return not stuck


def _docker_removers() -> tuple[Callable[[str], None], Callable[[str], None]]:
    import docker
    import docker.errors

    api: Any = None

    def client() -> Any:
        nonlocal api
        if api is None:
            api = docker.APIClient(**docker.utils.kwargs_from_env(), timeout=10)
        return api

    def stopping(service: str) -> bool:
        # Listed unfiltered: the engine's `service` filter refuses a service that no longer exists.
        return any(t.get("ServiceID") == service for t in client().tasks())

    def remove_container(ident: str) -> None:
        _, _, service = ident.partition("service:")
        try:
            if service:
                client().remove_service(service)
            else:
                client().remove_container(ident, force=True, v=True)
        except docker.errors.NotFound:
            if not (service and stopping(service)):
                raise LookupError(ident) from None
        # The job's network can go only once the service's tasks are gone from their nodes.
        if service and stopping(service):
            raise RuntimeError(f"the tasks of service {service[:12]} are still stopping")

    def remove_network(ident: str) -> None:
        if not remove_job_network(client(), ident, StuckNetworks(client()), docker.errors.NotFound):
            raise LookupError(ident)

    return remove_container, remove_network


def main(argv: list[str], stdin: IO[str]) -> int:
    log_path = Path(argv[1]) if len(argv) > 1 else None
    must_reap, containers, networks = read_orders(stdin)
    if not must_reap or not (containers or networks):
        return 0

    def log(message: str) -> None:
        if log_path is None:
            return
        stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
        with contextlib.suppress(OSError), log_path.open("a") as f:
            f.write(f"{stamp} reaper (pid {os.getpid()}): {message}\n")

    log(f"the driver is gone or lost the engine: removing {len(containers)} containers, {len(networks)} networks")
    remove_container, remove_network = _docker_removers()
    return 0 if reap(containers, networks, remove_container, remove_network, log) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv, sys.stdin))
