"""`emulator.options.RunOptions`: one frozen, documented value with `hetero-emu run`'s defaults, which
every front end (the CLI, `Job.run`, the pytest plugin, the SDK session's driver) builds and hands to
`emulator.api.run` by value."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import signal
import socket
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml
from fake_backend import FakeBackend, exits
from typer.testing import CliRunner

from emulator import Job, api, cli, driver, options
from emulator.backend import registry
from emulator.jobs.ticket import DriverTicket
from emulator.options import DEFAULT_GRACE, RunOptions
from emulator.planning.debug_host import DebugTarget
from emulator.reports.console import RecordingReporter
from emulator.result import JobResult
from emulator.run import runner

pytest_plugins = ["pytester"]

# Two one-host groups: the fake engine's algo-1 and algo-2.
SPEC = {"job_name": "options-job", "entry_point": "train.py", "source_dir": "code", "output_path": "out",
        "instance_groups": [{"instance_group_name": name, "instance_type": kind, "instance_count": 1}
                            for name, kind in (("data_group", "ml.c5.xlarge"), ("dnn_group", "ml.p3.2xlarge"))]}


@pytest.fixture
def fake_engine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeBackend:
    fake = FakeBackend({"algo-1": exits(0), "algo-2": exits(0)})
    monkeypatch.setitem(registry._FACTORIES, "fake", lambda: fake)
    monkeypatch.setenv("HETERO_EMU_STATE_DIR", str(tmp_path / "state"))
    return fake


@pytest.fixture
def passed(monkeypatch: pytest.MonkeyPatch) -> list[RunOptions]:
    """The options every run through `emulator.api.run` hands the runner, in order; the run goes on."""
    seen: list[RunOptions] = []
    real: Callable[..., JobResult] = runner.run_job

    def spy(spec: Any, options: RunOptions | None = None, **kw: Any) -> JobResult:
        assert isinstance(options, RunOptions)
        seen.append(options)
        return real(spec, options, **kw)

    monkeypatch.setattr(api, "run_job", spy)
    return seen


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def project(folder: Path) -> Path:
    (folder / "code").mkdir(parents=True, exist_ok=True)
    (folder / "code" / "train.py").write_text("print('hi')\n")
    (folder / "job.yaml").write_text(yaml.safe_dump(SPEC))
    return folder / "job.yaml"


# --------------------------------------------------------------------------------------------------
# The value


def test_the_defaults_are_what_hetero_emu_run_does_without_its_flags() -> None:
    assert RunOptions() == RunOptions(host_order="spec", seed=None, keep=False, keep_on_failure=False,
                                      grace=120.0, build_image=True, memory="instance", debug=None, created=None,
                                      images=None, inject=None)
    assert DEFAULT_GRACE == 120.0  # the service's: SIGTERM, then SIGKILL 120 s later (API_StoppingCondition)
    flags = inspect.signature(cli.run).parameters
    assert flags["host_order"].default.value == RunOptions.host_order
    assert flags["grace"].default == RunOptions.grace
    assert flags["memory"].default == RunOptions.memory
    assert flags["keep"].default is RunOptions.keep and flags["keep_on_failure"].default is RunOptions.keep_on_failure
    assert flags["no_build"].default is not RunOptions.build_image


def test_options_are_frozen_and_changed_only_by_a_copy() -> None:
    given = RunOptions(grace=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        given.keep = True  # type: ignore[misc]
    changed = dataclasses.replace(given, keep=True)
    assert (given.keep, changed.keep, changed.grace) == (False, True, 3)
    assert RunOptions(seed=7) == RunOptions(seed=7) and hash(RunOptions(seed=7)) == hash(RunOptions(seed=7))


def test_every_field_is_documented_with_what_it_does() -> None:
    """Each field of the class is followed by its docstring (the attribute docstrings editors show)."""
    tree = ast.parse(Path(options.__file__).read_text())
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "RunOptions").body
    documented = {}
    for field, after in zip(body, [*body[1:], None], strict=True):
        if isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name):
            doc = after.value.value if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) else ""
            documented[field.target.id] = str(doc)
    assert set(documented) == {f.name for f in dataclasses.fields(RunOptions)}
    assert all(len(doc.split()) >= 8 for doc in documented.values()), documented


# --------------------------------------------------------------------------------------------------
# What each front end passes


def test_the_cli_passes_its_flags_as_one_run_options(
        tmp_path: Path, fake_engine: FakeBackend, passed: list[RunOptions]) -> None:
    spec, port = project(tmp_path), free_port()
    plain = CliRunner().invoke(cli.app, ["run", str(spec), "--engine", "fake", "-q"])
    assert plain.exit_code == 0, (plain.output, plain.exception)
    flagged = CliRunner().invoke(cli.app, [
        "run", str(spec), "--engine", "fake", "-q", "--job-name", "options-job-2", "--host-order", "shuffled",
        "--seed", "7", "--keep-on-failure", "--grace", "3", "--memory", "none", "--no-build",
        "--debug-host", "algo-2", "--debug-port", str(port)])
    assert flagged.exit_code == 0, (flagged.output, flagged.exception)
    assert passed == [RunOptions(), RunOptions(host_order="shuffled", seed=7, keep_on_failure=True, grace=3.0,
                                               memory="none", build_image=False, debug=DebugTarget("algo-2", port))]


def test_job_run_hands_its_options_on_as_they_are(
        tmp_path: Path, fake_engine: FakeBackend, passed: list[RunOptions]) -> None:
    project(tmp_path)
    job = Job(base_dir=tmp_path, job_name="options-job", entry_point="train.py", source_dir="code",
              instance_type="ml.c5.xlarge", instance_count=1, output_path="out")
    given = RunOptions(keep=True, grace=1)
    kept = job.run(given, engine_name="fake", reporter=RecordingReporter())
    plain = Job(base_dir=tmp_path, job_name="options-job-2", entry_point="train.py", source_dir="code",
                instance_type="ml.c5.xlarge", instance_count=1, output_path="out2").run(
                    engine_name="fake", reporter=RecordingReporter())
    assert passed[0] is given and passed[1] == RunOptions()
    assert isinstance(kept, JobResult) and kept.kept and not plain.kept


def test_the_pytest_plugin_passes_the_tests_options_or_the_defaults(
        pytester: pytest.Pytester, fake_engine: FakeBackend, passed: list[RunOptions],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HETERO_EMU_ENGINE", "fake")
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv("EMULATOR_REQUIRE_DOCKER", raising=False)
    project(pytester.path)
    pytester.makepyfile("""
from emulator import RunOptions

def test_jobs(hetero_emu):
    assert hetero_emu.run("job.yaml").status == "Completed"
    assert hetero_emu.run("job.yaml", RunOptions(grace=0.5, seed=3, host_order="shuffled")).exit_code == 0
""")
    result = pytester.runpytest("-p", "no:hetero_emu", "-p", "emulator.pytest_plugin", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert passed == [RunOptions(), RunOptions(grace=0.5, seed=3, host_order="shuffled")]


def test_the_sdk_sessions_driver_passes_the_jobs_creation_time_and_image_table(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = api.load(project(tmp_path))
    (tmp_path / "s3").mkdir()
    created = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    ticket = tmp_path / "ticket.json"
    DriverTicket(api.as_request(spec), tmp_path, tmp_path / "s3", "the test's root", "fake",
                 RunOptions(created=created, images={"123.dkr.ecr.us-west-2.amazonaws.com/x:1": "local/x:1"})
                 ).write(ticket)
    seen: list[tuple[RunOptions | None, str]] = []

    class Ran:
        exit_code = 0

    def run(spec: Any, options: RunOptions | None = None, *, engine_name: str, **kw: Any) -> Ran:
        seen.append((options, engine_name))
        return Ran()

    monkeypatch.setattr(api, "run", run)
    monkeypatch.setattr(signal, "signal", lambda *args: None)  # the driver's SIGTERM handler stays its own
    assert driver.main([str(ticket)]) == 0
    assert seen == [(RunOptions(created=created, images={"123.dkr.ecr.us-west-2.amazonaws.com/x:1": "local/x:1"}),
                     "fake")]
