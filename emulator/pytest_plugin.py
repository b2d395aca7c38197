"""The pytest plugin: a `hetero_emu` fixture that runs a training job in a test and hands back what it
left (per-host exit codes and logs, the model and output files), a few lines over `emulator.api`.

Registered through the `pytest11` entry point (pyproject.toml), so installing the package is enough.
Loading it defines two fixtures and one option and does nothing else: the engine is asked only when a
test uses the fixture, once per session. Without an engine those tests skip, naming the reason, or
fail with `--hetero-emu-require-docker` (ini `hetero_emu_require_docker`, or EMULATOR_REQUIRE_DOCKER=1),
so a CI run cannot go green by skipping every job.

Every run gets a job name of its own (the test's name, the pytest-xdist worker, a per-session token
and a counter) and writes under the test's tmp_path: container names, networks, job folders and the
record of jobs run never collide between tests, parallel workers or two sessions on one engine.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import secrets
import tarfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from emulator import api
from emulator.defaults import DEFAULT_ENGINE, DEFAULT_IMAGE
from emulator.errors import EmulatorError, EnvironmentProblem
from emulator.job import Job
from emulator.jobspec import JobSpec
from emulator.options import RunOptions
from emulator.reports.console import Reporter
from emulator.result import HostResult, JobResult, Status

REQUIRE_OPTION = "--hetero-emu-require-docker"
REQUIRE_INI = "hetero_emu_require_docker"
# The project's CI variable (tests/conftest.py reads it too): without an engine, fail instead of skip.
REQUIRE_ENV = "EMULATOR_REQUIRE_DOCKER"
QUIET_SECONDS = 2.0  # an image check shorter than this prints nothing


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("hetero-emu", "hetero-emu: SageMaker training jobs in local containers")
    group.addoption(REQUIRE_OPTION, action="store_true", default=False,
                    help="fail (instead of skip) the tests using the hetero_emu fixture when no engine answers")
    parser.addini(REQUIRE_INI, type="bool", default=False,
                  help=f"as {REQUIRE_OPTION}: fail instead of skip when no engine answers")


def engine_required(config: pytest.Config) -> bool:
    return bool(config.getoption(REQUIRE_OPTION) or config.getini(REQUIRE_INI)
                or os.environ.get(REQUIRE_ENV) == "1")


def job_name_for(test_name: str, worker: str, token: str, count: int) -> str:
    """A SageMaker job name (letters, digits, hyphens; at most 63 characters) from the test's name,
    the xdist worker ("gw0"; "" outside xdist), the session's token and the run's number."""
    suffix = "-".join(part for part in (worker, token, str(count)) if part)
    stem = re.sub(r"[^a-zA-Z0-9]+", "-", test_name).strip("-") or "test"
    return f"{stem[: 62 - len(suffix)].rstrip('-')}-{suffix}"


@dataclass(frozen=True)
class HostRun:
    """One host of a finished job: its group, instance type, exit code and log."""

    name: str
    group: str
    instance_type: str
    exit_code: int | None
    failure_reason: str | None
    seconds: float
    job_dir: Path = field(repr=False)

    @classmethod
    def of(cls, host: HostResult, job_dir: Path) -> HostRun:
        return cls(host.host, host.group, host.instance_type, host.exit_code, host.failure_reason, host.seconds,
                   job_dir)

    @property
    def log_path(self) -> Path:
        return self.job_dir / "logs" / f"{self.name}.log"

    @property
    def log(self) -> str:
        """Everything the host wrote to stdout and stderr (logs/algo-N.log; bytes that are not UTF-8
        replaced)."""
        return self.log_path.read_bytes().decode("utf-8", errors="replace")

    @property
    def opt_ml(self) -> Path:
        """The host's /opt/ml as the job left it (input/config, model, output, checkpoints)."""
        return self.job_dir / "hosts" / self.name


@dataclass(repr=False)
class TrainingRun:
    """A finished job as a test sees it: `status`, `exit_code` (`hetero-emu run`'s: 0 Completed, 1
    Failed, 130 Stopped), `hosts["algo-2"].log` (each host by name, in host order), `model` and
    `output` (folders of the artifacts' files, unpacked on first use), `describe()` (job.json). The
    emulator's whole JobResult is `result`."""

    result: JobResult
    unpack_dir: Path
    job_name: str = field(init=False)
    status: Status = field(init=False)
    exit_code: int = field(init=False)
    failure_reason: str | None = field(init=False)
    # The host whose failure failed the job, `algo-2 (data_group)` (FailureReason names no host, as
    # the service's does not).
    failed_host: str | None = field(init=False)
    job_dir: Path = field(init=False)
    hosts: dict[str, HostRun] = field(init=False)
    _unpacked: dict[str, Path] = field(default_factory=dict)

    def __post_init__(self) -> None:
        r = self.result
        self.job_name, self.status, self.exit_code = r.job_name, r.status, r.exit_code
        self.failure_reason, self.failed_host, self.job_dir = r.failure_reason, r.failed_host, r.job_dir
        self.hosts = {h.host: HostRun.of(h, r.job_dir) for h in r.hosts}

    @property
    def model(self) -> Path:
        """A folder holding the model files: model.tar.gz unpacked (every host's /opt/ml/model merged),
        or output/model/ itself for a job with disable_output_compression."""
        return self._files("model", self.result.model_artifact)

    @property
    def output(self) -> Path:
        """A folder holding the output data files (output.tar.gz unpacked, or output/data/)."""
        return self._files("output", self.result.output_artifact)

    def describe(self) -> dict[str, Any]:
        """The job's description, as `hetero-emu describe` gives it (DescribeTrainingJob's answer and
        what the emulator adds: `emulator.api.describe`, through the jobs layer)."""
        return api.describe(str(self.job_dir))

    def _files(self, kind: str, artifact: Path | None) -> Path:
        if artifact is None or not artifact.exists():
            raise FileNotFoundError(f"job {self.job_name} left no {kind} artifact ({self.status}"
                                    f"{': ' + self.failure_reason if self.failure_reason else ''})")
        if artifact.is_dir():
            return artifact
        if kind not in self._unpacked:
            target = self.unpack_dir / kind
            target.mkdir(parents=True)
            with tarfile.open(artifact) as tar:
                # The "data" filter (no links out, no absolute names) where this Python has it; the
                # emulator's archives hold only regular files under relative names anyway.
                if hasattr(tarfile, "data_filter"):
                    tar.extractall(target, filter="data")
                else:  # Pythons before 3.10.12 / 3.11.4
                    tar.extractall(target)
            self._unpacked[kind] = target
        return self._unpacked[kind]

    def __repr__(self) -> str:
        hosts = ", ".join(f"{h.name}={h.exit_code}" for h in self.hosts.values())
        reason = f", {self.failure_reason!r}" if self.failure_reason else ""
        return f"<TrainingRun {self.job_name} {self.status}{reason}; exit codes {hosts}; {self.job_dir}>"


class HeteroEmuSession:
    """What the tests of one session (one xdist worker) share: the engine, checked once; the default
    image, built or found up to date once; the token and counter that make job names unique."""

    def __init__(self, config: pytest.Config, engine_name: str) -> None:
        self.config = config
        self.engine_name = engine_name
        self.worker = os.environ.get("PYTEST_XDIST_WORKER", "")
        self.token = secrets.token_hex(3)
        self.counter = itertools.count(1)
        self.image_checked = False

    def ensure_default_image(self) -> None:
        """Build the default image when missing or out of date, once per session. Parallel workers each
        ask; `api.build_image` holds a lock across processes, so one builds and the others wait and
        then find it up to date."""
        if self.image_checked or self.engine_name != DEFAULT_ENGINE:
            return  # another engine builds its own default image when a run finds it missing
        capture = self.config.pluginmanager.getplugin("capturemanager")
        started, pending = time.monotonic(), list[str]()

        def progress(message: str) -> None:
            # A build (or the wait for another worker's) takes minutes, and a silent test would look
            # hung: once it lasts, its lines are shown as they come, past pytest's capture. A check
            # that finds the image up to date says nothing.
            pending.append(message)
            if time.monotonic() - started > QUIET_SECONDS:
                with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
                    for line in pending:
                        print(f"hetero-emu: {line}", flush=True)
                pending.clear()

        api.build_image(progress=progress)
        self.image_checked = True


class HeteroEmu:
    """The `hetero_emu` fixture: `run(job)` runs a job in the test's tmp_path and returns a TrainingRun."""

    def __init__(self, session: HeteroEmuSession, test_name: str, test_dir: Path, folder: Path) -> None:
        self.session = session
        self.test_name = test_name
        self.test_dir = test_dir
        self.folder = folder

    def run(self, job: str | os.PathLike[str] | Mapping[str, Any] | JobSpec | Job, options: RunOptions | None = None,
            *, job_name: str | None = None, base_dir: Path | str | None = None,
            reporter: Reporter | None = None) -> TrainingRun:
        """Run `job` in the foreground and return what it left; a failed job is returned too (assert
        on its status), while an invalid spec raises SpecError and an engine problem its error.

        `job`: a spec or CreateTrainingJob request file (a relative path is the test file's folder's),
        a mapping holding either (relative paths resolve against `base_dir`, default the test file's
        folder), an `emulator.Job`, or a JobSpec (`emulator.api.load`). The job name is made unique
        unless `job_name` is given; the output goes under the test's tmp_path. `options` (an
        `emulator.options.RunOptions`, as `emulator.api.run` takes; default: `hetero-emu run`'s
        defaults) say how it runs, `reporter` prints the run.
        """
        options = options or RunOptions()
        name = job_name or job_name_for(self.test_name, self.session.worker, self.session.token,
                                        next(self.session.counter))
        out = self.folder / "output"
        try:
            spec = self._spec(job, name, out, Path(base_dir) if base_dir is not None else self.test_dir)
            if spec.image_uri == DEFAULT_IMAGE and options.build_image:
                self.session.ensure_default_image()
            result = api.run(spec, options, engine_name=self.session.engine_name, reporter=reporter)
        except EmulatorError as err:
            # The CLI prints the hint below the message; pytest shows an exception's notes.
            if err.hint and hasattr(err, "add_note"):
                err.add_note(f"hint: {err.hint}")
            raise
        return TrainingRun(result, self.folder / "unpacked" / result.job_name)

    def _spec(self, job: Any, name: str, out: Path, base_dir: Path) -> JobSpec:
        if isinstance(job, JobSpec):
            return api.relocate(job, job_name=name, output_path=out)
        if isinstance(job, Job):
            return api.load_mapping(job.raw, base_dir=job.base_dir, job_name=name, output_path=out, source="Job(...)")
        if isinstance(job, Mapping):
            return api.load_mapping(job, base_dir=base_dir, job_name=name, output_path=out)
        return api.load(self.test_dir / job, job_name=name, output_path=out)


@pytest.fixture(scope="session")
def hetero_emu_session(pytestconfig: pytest.Config,
                       tmp_path_factory: pytest.TempPathFactory) -> Iterator[HeteroEmuSession]:
    """The engine, checked once per session: without one, the tests using it skip with the reason
    (or fail, see `engine_required`). Jobs are recorded in a folder of the session, not the user's
    record of jobs run (unless HETERO_EMU_STATE_DIR names one)."""
    engine_name = os.environ.get("HETERO_EMU_ENGINE") or DEFAULT_ENGINE
    try:
        api.check_engine(engine_name=engine_name)
    except EnvironmentProblem as err:
        reason = f"hetero-emu: {err.message}" + (f" ({err.hint})" if err.hint else "")
        if engine_required(pytestconfig):
            pytest.fail(f"{reason}; required by {REQUIRE_OPTION} / {REQUIRE_INI} / {REQUIRE_ENV}=1", pytrace=False)
        pytest.skip(reason)
    with pytest.MonkeyPatch.context() as patch:
        if not os.environ.get("HETERO_EMU_STATE_DIR"):
            patch.setenv("HETERO_EMU_STATE_DIR", str(tmp_path_factory.mktemp("hetero-emu-state")))
        yield HeteroEmuSession(pytestconfig, engine_name)


@pytest.fixture
def hetero_emu(hetero_emu_session: HeteroEmuSession, request: pytest.FixtureRequest, tmp_path: Path) -> HeteroEmu:
    """Runs training jobs in this test: `hetero_emu.run("job.yaml").hosts["algo-2"].log`."""
    return HeteroEmu(hetero_emu_session, request.node.name, request.path.parent, tmp_path / "hetero-emu")
