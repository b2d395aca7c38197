"""The parts both engines over docker-py are built from (backend/docker.py: one machine; backend/swarm.py:
a swarm), each engine holding its own and neither a kind of the other:

- `connect` to an engine, `together` (an action on many items at once), `demultiplex` an output stream;
- `Tracker`: what a run created and has not removed yet, told to the watcher (backend/reaper.py);
- `exec_running`: a command in a running container, through whichever engine runs it;
- `probe_ulimits`: whether an engine starts a container with some ulimits (backend/ulimits.py);
- `lost_engine`: the error of an engine that stopped answering mid-job;
- `SharedMembers`: the members of the engine contract both engines have alike, each forwarded to one
  of those parts (a base of forwarding only: what an engine does is in its own class).
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, TypeVar

import docker
import docker.errors
import requests

from emulator.backend import ExecIO, Resource, ulimits
from emulator.backend.calls import first_line, interrupts_deferred
from emulator.backend.docker_http import raw_socket
from emulator.backend.docker_images import LocalImages
from emulator.backend.engine_memory import EngineMemory
from emulator.backend.liveness import current_driver
from emulator.backend.networks import NetworkStuck
from emulator.backend.reaper import Reaper
from emulator.errors import DockerUnavailable, EnvironmentProblem
from emulator.planning.container import Ulimit
from emulator.planning.hardware import Machine
from emulator.planning.plan import LABEL_DRIVER, Plan

# Enough to start 16 hosts at once without one thread per container on a 2-core machine; the engine
# serialises part of the work anyway.
START_WORKERS = 16
# Read size of a host's output stream: large reads keep the cost per byte low (a chatty host writes
# tens of MB/s); the engine delivers what is there, so a quiet host's line still arrives at once.
READ_SIZE = 1 << 20


def connect(timeout: float = 10, base_url: str | None = None) -> docker.DockerClient:
    """A client for the engine at `base_url` (tcp://, ssh://, unix://), else the one DOCKER_HOST (or the
    default socket) names, or DockerUnavailable."""
    try:
        if base_url is None:
            client = docker.from_env(timeout=int(timeout))
        else:
            client = docker.DockerClient(base_url=base_url, timeout=int(timeout), use_ssh_client=True)
        client.ping()
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as err:
        raise DockerUnavailable(
            f"no Docker engine answers: {first_line(err)}",
            hint="start the Docker daemon (systemctl start docker) or set DOCKER_HOST",
        ) from None
    return client


_Item = TypeVar("_Item")


def together(action: Callable[[_Item], object], items: Sequence[_Item]) -> None:
    """`action` on every item at once, from up to START_WORKERS threads; interrupted, the items not
    begun are dropped (once those under way are done) and the interrupt goes on."""
    pool = ThreadPoolExecutor(max_workers=max(1, min(START_WORKERS, len(items))))
    try:
        list(pool.map(action, items))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def lost_engine(err: BaseException) -> DockerUnavailable:
    """What a run says when its engine stops answering mid-job (exit code 3)."""
    return DockerUnavailable(f"the Docker engine stopped answering: {first_line(err)}",
                             hint="check the daemon; `hetero-emu clean` removes what is left")


class Tracker:
    """Per job, what the engine created and has not removed yet (id -> kind), and the job's watcher
    (backend/reaper.py) that removes it should the driver die. `environment()` is what the watcher's
    environment adds to this process's to reach the same engine."""

    def __init__(self, environment: Callable[[], dict[str, str]]) -> None:
        self._environment = environment
        self.reapers: dict[str, Reaper] = {}
        self.outstanding: dict[str, dict[str, str]] = {}

    @contextlib.contextmanager
    def guard(self, plan: Plan) -> Iterator[None]:
        """While open, a detached watcher knows every container and network this run creates; if the
        driver dies, or leaves the block with some of them not removed (the engine stopped
        answering), the watcher removes them."""
        try:
            reaper: Reaper | None = Reaper(Path(plan.job_dir) / "logs" / "reaper.log", self._environment())
        except OSError:
            reaper = None  # cannot fork: the run still tears down in its `finally`
        if reaper is not None:
            self.reapers[plan.job_name] = reaper
        self.outstanding[plan.job_name] = {}
        try:
            yield
        finally:
            self.reapers.pop(plan.job_name, None)
            left = self.outstanding.pop(plan.job_name, {})
            if reaper is not None:
                if left:
                    reaper.hand_over()
                else:
                    reaper.release()

    def track(self, plan: Plan, kind: str, ident: str) -> None:
        """Record what the engine created (called under interrupts_deferred with the create)."""
        self.outstanding.setdefault(plan.job_name, {})[ident] = kind
        reaper = self.reapers.get(plan.job_name)
        if reaper is not None:
            reaper.track(kind, ident)

    def untrack(self, plan: Plan, idents: Iterable[str]) -> None:
        outstanding = self.outstanding.get(plan.job_name, {})
        reaper = self.reapers.get(plan.job_name)
        for ident in idents:
            if outstanding.pop(ident, None) is not None and reaper is not None:
                reaper.forget(ident)

    def forget(self, plan: Plan) -> None:
        """The job's resources stay (--keep): neither the run nor the watcher removes them."""
        self.untrack(plan, list(self.outstanding.get(plan.job_name, {})))

    def remove(self, plan: Plan, remove_resources: Callable[[Iterable[Resource]], None], engine_lost: bool) -> None:
        """Remove what was recorded for the job with `remove_resources`: by the ids recorded, not by
        name, which covers a container whose create a Ctrl-C interrupted (the runner never learnt its
        name) and never touches one of the same name that another run created after this one's was
        removed by hand. An engine that stopped answering leaves it to the watcher."""
        if engine_lost:
            raise DockerUnavailable(
                f"could not remove the containers and network of job {plan.job_name}: the engine is not answering",
                hint="a watcher process removes them as soon as the engine answers again; "
                "`hetero-emu clean` does it by hand",
            )
        tracked = self.outstanding.get(plan.job_name, {})
        resources = [Resource(kind, ident, plan.job_name, {}) for ident, kind in tracked.items()]
        try:
            remove_resources(resources)
        except NetworkStuck:
            # Everything else is gone, and no retry removes a stuck network: the watcher is not
            # left retrying it for ten minutes (the runner says what is left, and the fix, at once).
            self.untrack(plan, [r.name for r in resources])
            raise
        self.untrack(plan, [r.name for r in resources])


class SharedMembers:
    """What both engines hold alike: this machine's engine (`client`, connected on first use) and its
    images (`images`: backend/docker_images.py), what each run created (`Tracker`: its watcher reaches
    the engine with `reaper_environment()`), where the engine keeps what it learns (`memory`: the state folder by
    default), the streams that broke, and whether the engine stopped answering."""

    def __init__(self, client: docker.DockerClient | None, memory: EngineMemory | None) -> None:
        self._client = client
        self._memory = memory or EngineMemory()
        # The image capability (backend/images.py): this machine's engine's images, for both engines.
        self.images = LocalImages(lambda: self.client)
        self._tracker = Tracker(self.reaper_environment)
        self.stream_errors: dict[str, str] = {}
        # Set once the engine stopped answering mid-job: removal is then left to the watcher
        # instead of waiting for one timeout per container.
        self._engine_lost = False
        self._driver = current_driver()

    @property
    def client(self) -> docker.DockerClient:
        """This machine's engine (DOCKER_HOST or the default socket)."""
        if self._client is None:
            self._client = connect()
        return self._client

    def reaper_environment(self) -> dict[str, str]:
        """What the watcher's environment adds to this process's to reach the same engine."""
        return {}

    def machine(self) -> Machine:
        """The engine's cores and memory (`docker info`), and the GPUs its GPU runtime can give."""
        try:
            info = self.client.info()
        except (docker.errors.APIError, requests.exceptions.RequestException) as err:
            raise self._lost_engine(err) from None
        return machine_of(info, shutil.which, _list_gpus)

    def guard(self, plan: Plan) -> AbstractContextManager[None]:
        return self._tracker.guard(plan)

    def keep(self, plan: Plan) -> None:
        """Leave the job's resources in place: the watcher forgets them (see guard)."""
        self._tracker.forget(plan)

    def _track(self, plan: Plan, kind: str, ident: str) -> None:
        self._tracker.track(plan, kind, ident)

    def _untrack(self, plan: Plan, idents: Iterable[str]) -> None:
        self._tracker.untrack(plan, idents)

    def _lost_engine(self, err: BaseException) -> DockerUnavailable:
        """Mark the engine lost (teardown then leaves removal to the watcher) and say so."""
        self._engine_lost = True
        return lost_engine(err)


def machine_of(info: Mapping[str, Any], which: Callable[[str], str | None],
               list_gpus: Callable[[], tuple[str, ...]]) -> Machine:
    """The Machine `docker info` describes. A GPU runtime: NVIDIA's registered with the engine
    (`nvidia-ctk runtime configure` adds `nvidia` to its Runtimes) or its hook on PATH, which Docker's
    `--gpus` runs under the default runtime. The GPUs are then the ones this machine's nvidia-smi
    lists, by index (the ids `docker run --gpus '"device=0,1"'` takes): an engine elsewhere
    (DOCKER_HOST on another machine) is not asked."""
    runtime = "nvidia" in (info.get("Runtimes") or {}) or which("nvidia-container-runtime-hook") is not None
    return Machine(int(info.get("NCPU") or os.cpu_count() or 1), int(info.get("MemTotal") or 0),
                   gpu_runtime=runtime, gpus=list_gpus() if runtime else ())


def _list_gpus() -> tuple[str, ...]:
    """This machine's GPUs by index, as its nvidia-smi lists them; none when it cannot."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    return tuple(line.strip() for line in out.splitlines() if line.strip().isdigit())


def probe_ulimits(api: docker.APIClient, plan: Plan, wanted: Sequence[Ulimit], driver: str,
                  tracker: Tracker) -> bool | None:
    """Whether the engine of `api` starts a container of the job's image with these ulimits (a
    throwaway `true`, no network; tracked like the job's containers, so a Ctrl-C leaves nothing
    behind). An image without `true` fails after the limits are set: that counts as accepted. None
    when no container could be made (no such image): no verdict."""
    with interrupts_deferred():
        try:
            created = api.create_container(
                plan.image, entrypoint=["true"], command=[], labels={**plan.labels, LABEL_DRIVER: driver},
                host_config=api.create_host_config(
                    network_mode="none", ulimits=[docker.types.Ulimit(name=u.name, soft=u.soft, hard=u.hard)
                                                  for u in wanted],
                    log_config=docker.types.LogConfig(type=docker.types.LogConfig.types.NONE)),
            )
        except docker.errors.APIError:
            return None  # not a verdict on the limits: the job's own create will say what is wrong
        tracker.track(plan, "container", created["Id"])
    try:
        api.start(created["Id"])
        api.wait(created["Id"], timeout=60)
        return True
    except docker.errors.APIError as err:
        return ulimits.REFUSED not in str(err)
    finally:
        with contextlib.suppress(docker.errors.APIError, requests.exceptions.RequestException):
            api.remove_container(created["Id"], force=True)
            tracker.untrack(plan, [created["Id"]])


def exec_running(api: docker.APIClient, name: str, command: Sequence[str], io: ExecIO) -> int:
    """`docker exec` of `command` in the running container `name` of the engine `api` talks to; its
    output streamed to `io`, its exit code returned."""
    try:
        ident = api.exec_create(name, list(command), stdin=io.tty, tty=io.tty)["Id"]
        attached = api.exec_start(ident, tty=io.tty, socket=True)
    except docker.errors.APIError as err:
        raise EnvironmentProblem(f"cannot run {command[0]!r} in {name}: {first_line(err)}") from None
    raw = raw_socket(attached)
    raw.settimeout(None)  # a command may be quiet for longer than the client's timeout
    if io.tty and io.size:
        with contextlib.suppress(docker.errors.APIError):
            api.exec_resize(ident, height=io.size[0], width=io.size[1])
    try:
        pump_exec(raw, io)
    finally:
        close_quietly(raw)
        with contextlib.suppress(Exception):
            attached.close()
    # The stream ends a moment before the engine records the exit code.
    deadline = time.monotonic() + 10
    while True:
        found = api.exec_inspect(ident)
        if not found.get("Running") or time.monotonic() > deadline:
            return int(found.get("ExitCode") or 0)
        time.sleep(0.05)


def pump_exec(sock: socket.socket, io: ExecIO) -> None:
    """Copy a command's output to `io` until it ends; with a TTY, `io.stdin` goes to it meanwhile (one
    raw stream each way); without, the stream carries stdout and stderr in frames (demultiplex)."""
    if not io.tty:
        def deliver(chunk: bytes, stream: int) -> None:
            out = io.stderr if stream == 2 else io.stdout
            out.write(chunk)
            out.flush()

        with contextlib.suppress(OSError):
            demultiplex_socket(sock, deliver)
        return
    done = threading.Event()
    forwarder = None
    if io.stdin is not None:
        fd = io.stdin.fileno()

        def forward() -> None:
            # The file descriptor, unbuffered, polled: a thread blocked in a read of the terminal
            # would keep the stdin object's lock at exit (a fatal error at interpreter shutdown).
            with contextlib.suppress(OSError, ValueError):
                while not done.is_set():
                    if select.select([fd], [], [], 0.1)[0]:
                        data = os.read(fd, 4096)
                        if not data:
                            return
                        sock.sendall(data)

        forwarder = threading.Thread(target=forward, name="exec-stdin", daemon=True)
        forwarder.start()
    try:
        with contextlib.suppress(OSError):
            while data := sock.recv(READ_SIZE):
                io.stdout.write(data)
                io.stdout.flush()
    finally:
        done.set()
        if forwarder is not None:
            forwarder.join(1)


def demultiplex_socket(sock: socket.socket, deliver: Callable[[bytes, int], None]) -> None:
    """Read an attached stream to its end (see `demultiplex`)."""
    demultiplex(iter(lambda: sock.recv(READ_SIZE), b""), deliver)


def demultiplex(chunks: Iterable[bytes], deliver: Callable[[bytes, int], None]) -> None:
    """Split a multiplexed output stream, read as `chunks` of any size: frames of an 8-byte header
    (stream: 1 stdout, 2 stderr; 3 zero bytes; big-endian payload length) and the payload
    (https://docs.docker.com/engine/api/v1.41/#operation/ContainerAttach; a service's logs come the
    same way). Consecutive frames of one stream are delivered as one chunk, in order."""
    buf = bytearray()
    for data in chunks:
        buf += data
        pos, current = 0, 0
        parts: list[bytes] = []
        while len(buf) - pos >= 8:
            size = int.from_bytes(buf[pos + 4:pos + 8], "big")
            if len(buf) - pos - 8 < size:
                break  # the rest of this frame is in the next read
            stream = 2 if buf[pos] == 2 else 1
            if stream != current and parts:
                deliver(b"".join(parts), current)
                parts = []
            current = stream
            parts.append(bytes(buf[pos + 8:pos + 8 + size]))
            pos += 8 + size
        if parts:
            deliver(b"".join(parts), current)
        del buf[:pos]


def close_quietly(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)  # wakes a reader blocked in recv on this socket
    with contextlib.suppress(OSError):
        sock.close()
