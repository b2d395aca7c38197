"""`--debug-host`: the plan gives one host debugpy's hook and port, bad input ends the run before the
engine is asked, VS Code's attach configuration, and how the hook picks the entry point's process
(without Docker; tests/integration/test_debugger_in_containers.py attaches a real client)."""

from __future__ import annotations

import importlib.util
import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from fake_backend import FakeBackend, exits
from testkit import CliResult, invoke

from emulator.errors import EnvironmentProblem, UsageError
from emulator.jobspec import JobSpec
from emulator.options import RunOptions
from emulator.planning import compose, debug_host
from emulator.planning.container import PortBinding
from emulator.planning.debug_host import DEBUGPY_PORT, DebugTarget
from emulator.planning.hooks import SOURCES
from emulator.planning.hooks import TARGET as HOOK_TARGET
from emulator.planning.plan import make_plan, summary
from emulator.reports.console import RecordingReporter
from emulator.run import debugger
from emulator.run.runner import run_job

HOOK_SOURCE = SOURCES["sitecustomize.py"].parent

Load = Callable[[dict[str, Any]], JobSpec]
HOOK_VARIABLES = {debug_host.PORT_VARIABLE, debug_host.WAIT_VARIABLE, debug_host.ENTRY_VARIABLE, "PYTHONPATH",
                  "PYDEVD_DISABLE_FILE_VALIDATION"}


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port something on 127.0.0.1 listens on, as another program's would."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield int(holder.getsockname()[1])


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# --------------------------------------------------------------------------------------------------
# The plan: that host only.


def test_only_the_debugged_host_gets_the_hook_its_variables_and_the_port(load: Load, valid_raw: dict[str, Any],
                                                                        tmp_path: Path) -> None:
    spec = load(valid_raw)
    plain = make_plan(spec, "hetero-test", job_dir=tmp_path / "job")
    plan = make_plan(spec, "hetero-test", job_dir=tmp_path / "job", debug=DebugTarget("algo-3", 45678, wait=True))
    assert plan.debug == DebugTarget("algo-3", 45678, wait=True)
    debugged = plan.host("algo-3").container
    assert debugged.ports == (PortBinding("127.0.0.1", 45678, DEBUGPY_PORT),)
    assert {k: v for k, v in debugged.environment.items() if k in HOOK_VARIABLES} == {
        "PYTHONPATH": HOOK_TARGET, debug_host.PORT_VARIABLE: "5678", debug_host.WAIT_VARIABLE: "1",
        debug_host.ENTRY_VARIABLE: "train.py", "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
    hook = [m for m in debugged.mounts if m.target == HOOK_TARGET]
    # The start-up hook, staged into the job folder (emulator/planning/hooks.py), as every host that needs it mounts it.
    assert [(m.source, m.read_only) for m in hook] == [(str(tmp_path / "job" / ".staging" / "hooks"), True)]
    assert plan.hook_dir == str(tmp_path / "job" / ".staging" / "hooks") and plain.hook_dir is None
    assert (HOOK_SOURCE / "sitecustomize.py").is_file()
    # Every other host is exactly what it is without a debugger; so is the rest of algo-3.
    for host in ("algo-1", "algo-2"):
        assert plan.host(host) == plain.host(host)
    assert [m for m in debugged.mounts if m.target != HOOK_TARGET] == list(plain.host("algo-3").container.mounts)
    assert {k: v for k, v in debugged.environment.items() if k not in HOOK_VARIABLES} == dict(
        plain.host("algo-3").container.environment)


def test_the_specs_own_pythonpath_stays_after_the_hook(load: Load, valid_raw: dict[str, Any], tmp_path: Path) -> None:
    spec = load({**valid_raw, "environment": {"PYTHONPATH": "/opt/ml/code/lib"}})
    plan = make_plan(spec, "hetero-test", job_dir=tmp_path / "job", debug=DebugTarget("algo-1"))
    assert plan.host("algo-1").container.environment["PYTHONPATH"] == f"{HOOK_TARGET}:/opt/ml/code/lib"
    assert plan.host("algo-1").container.environment[debug_host.WAIT_VARIABLE] == "0"
    assert plan.host("algo-2").container.environment["PYTHONPATH"] == "/opt/ml/code/lib"


def test_render_and_compose_show_the_debugged_host(load: Load, valid_raw: dict[str, Any], tmp_path: Path) -> None:
    plan = make_plan(load(valid_raw), "hetero-test", job_dir=tmp_path / "job", debug=DebugTarget("algo-2", 6000))
    assert ("  debug    algo-2: its entry point under debugpy, port 5678 published on 127.0.0.1:6000"
            in summary(plan).splitlines())
    services = compose.compose_project(plan)["services"]
    assert services["algo-2"]["ports"] == ["127.0.0.1:6000:5678"]
    assert "ports" not in services["algo-1"] and "ports" not in services["algo-3"]
    assert f"./.staging/hooks:{HOOK_TARGET}:ro" in services["algo-2"]["volumes"]
    waits = make_plan(load(valid_raw), "hetero-test", job_dir=tmp_path / "job",
                      debug=DebugTarget("algo-2", 6000, wait=True))
    assert summary(waits).count(", waits for the debugger to attach") == 1


# --------------------------------------------------------------------------------------------------
# Bad input: before the engine is asked, nothing left.


@pytest.mark.parametrize(("host", "expected"), [
    ("algo-9", "--debug-host algo-9: the job has algo-1..algo-3"),
    ("algo-0", "--debug-host algo-0: the job has algo-1..algo-3"),
    ("dnn_group", "--debug-host dnn_group: the job has algo-1..algo-3"),
])
def test_an_unknown_host_is_refused_before_the_engine_is_asked(load: Load, valid_raw: dict[str, Any], host: str,
                                                               expected: str) -> None:
    fake = FakeBackend()
    with pytest.raises(UsageError) as caught:
        run_job(load(valid_raw), RunOptions(debug=DebugTarget(host)), backend=fake, reporter=RecordingReporter())
    assert caught.value.message == expected and caught.value.exit_code == 2
    assert caught.value.hint == "name one of its hosts, e.g. --debug-host algo-3"
    assert fake.calls == []


def test_a_port_in_use_is_refused_before_anything_is_created(load: Load, valid_raw: dict[str, Any],
                                                              taken_port: int) -> None:
    spec = load(valid_raw)
    fake = FakeBackend()
    with pytest.raises(EnvironmentProblem) as caught:
        run_job(spec, RunOptions(debug=DebugTarget("algo-1", taken_port)), backend=fake, reporter=RecordingReporter())
    assert caught.value.message == f"--debug-port {taken_port}: port {taken_port} on 127.0.0.1 is in use"
    assert caught.value.hint == "choose a free one with --debug-port PORT" and caught.value.exit_code == 3
    assert fake.calls == []
    assert not (spec.output_path / "hetero-test").exists()


@pytest.mark.parametrize(("change", "expected"), [
    ({"entry_point": None, "source_dir": None, "container_entry_point": ["python3", "-c", "print(1)"]},
     "the job has no entry_point, so there is no script to debug"),
    ({"enable_network_isolation": True}, "enable_network_isolation is true"),
])
def test_a_job_that_cannot_be_debugged_is_refused(load: Load, valid_raw: dict[str, Any], change: dict[str, Any],
                                                  expected: str) -> None:
    raw = {key: value for key, value in {**valid_raw, **change}.items() if value is not None}
    with pytest.raises(UsageError) as caught:
        debugger.check_target(load(raw), DebugTarget("algo-1"))
    assert expected in caught.value.message and caught.value.hint


def test_a_port_out_of_range_is_refused(load: Load, valid_raw: dict[str, Any]) -> None:
    with pytest.raises(UsageError, match="--debug-port 70000: not a TCP port"):
        debugger.check_target(load(valid_raw), DebugTarget("algo-1", 70000))


def cli(*args: str | Path) -> CliResult:
    # An engine that cannot answer: a check made after the engine is asked would exit 3 with "Docker".
    return invoke(*args, env={"DOCKER_HOST": "unix:///nonexistent.sock"})


def test_cli_unknown_host_one_line_a_hint_exit_2(write_spec: Callable[[dict[str, Any]], Path],
                                                  valid_raw: dict[str, Any]) -> None:
    proc = cli("run", write_spec(valid_raw), "--debug-host", "algo-9")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == ["error: --debug-host algo-9: the job has algo-1..algo-3",
                                        "hint: name one of its hosts, e.g. --debug-host algo-3"]


def test_cli_port_in_use_one_line_a_hint_exit_3_nothing_made(write_spec: Callable[[dict[str, Any]], Path],
                                                              valid_raw: dict[str, Any], taken_port: int) -> None:
    path = write_spec(valid_raw)
    proc = cli("run", path, "--debug-host", "algo-2", "--debug-port", str(taken_port))
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.splitlines() == [f"error: --debug-port {taken_port}: port {taken_port} on 127.0.0.1 is in use",
                                        "hint: choose a free one with --debug-port PORT"]
    assert not (path.parent / "output").exists()


@pytest.mark.parametrize("option", [["--debug-wait"], ["--debug-port", "6000"]])
def test_cli_debug_options_need_a_host(write_spec: Callable[[dict[str, Any]], Path], valid_raw: dict[str, Any],
                                       option: list[str]) -> None:
    proc = cli("run", write_spec(valid_raw), *option)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines()[0] == f"error: {option[0]} needs --debug-host"


# --------------------------------------------------------------------------------------------------
# What the run prints, and VS Code's configuration.


def test_the_run_prints_the_launch_json_before_the_hosts_start_and_the_wait(load: Load, valid_raw: dict[str, Any],
                                                                            project: Path) -> None:
    port = free_port()
    fake = FakeBackend({"algo-1": exits(0, 0.01), "algo-2": exits(0, 0.01), "algo-3": exits(0, 0.01)})
    reporter = RecordingReporter()
    result = run_job(load(valid_raw), RunOptions(debug=DebugTarget("algo-3", port, wait=True)), backend=fake,
                     reporter=reporter)
    assert result.status == "Completed"
    announced = [i for i in reporter.infos if i.startswith("debugger: ")]
    assert len(announced) == 1
    head, _, document = announced[0].partition("\n")
    assert head == (f"debugger: algo-3 (dnn_group) runs train.py under debugpy, published on 127.0.0.1:{port}; "
                    "attach with this .vscode/launch.json:")
    assert json.loads(document) == {"version": "0.2.0", "configurations": [{
        "name": "hetero-emu algo-3 (dnn_group)", "type": "debugpy", "request": "attach",
        "connect": {"host": "127.0.0.1", "port": port},
        "pathMappings": [{"localRoot": str(project / "code"), "remoteRoot": "/opt/ml/code"}],
        "justMyCode": False}]}
    assert f"waiting for a debugger on 127.0.0.1:{port} (algo-3 (dnn_group))" in reporter.infos
    assert reporter.infos.index(announced[0]) < reporter.infos.index(
        f"waiting for a debugger on 127.0.0.1:{port} (algo-3 (dnn_group))")
    assert fake.call_names().index("start") > 0


def test_no_wait_line_without_debug_wait(load: Load, valid_raw: dict[str, Any]) -> None:
    fake = FakeBackend({"algo-1": exits(0, 0.01), "algo-2": exits(0, 0.01), "algo-3": exits(0, 0.01)})
    reporter = RecordingReporter()
    run_job(load(valid_raw), RunOptions(debug=DebugTarget("algo-1", free_port())), backend=fake, reporter=reporter)
    assert not any(i.startswith("waiting for a debugger") for i in reporter.infos)


def test_local_root_is_the_source_dir_or_the_lone_scripts_folder(load: Load, valid_raw: dict[str, Any],
                                                                   project: Path) -> None:
    without_source_dir = {key: value for key, value in valid_raw.items() if key != "source_dir"}
    lone = load({**without_source_dir, "entry_point": "code/train.py"})
    assert debugger.local_root(lone) == str(project / "code")
    configuration = debugger.launch_configuration(load(valid_raw), DebugTarget("algo-1", 7000), "data_group")
    assert configuration["pathMappings"] == [{"localRoot": str(project / "code"), "remoteRoot": "/opt/ml/code"}]


# --------------------------------------------------------------------------------------------------
# The hook: which process is the entry point's.


@pytest.fixture(scope="module")
def hook() -> ModuleType:
    """The hook's module, loaded under another name (it does nothing without its variables)."""
    found = importlib.util.spec_from_file_location("hetero_emu_debugpy_hook", HOOK_SOURCE / "sitecustomize.py")
    assert found is not None and found.loader is not None
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("argv", "debugged"), [
    # The toolkit's ProcessRunner, its MPI ranks, torchrun's workers, a container_entry_point.
    (["/opt/venv/bin/python", "train.py", "--epochs", "2"], True),
    (["/opt/venv/bin/python", "-m", "mpi4py", "train.py"], True),
    (["/opt/venv/bin/python", "-u", "train.py"], True),
    (["python3", "-X", "dev", "/opt/ml/code/train.py"], True),
    (["/opt/venv/bin/python", "-m", "train"], True),  # the entry point of code with a setup.py
    # Not it: the toolkit itself, pip, torchrun, debugpy's adapter, another script, -c.
    (["/opt/venv/bin/python3", "/opt/venv/bin/train"], False),
    (["/opt/venv/bin/python", "-m", "pip", "install", "-r", "requirements.txt"], False),
    (["/opt/venv/bin/python3", "/opt/venv/bin/torchrun", "--nnodes", "1", "train.py"], False),
    (["/opt/venv/bin/python", "-m", "debugpy.adapter"], False),
    (["/opt/venv/bin/python", "other.py"], False),
    (["/opt/venv/bin/python", "-c", "import train"], False),
    (["/opt/venv/bin/python"], False),
])
def test_the_hook_debugs_the_process_that_runs_the_entry_point(hook: ModuleType, argv: list[str],
                                                               debugged: bool) -> None:
    assert hook.is_entry_point(argv, "train.py", "/opt/ml/code") is debugged


def test_the_hook_knows_an_entry_point_in_a_subfolder(hook: ModuleType) -> None:
    assert hook.is_entry_point(["python", "src/train.py"], "src/train.py", "/opt/ml/code")
    assert not hook.is_entry_point(["python", "train.py"], "src/train.py", "/opt/ml/code")


def test_the_hook_and_the_plan_name_the_same_variables(hook: ModuleType) -> None:
    assert (hook.PORT_VARIABLE, hook.WAIT_VARIABLE, hook.ENTRY_VARIABLE) == (
        debug_host.PORT_VARIABLE, debug_host.WAIT_VARIABLE, debug_host.ENTRY_VARIABLE)
    assert hook.CODE_DIR == "/opt/ml/code"


@pytest.mark.parametrize(("host", "warned"), [("algo-1", False), ("algo-2", True), ("algo-3", False)])
def test_debugging_an_mpi_host_mpirun_does_not_run_on_is_warned_about(load: Load, valid_raw: dict[str, Any],
                                                                      host: str, warned: bool) -> None:
    spec = load({**valid_raw, "distribution": {"mpi": {"enabled": True}, "instance_groups": ["data_group"]}})
    fake = FakeBackend({"algo-1": exits(0, 0.01), "algo-2": exits(0, 0.01), "algo-3": exits(0, 0.01)})
    reporter = RecordingReporter()
    run_job(spec, RunOptions(debug=DebugTarget(host, free_port())), backend=fake, reporter=reporter)
    expected = ("--debug-host algo-2: mpirun runs on algo-1 and starts the ranks of algo-2 over ssh, without the "
                "debugger; debug algo-1 instead")
    assert (expected in reporter.warnings) is warned


def test_cli_render_shows_the_debugged_host_in_the_plan_and_compose(write_spec: Callable[[dict[str, Any]], Path],
                                                                    valid_raw: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "rendered"
    proc = cli("render", write_spec(valid_raw), "-o", out, "--debug-host", "algo-2", "--debug-port", "6001",
               "--debug-wait")
    assert proc.returncode == 0, proc.stderr
    assert ("  debug    algo-2: its entry point under debugpy, port 5678 published on 127.0.0.1:6001, waits for the "
            "debugger to attach") in proc.stdout.splitlines()
    services = yaml.safe_load((out / "compose.yaml").read_text())["services"]
    assert {name: service.get("ports") for name, service in services.items()} == {
        "algo-1": None, "algo-2": ["127.0.0.1:6001:5678"], "algo-3": None}
    plan = json.loads((out / "plan.json").read_text())
    assert plan["debug"] == {"host": "algo-2", "port": 6001, "wait": True}
