"""Is the driver that made a container still running? (backend/liveness.py), and what `clean` does with
the answer: by default it removes only what a gone driver left, and leaves a job another driver is
running now alone.

Liveness is checked against real processes of this machine (this one, a `sleep` started and killed
here); `clean` runs in-process with typer's CliRunner and a fake DockerBackend, no engine.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from emulator.backend import Resource, liveness
from emulator.backend.liveness import current_driver, driver_alive
from emulator.cli import app
from emulator.planning.plan import LABEL_DRIVER, LABEL_JOB, LABEL_MANAGED

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc (Linux)")


def naive_start_ticks(pid: int) -> int:
    """Field 22 of /proc/<pid>/stat, for a process whose command name has no spaces or parentheses."""
    return int(Path(f"/proc/{pid}/stat").read_text().split()[21])


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "30"])
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def identity(pid: int, ticks: str | int, host: str | None = None) -> str:
    return f"{host or this_machine()}/{pid}/{ticks}"


def this_machine() -> str:
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    return f"{socket.gethostname()}@{boot}"


# ---------------------------------------------------------------------------------------------------
# driver_alive


def test_this_process_is_a_live_driver() -> None:
    me = current_driver()
    host, pid, ticks = me.split("/")
    assert (host, pid) == (this_machine(), str(os.getpid()))
    assert ticks == str(naive_start_ticks(os.getpid()))
    assert driver_alive(me) is True


def test_a_driver_that_exited_is_not_alive(sleeper: subprocess.Popen[bytes]) -> None:
    who = identity(sleeper.pid, naive_start_ticks(sleeper.pid))
    assert driver_alive(who) is True  # while it runs
    sleeper.kill()
    sleeper.wait()  # reaped: /proc/<pid> is gone
    assert driver_alive(who) is False


def test_a_process_that_exited_at_once_is_not_alive() -> None:
    proc = subprocess.Popen(["true"])
    assert proc.wait() == 0
    # Whatever start time was recorded for it, no process holds its pid now.
    assert not Path(f"/proc/{proc.pid}").exists()
    assert driver_alive(identity(proc.pid, naive_start_ticks(os.getpid()))) is False


def test_a_reused_pid_with_another_start_time_is_not_the_driver() -> None:
    ticks = naive_start_ticks(os.getpid())
    assert driver_alive(identity(os.getpid(), ticks)) is True
    assert driver_alive(identity(os.getpid(), ticks + 1)) is False
    assert driver_alive(identity(os.getpid(), ticks - 1)) is False
    assert driver_alive(identity(os.getpid(), "?")) is False  # recorded where /proc was unreadable


def test_a_driver_of_an_earlier_boot_of_this_machine_is_gone() -> None:
    # After a reboot pids start over: the same pid and ticks may belong to a new process.
    earlier = f"{socket.gethostname()}@00000000-0000-0000-0000-000000000000"
    assert driver_alive(identity(os.getpid(), naive_start_ticks(os.getpid()), host=earlier)) is False


def test_a_driver_of_another_machine_cannot_be_told() -> None:
    other = socket.gethostname() + "-elsewhere"
    assert driver_alive(identity(os.getpid(), naive_start_ticks(os.getpid()), host=other)) is None


@pytest.mark.parametrize("label", ["", None])
def test_no_recorded_driver_means_nobody_is_running_it(label: str | None) -> None:
    assert driver_alive(label) is False
    resource = Resource("container", "old-algo-1", "old", {}, driver_alive=driver_alive(label))
    assert resource.orphaned is True


@pytest.mark.parametrize("label", ["garbage", f"{socket.gethostname()}/not-a-pid/123", f"{socket.gethostname()}"])
def test_a_malformed_identity_cannot_be_told(label: str) -> None:
    assert driver_alive(label) is None


def test_without_proc_nothing_can_be_told(monkeypatch: pytest.MonkeyPatch) -> None:
    me = current_driver()
    monkeypatch.setattr(liveness, "Path", lambda _path: SimpleNamespace(exists=lambda: False))
    assert driver_alive(me) is None


def test_start_time_is_read_after_a_command_name_with_spaces_and_parentheses(tmp_path: Path) -> None:
    sleep = shutil.which("sleep")
    assert sleep is not None
    odd = tmp_path / "a) 1 2 (b c"  # the command name (field 2) is the program's file name
    odd.symlink_to(sleep)
    before = subprocess.Popen(["sleep", "30"])
    weird = subprocess.Popen([str(odd), "30"])
    after = subprocess.Popen(["sleep", "30"])
    try:
        assert "a) 1 2 (b c" in Path(f"/proc/{weird.pid}/stat").read_text()
        ticks = liveness._start_ticks(weird.pid)
        assert ticks is not None and ticks.isdigit()
        assert naive_start_ticks(before.pid) <= int(ticks) <= naive_start_ticks(after.pid)
        assert driver_alive(identity(weird.pid, ticks)) is True
    finally:
        for proc in (before, weird, after):
            proc.kill()
            proc.wait()


def test_resource_orphaned_only_when_the_driver_is_known_to_be_gone() -> None:
    def resource(alive: bool | None) -> Resource:
        return Resource("network", "n", "job", {}, driver_alive=alive)

    assert resource(False).orphaned is True
    assert resource(True).orphaned is False
    assert resource(None).orphaned is False  # another machine: maybe running


# ---------------------------------------------------------------------------------------------------
# `hetero-emu clean` (a fake DockerBackend: find / remove_resources)


def managed(kind: str, name: str, job: str, alive: bool | None) -> Resource:
    labels = {LABEL_MANAGED: "true", LABEL_JOB: job, LABEL_DRIVER: "somewhere/1/1"}
    return Resource(kind, name, job, labels, "running" if kind == "container" else "", driver_alive=alive)


DEAD = [managed("container", "dead-job-algo-1", "dead-job", False),
        managed("container", "dead-job-algo-2", "dead-job", False),
        managed("network", "hetero-emu-dead-job", "dead-job", False)]
LIVE = [managed("container", "live-job-algo-1", "live-job", True),
        managed("network", "hetero-emu-live-job", "live-job", True)]
FAR = [managed("container", "far-job-algo-1", "far-job", None)]  # made on another machine


class FakeDocker:
    """Stands in for emulator.backend.docker.DockerBackend in `clean`."""

    resources: list[Resource] = []
    removed: list[list[Resource]] = []

    def find(self, job: str | None = None) -> list[Resource]:
        return [r for r in self.resources if job in (None, r.job)]

    def remove_resources(self, resources: Iterable[Resource]) -> None:
        type(self).removed.append(list(resources))


@pytest.fixture
def docker(monkeypatch: pytest.MonkeyPatch) -> type[FakeDocker]:
    from emulator.backend import docker as docker_module

    FakeDocker.resources = [*DEAD, *LIVE, *FAR]
    FakeDocker.removed = []
    monkeypatch.setattr(docker_module, "DockerBackend", FakeDocker)
    return FakeDocker


def clean(*args: str) -> Any:
    result = CliRunner().invoke(app, ["clean", *args])
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def removed_names(docker: type[FakeDocker]) -> list[str]:
    assert len(docker.removed) == 1, "remove_resources must be called once"
    return sorted(r.name for r in docker.removed[0])


def test_clean_removes_only_what_a_gone_driver_left(docker: type[FakeDocker]) -> None:
    result = clean()
    assert removed_names(docker) == sorted(r.name for r in DEAD)
    assert "removed 2 container(s) and 1 network(s)" in result.output
    assert "left alone, a driver is running them: far-job, live-job" in result.output


def test_clean_all_removes_live_jobs_too(docker: type[FakeDocker]) -> None:
    result = clean("--all")
    assert removed_names(docker) == sorted(r.name for r in [*DEAD, *LIVE, *FAR])
    assert "left alone" not in result.output


def test_clean_job_removes_that_job_even_while_its_driver_runs(docker: type[FakeDocker]) -> None:
    clean("--job", "live-job")
    assert removed_names(docker) == sorted(r.name for r in LIVE)


def test_clean_json_lists_removed_and_skipped_running_jobs(docker: type[FakeDocker]) -> None:
    doc = json.loads(clean("--json").stdout)
    assert sorted(doc["removed"], key=lambda r: r["name"]) == sorted(
        ({"kind": r.kind, "name": r.name, "job": r.job} for r in DEAD), key=lambda r: r["name"])
    assert doc["skipped_running_jobs"] == ["far-job", "live-job"]
    assert json.loads(clean("--all", "--json").stdout)["skipped_running_jobs"] == []


def test_clean_with_nothing_to_do(docker: type[FakeDocker]) -> None:
    docker.resources = []
    result = clean()
    assert removed_names(docker) == []
    assert "removed 0 container(s) and 0 network(s)" in result.output

