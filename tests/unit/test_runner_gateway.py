"""The job's AWS gateway in the run (emulator/run/runner.py, emulator/run/job_aws.py), against the
in-memory FakeBackend: on an engine that fixes addresses at create (Docker's) the gateway is made and
started beside the hosts, whose start-up hook waits for it; on one that tells an address only once a
container runs (a swarm's) it runs before the hosts are made; a gateway that does not start is said
in one warning either way, and the job goes on."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_backend import FakeBackend, HostScript, exits, runs_until_stopped

from emulator.backend import Capabilities
from emulator.jobspec import load_spec_file
from emulator.options import RunOptions
from emulator.planning import hooks
from emulator.reports.console import RecordingReporter
from emulator.result import JobResult
from emulator.run import job_aws, runner
from emulator.run.job_gateway import READY
from emulator.run.runner import run_job

JOB = "gw-job"
HOSTS = [f"{JOB}-algo-1", f"{JOB}-algo-2"]
GATEWAY = f"{JOB}-{job_aws.GATEWAY_HOST}"
SPEC = f"""\
job_name: {JOB}
entry_point: train.py
source_dir: code
instance_groups:
  - {{instance_group_name: a, instance_type: ml.c5.xlarge, instance_count: 1}}
  - {{instance_group_name: b, instance_type: ml.c5.xlarge, instance_count: 1}}
output_path: out
max_run: 60
"""


@pytest.fixture(autouse=True)
def fast_polling(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "POLL_SECONDS", 0.01)


def run(tmp_path: Path, gateway: HostScript, swarm: bool = False) -> tuple[JobResult, RecordingReporter, FakeBackend]:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print('hi')\n")
    (tmp_path / "job.yaml").write_text(SPEC)
    fake = FakeBackend({"algo-1": exits(0, after=0.05), "algo-2": exits(0, after=0.05),
                        job_aws.GATEWAY_HOST: gateway})
    fake.capabilities = Capabilities(aws_gateway=True, aws_socket_in_job_folder=swarm, addresses_once_running=swarm)
    reporter = RecordingReporter()

    @contextlib.contextmanager
    def endpoint(root: Path, region: str, folder: Path) -> Iterator[Path]:
        folder.mkdir(parents=True, exist_ok=True)  # as the real one makes it, with its socket
        yield folder  # no host calls AWS here: nothing answers on the socket

    result = run_job(load_spec_file(tmp_path / "job.yaml"), RunOptions(grace=2.5), backend=fake, reporter=reporter,
                     aws_endpoint=endpoint)
    return result, reporter, fake


def test_the_gateway_is_made_beside_the_hosts_and_started_with_them(tmp_path: Path) -> None:
    result, reporter, fake = run(tmp_path, runs_until_stopped(logs=[f"{READY}\n"]))
    assert result.status == "Completed", result.failure_reason
    assert not [w for w in reporter.warnings if "AWS" in w]
    assert sorted(fake.created) == sorted([GATEWAY, *HOSTS])  # once each: the hosts were not made again
    assert sorted(fake.start_calls) == sorted([(GATEWAY,), tuple(HOSTS)])
    for host in ("algo-1", "algo-2"):  # the AWS files and the start-up hook that waits for the gateway
        assert {job_aws.HOSTS_TARGET, hooks.TARGET} <= set(fake.mounts_seen[host])


def test_a_gateway_that_ends_at_once_is_said_and_the_hosts_run_on(tmp_path: Path) -> None:
    result, reporter, fake = run(tmp_path, exits(127, logs=["[FATAL tini (7)] exec python3 failed\n"]))
    assert result.status == "Completed", result.failure_reason
    said = [w for w in reporter.warnings if "AWS inside the job is not available" in w]
    assert len(said) == 1 and "exec python3 failed" in said[0]
    assert sorted(fake.created) == sorted([GATEWAY, *HOSTS])  # started already: not made again
    log = Path(result.job_dir) / job_aws.FOLDER / job_aws.GATEWAY_LOG
    assert "exec python3 failed" in log.read_text()


def test_on_a_swarm_the_gateway_runs_before_the_hosts_start(tmp_path: Path) -> None:
    result, reporter, fake = run(tmp_path, runs_until_stopped(logs=[f"{READY}\n"]), swarm=True)
    assert result.status == "Completed", result.failure_reason
    assert fake.start_calls == [(GATEWAY,), tuple(HOSTS)]


def test_on_a_swarm_a_gateway_that_does_not_start_leaves_hosts_made_again_without_aws(tmp_path: Path) -> None:
    result, reporter, fake = run(tmp_path, exits(1, logs=["cannot reach the job's endpoint\n"]), swarm=True)
    assert result.status == "Completed", result.failure_reason
    assert any("AWS inside the job is not available" in w for w in reporter.warnings)
    assert fake.start_calls[-1] == tuple(HOSTS)
    for host in ("algo-1", "algo-2"):  # made again: without the AWS files
        assert job_aws.HOSTS_TARGET not in fake.mounts_seen[host]


def test_the_imports_a_run_starts_ahead_are_waited_for_at_exit(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that fails at once (here: the engine does not answer) ends the process while the thread
    importing cryptography for the job's certificates may still be in its native code; as a daemon
    thread it was cut there at the interpreter's end and the process aborted ("FATAL: exception not
    rethrown", exit -6 instead of 3, one in three under load). The preloads are not daemons."""
    import threading

    from emulator.errors import DockerUnavailable

    started: list[threading.Thread] = []
    real_start = threading.Thread.start

    def recording_start(self: threading.Thread) -> None:
        started.append(self)
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", recording_start)
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print('hi')\n")
    (tmp_path / "job.yaml").write_text(SPEC)
    fake = FakeBackend({})
    fake.capabilities = Capabilities(aws_gateway=True)
    fake.engine_up = False

    @contextlib.contextmanager
    def endpoint(root: Path, region: str, folder: Path) -> Iterator[Path]:
        yield folder

    with pytest.raises(DockerUnavailable):
        run_job(load_spec_file(tmp_path / "job.yaml"), RunOptions(), backend=fake, reporter=RecordingReporter(),
                aws_endpoint=endpoint)
    preloads = [t for t in started if t.name.startswith("preload-")]
    assert preloads and not any(t.daemon for t in preloads)
    for thread in preloads:
        thread.join(10)
