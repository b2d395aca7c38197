"""The `hetero-emu` command line, without a Docker engine.

Exit codes are tested through the entry point's `main()` (testkit.invoke, in this process), which
maps errors to exit codes; `CliRunner().invoke(app)` alone bypasses it and is used only for `--help`.
What only a real process shows (the console script, a traceback, a signal) runs in a subprocess.
The 'no engine' case points DOCKER_HOST at a socket that does not exist.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fake_backend import FakeBackend
from testkit import CliResult, hetero_emu, invoke, write_train_project
from typer.testing import CliRunner

from emulator import cli as cli_module
from emulator.backend import registry
from emulator.cli import app

COMMANDS = [
    ["run"],
    ["demo"],
    ["validate"],
    ["render"],
    ["image"],
    ["image", "build"],
    ["ps"],
    ["logs"],
    ["stop"],
    ["clean"],
    ["instance-types"],
]

GOOD = """\
job_name: cli-job
entry_point: train.py
source_dir: code
hyperparameters: {epochs: 2}
instance_groups:
  - {instance_group_name: data_group, instance_type: ml.c5.xlarge, instance_count: 2}
  - {instance_group_name: dnn_group, instance_type: ml.p3.2xlarge, instance_count: 1}
inputs:
  training: {s3_data: data, content_type: text/csv, instance_groups: [data_group]}
output_path: out
"""

# Five independent problems, one per line of interest.
BAD = """\
job_name: cli-job
entry_point: train.py
source_dir: code
hyperparameter: {epochs: 2}
instance_groups:
  - {instance_group_name: data_group, instance_type: ml.c5.xlarg, instance_count: -1}
  - {instance_group_name: dnn_group, instance_type: ml.p3.2xlarge, instance_count: 1}
inputs:
  training: {s3_data: data, instance_groups: [data_grp]}
max_run: 0
"""
BAD_PATHS = [
    "hyperparameter",
    "instance_groups[0].instance_type",
    "instance_groups[0].instance_count",
    "inputs.training.instance_groups",
    "max_run",
]


@pytest.fixture
def proj(tmp_path: Path) -> Path:
    root = write_train_project(tmp_path / "proj", good=GOOD, bad=BAD)
    (root / "data").mkdir()
    (root / "data" / "a.csv").write_text("1,2\n")
    return root


def assert_clean_error(proc: CliResult | subprocess.CompletedProcess[str], code: int) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout
    assert "internal error" not in proc.stderr


# ---------------------------------------------------------------------------------------------------
# help


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_of_every_command(command: list[str]) -> None:
    result = CliRunner().invoke(app, [*command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output
    assert " ".join(command) in result.output


def test_top_level_help_lists_the_commands() -> None:
    proc = invoke("--help")
    assert proc.returncode == 0
    for command in ("run", "validate", "render", "demo", "image", "ps", "logs", "stop", "clean", "instance-types"):
        assert command in proc.stdout


def test_entry_point_is_installed() -> None:
    # The console script sits next to the interpreter that runs the tests (the venv's bin/), whether
    # or not that folder is on PATH.
    script = Path(sys.executable).parent / "hetero-emu"
    assert script.is_file(), f"no console script at {script}: is the package installed (pip install -e .)?"
    proc = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert "hetero-emu" in proc.stdout


# ---------------------------------------------------------------------------------------------------
# validate


def test_validate_good_spec(proj: Path) -> None:
    proc = invoke("validate", proj / "good.yaml")
    assert proc.returncode == 0, proc.stderr
    assert "valid" in proc.stdout
    assert "2 group(s), 3 host(s), 1 channel(s)" in proc.stdout


def test_validate_bad_spec_lists_every_problem(proj: Path) -> None:
    proc = invoke("validate", proj / "bad.yaml")
    assert_clean_error(proc, 2)
    for path in BAD_PATHS:
        assert f"{path}:" in proc.stderr, path
    assert "did you mean 'hyperparameters'?" in proc.stderr
    assert "5 problems" in proc.stderr


TUNED = """\
entry_point: train.py
source_dir: code
instance_type: ml.c5.xlarge
metric_definitions:
  - {Name: val_loss, Regex: "val_loss=([0-9.]+)"}
tuning:
  objective_metric_name: OBJECTIVE
  strategy: Random
  max_jobs: 6
  max_parallel_jobs: 2
  hyperparameter_ranges:
    lr: {type: continuous, min_value: 0.001, max_value: 0.1}
"""


def test_validate_says_what_a_tuning_section_runs(proj: Path) -> None:
    (proj / "tuned.yaml").write_text(TUNED.replace("OBJECTIVE", "val_loss"))
    proc = invoke("validate", proj / "tuned.yaml")
    assert proc.returncode == 0, proc.stderr
    assert "; tuning: Random, 6 trials, 2 at once" in proc.stdout


def test_validate_refuses_a_tuning_section_the_service_would_refuse(proj: Path) -> None:
    # The keys are right; the request `tune` would send breaks a rule of the service's: the objective
    # is not one of the metric definitions.
    (proj / "tuned.yaml").write_text(TUNED.replace("OBJECTIVE", "accuracy"))
    proc = invoke("validate", proj / "tuned.yaml")
    assert_clean_error(proc, 2)
    assert "tuned.yaml" in proc.stderr and "tuning: " in proc.stderr and "accuracy" in proc.stderr
    as_json = invoke("validate", proj / "tuned.yaml", "--json")
    assert as_json.returncode == 2
    problem = json.loads(as_json.stdout)["problems"][0]
    assert problem["path"] == "tuning" and "accuracy" in problem["message"] and problem["hint"]


def test_validate_json_bad_spec(proj: Path) -> None:
    proc = invoke("validate", "--json", proj / "bad.yaml")
    assert_clean_error(proc, 2)
    doc = json.loads(proc.stdout)
    assert doc["valid"] is False
    assert sorted(p["path"] for p in doc["problems"]) == sorted(BAD_PATHS)
    assert all(p["message"] for p in doc["problems"])


def test_validate_json_good_spec(proj: Path) -> None:
    proc = invoke("validate", "--json", proj / "good.yaml")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["valid"] is True
    assert [g["instance_group_name"] for g in doc["instance_groups"]] == ["data_group", "dnn_group"]
    assert doc["channels"] == ["training"]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("job_name: x\ninstance_groups: [1, 2\nentry_point: train.py\n", "malformed YAML: line"),
        ("- a\n- b\n", "must be a mapping"),
        ("just a string\n", "must be a mapping"),
        ("", "must be a mapping"),
    ],
    ids=["malformed", "list", "scalar", "empty"],
)
def test_unreadable_spec_gives_one_clear_message(proj: Path, text: str, fragment: str) -> None:
    spec = proj / "broken.yaml"
    spec.write_text(text)
    proc = invoke("validate", spec)
    assert_clean_error(proc, 2)
    assert fragment in proc.stderr
    assert "1 problem" in proc.stderr
    assert proc.stderr.count("\n  - ") == 1


def test_validate_json_on_malformed_yaml(proj: Path) -> None:
    spec = proj / "broken.yaml"
    spec.write_text("a: [1, 2\n")
    proc = invoke("validate", "--json", spec)
    assert_clean_error(proc, 2)
    problems = json.loads(proc.stdout)["problems"]
    assert len(problems) == 1
    assert "malformed YAML" in problems[0]["message"]


def test_validate_missing_file(proj: Path) -> None:
    proc = invoke("validate", proj / "nope.yaml")
    assert_clean_error(proc, 2)
    assert "not found" in proc.stderr


# ---------------------------------------------------------------------------------------------------
# render


def test_render_writes_plan_compose_and_host_files(proj: Path, tmp_path: Path) -> None:
    out = tmp_path / "rendered" / "job"
    proc = invoke("render", proj / "good.yaml", "-o", out)
    assert proc.returncode == 0, proc.stderr

    plan = json.loads((out / "plan.json").read_text())
    assert plan["job_name"] == "cli-job"
    assert [h["name"] for h in plan["hosts"]] == ["algo-1", "algo-2", "algo-3"]
    compose = yaml.safe_load((out / "compose.yaml").read_text())
    assert sorted(compose["services"]) == ["algo-1", "algo-2", "algo-3"]
    for host, group in (("algo-1", "data_group"), ("algo-2", "data_group"), ("algo-3", "dnn_group")):
        config = out / "hosts" / host / "input" / "config"
        resource = json.loads((config / "resourceconfig.json").read_text())
        assert resource["current_host"] == host
        assert resource["current_group_name"] == group
        hyper = json.loads((config / "hyperparameters.json").read_text())
        assert hyper["epochs"] == "2"
        assert hyper["sagemaker_program"] == '"train.py"'
        channels = json.loads((config / "inputdataconfig.json").read_text())
        assert list(channels) == (["training"] if group == "data_group" else [])
    # no Docker was needed, and nothing was written next to the spec
    assert not (proj / "out").exists()


def test_render_into_an_existing_empty_folder(proj: Path, tmp_path: Path) -> None:
    out = tmp_path / "empty"
    out.mkdir()
    proc = invoke("render", proj / "good.yaml", "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert (out / "plan.json").is_file()


def test_render_refuses_a_non_empty_folder(proj: Path, tmp_path: Path) -> None:
    out = tmp_path / "busy"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    proc = invoke("render", proj / "good.yaml", "-o", out)
    assert_clean_error(proc, 2)
    assert "not an empty folder" in proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    assert (out / "keep.txt").read_text() == "mine"


def test_render_a_bad_spec_writes_nothing(proj: Path, tmp_path: Path) -> None:
    out = tmp_path / "never"
    proc = invoke("render", proj / "bad.yaml", "-o", out)
    assert_clean_error(proc, 2)
    assert not out.exists()


# ---------------------------------------------------------------------------------------------------
# instance-types


def test_instance_types_lists_p3dn() -> None:
    proc = invoke("instance-types")
    assert proc.returncode == 0, proc.stderr
    line = next(line for line in proc.stdout.splitlines() if line.startswith("ml.p3dn.24xlarge"))
    assert "96" in line.split() and "8" in line.split()


def test_instance_types_json() -> None:
    proc = invoke("instance-types", "--json")
    assert proc.returncode == 0, proc.stderr
    types = {t["name"]: t for t in json.loads(proc.stdout)}
    assert types["ml.p3dn.24xlarge"]["gpus"] == 8
    assert types["ml.c5.xlarge"]["gpus"] == 0


def test_instance_types_family_filter() -> None:
    proc = invoke("instance-types", "--family", "ml.p3dn", "--json")
    assert proc.returncode == 0, proc.stderr
    assert [t["name"] for t in json.loads(proc.stdout)] == ["ml.p3dn.24xlarge"]


@pytest.mark.parametrize("family", ["p3", "ml.p3", "ML.P3", "p3."])
def test_instance_types_family_with_or_without_ml(family: str) -> None:
    proc = invoke("instance-types", "--family", family, "--json")
    assert proc.returncode == 0, proc.stderr
    assert [t["name"] for t in json.loads(proc.stdout)] == ["ml.p3.2xlarge", "ml.p3.8xlarge", "ml.p3.16xlarge"]


def test_instance_types_unknown_family_lists_the_known_ones() -> None:
    proc = invoke("instance-types", "--family", "p9")
    assert_clean_error(proc, 2)
    assert "--family 'p9': no such instance family" in proc.stderr
    assert "hint: known families: " in proc.stderr and "ml.p3, " in proc.stderr and "ml.c5, " in proc.stderr
    assert proc.stdout == ""


# ---------------------------------------------------------------------------------------------------
# --version, shell completion, --debug


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(flag: str) -> None:
    from importlib import metadata

    proc = invoke(flag)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"hetero-emu {metadata.version('hetero-emu')}\n"


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_show_completion_prints_a_script_that_completes_hetero_emu(shell: str) -> None:
    # Started as `python -m emulator.cli`: the script still names the installed command, hetero-emu.
    proc = hetero_emu("--show-completion", shell)
    assert proc.returncode == 0, proc.stderr
    assert "_HETERO_EMU_COMPLETE" in proc.stdout and "hetero-emu" in proc.stdout
    assert "python" not in proc.stdout.lower()


@pytest.mark.parametrize(("words", "cword", "expected"), [
    ("hetero-emu im", 1, {"image"}),
    ("hetero-emu de", 1, {"demo", "describe"}),
    ("hetero-emu run --host-o", 2, {"--host-order"}),
])
def test_completion_answers_the_installed_script(words: str, cword: int, expected: set[str]) -> None:
    """What the script of --show-completion bash asks the command (its variables) and what it answers."""
    env = {"_HETERO_EMU_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(cword)}
    proc = hetero_emu(env=env)
    assert proc.returncode == 0, proc.stderr
    assert set(proc.stdout.split()) == expected


def test_install_completion_writes_the_script_and_sources_it(tmp_path: Path) -> None:
    proc = hetero_emu("--install-completion", "bash", env={"HOME": str(tmp_path), "SHELL": "/bin/bash"})
    assert proc.returncode == 0, proc.stderr
    script = tmp_path / ".bash_completions" / "hetero-emu.sh"
    assert "complete -o default -F _hetero_emu_completion hetero-emu" in script.read_text()
    assert f"source '{script}'" in (tmp_path / ".bashrc").read_text()


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_anywhere_on_the_command_line_shows_the_traceback(proj: Path, where: str) -> None:
    args = ["--debug", "validate", proj / "nope.yaml"] if where == "before" else ["validate", proj / "nope.yaml",
                                                                                  "--debug"]
    # A process of its own: with --debug main() re-raises, and the traceback is the interpreter's.
    proc = hetero_emu(*args)
    assert proc.returncode == 2, proc.stderr
    assert "spec file not found" in proc.stderr
    assert "Traceback" in proc.stderr  # what --debug is for
    assert "No such option" not in proc.stderr


def test_without_debug_no_traceback(proj: Path) -> None:
    proc = invoke("validate", proj / "nope.yaml")
    assert_clean_error(proc, 2)


def test_debug_after_a_double_dash_is_an_argument() -> None:
    from emulator.cli import _without_debug

    assert _without_debug(["run", "--debug", "x.yaml"]) == (["run", "x.yaml"], True)
    assert _without_debug(["run", "--", "--debug"]) == (["run", "--", "--debug"], False)
    assert _without_debug(["run", "--debug-host", "algo-1"]) == (["run", "--debug-host", "algo-1"], False)


# ---------------------------------------------------------------------------------------------------
# --json on an invalid spec, warnings


@pytest.mark.parametrize("command", ["run", "validate"])
def test_json_on_an_invalid_spec_prints_the_problems(proj: Path, command: str) -> None:
    proc = invoke(command, "--json", proj / "bad.yaml", env={"DOCKER_HOST": "unix:///nonexistent.sock"})
    assert_clean_error(proc, 2)
    doc = json.loads(proc.stdout)
    assert doc["valid"] is False
    assert sorted(p["path"] for p in doc["problems"]) == sorted(BAD_PATHS)


def test_run_json_and_validate_json_print_the_same_document(proj: Path) -> None:
    ran = invoke("run", "--json", proj / "bad.yaml", env={"DOCKER_HOST": "unix:///nonexistent.sock"})
    validated = invoke("validate", "--json", proj / "bad.yaml")
    assert ran.stdout == validated.stdout


WARNED = GOOD.replace("training: {s3_data: data, content_type: text/csv, instance_groups: [data_group]}",
                      "training: {s3_data: data, distribution: ShardedByS3Key, instance_groups: [data_group]}")


def test_validate_prints_warnings_and_still_passes(proj: Path) -> None:
    (proj / "warned.yaml").write_text(WARNED)
    proc = invoke("validate", proj / "warned.yaml")
    assert proc.returncode == 0, proc.stderr
    assert "valid" in proc.stdout
    assert "warning: inputs.training: ShardedByS3Key over 2 hosts but only 1 file: 1 host gets no file" \
        in proc.stderr


def test_validate_json_has_the_warnings(proj: Path) -> None:
    (proj / "warned.yaml").write_text(WARNED)
    doc = json.loads(invoke("validate", "--json", proj / "warned.yaml").stdout)
    assert doc["valid"] is True
    assert [(w["path"], w["message"]) for w in doc["warnings"]] == [
        ("inputs.training", "ShardedByS3Key over 2 hosts but only 1 file: 1 host gets no file")]
    assert json.loads(invoke("validate", "--json", proj / "good.yaml").stdout)["warnings"] == []


def test_render_prints_warnings(proj: Path, tmp_path: Path) -> None:
    (proj / "warned.yaml").write_text(WARNED)
    proc = invoke("render", proj / "warned.yaml", "-o", tmp_path / "r",
                  env={"DOCKER_HOST": "unix:///nonexistent.sock"})
    assert proc.returncode == 0, proc.stderr
    assert "warning: inputs.training: ShardedByS3Key over 2 hosts" in proc.stderr


# ---------------------------------------------------------------------------------------------------
# no engine


def test_run_without_an_engine_exits_3_with_a_hint(proj: Path) -> None:
    proc = invoke("run", proj / "good.yaml", env={"DOCKER_HOST": "unix:///nonexistent.sock"})
    assert_clean_error(proc, 3)
    assert "Docker" in proc.stderr
    assert "hint:" in proc.stderr
    assert not (proj / "out").exists()  # nothing staged before the engine answered


def test_run_a_bad_spec_exits_2_before_looking_for_an_engine(proj: Path) -> None:
    proc = invoke("run", proj / "bad.yaml", env={"DOCKER_HOST": "unix:///nonexistent.sock"})
    assert_clean_error(proc, 2)
    assert "invalid job spec" in proc.stderr


@pytest.mark.parametrize("command", [["ps"], ["clean"]], ids=" ".join)
def test_engine_commands_without_an_engine_exit_3(command: list[str]) -> None:
    proc = invoke(*command, env={"DOCKER_HOST": "unix:///nonexistent.sock"})
    assert_clean_error(proc, 3)
    assert "Docker" in proc.stderr


# ---------------------------------------------------------------------------------------------------
# usage errors (a bug, see the report)


@pytest.mark.parametrize(
    "args",
    [["run", "--bogus", "good.yaml"], ["run"], ["frobnicate"], ["run", "good.yaml", "--host-order", "weird"]],
    ids=["unknown-option", "missing-spec", "unknown-command", "bad-choice"],
)
def test_usage_errors_exit_2(proj: Path, args: list[str]) -> None:
    proc = invoke(*args, cwd=proj)
    assert_clean_error(proc, 2)


def test_a_ctrl_c_that_typer_would_swallow_still_gets_one_line_and_exit_130(tmp_path: Path) -> None:
    # typer turns a KeyboardInterrupt leaving a command into a silent exit 130: the CLI says what stopped.
    program = (
        "import os, signal, sys\n"
        "from emulator import cli\n"
        "def interrupted(*args, **kwargs):\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    raise AssertionError('the signal should have ended the command')\n"
        "cli._load = interrupted\n"
        "sys.argv = ['hetero-emu', 'validate', 'spec.yaml']\n"
        "cli.main()\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
                          check=False)
    assert done.returncode == 130
    assert done.stderr == "stopped by the user during `hetero-emu validate spec.yaml`\n"


# ---------------------------------------------------------------------------------------------------
# run --no-build (in process, against the in-memory engine: `main()` maps the error to the exit code)


def test_run_no_build_with_the_default_image_missing_exits_3_and_builds_nothing(
    proj: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    fake = FakeBackend(images=(), builds_images=True)  # an engine that could build it
    built: list[object] = []
    fake.images.build_default_image = built.append  # type: ignore[method-assign]  # what `run` would build with
    monkeypatch.setitem(registry._FACTORIES, "fake", lambda: fake)
    monkeypatch.setattr(cli_module.signal, "signal", lambda *args: None)  # leave pytest's handlers alone
    monkeypatch.chdir(proj)
    monkeypatch.setattr(sys, "argv", ["hetero-emu", "run", "good.yaml", "--no-build", "--engine", "fake"])

    with pytest.raises(SystemExit) as info:
        cli_module.main()

    err = capsys.readouterr().err
    assert info.value.code == 3, err
    assert err.splitlines() == [
        "error: the default image hetero-emu/training:py311 is not built yet (and --no-build builds nothing)",
        "hint: build it with `hetero-emu image build`, or run without --no-build",
    ]
    assert built == []
    assert not {"create_network", "create_container", "start"} & set(fake.call_names())
    assert not (proj / "out").exists()


def test_run_and_image_build_offer_verbose_and_run_no_build() -> None:
    run_help = CliRunner().invoke(app, ["run", "--help"], terminal_width=200).output
    build_help = CliRunner().invoke(app, ["image", "build", "--help"], terminal_width=200).output
    assert "--no-build" in run_help and "--verbose" in run_help
    assert "--verbose" in build_help


@pytest.mark.parametrize(("args", "said"), [
    (["--framework", "pytorch:1.7"], "pytorch 1.7 is not one of the pytorch versions"),
    (["--framework", "pytorch:1.11", "--python", "py310"], "pytorch 1.11.0 was never released for py310"),
    (["--framework", "jax:0.4"], "is not FRAMEWORK:VERSION"),
    (["--python", "py38"], "--python goes with --framework"),
])
def test_image_build_refuses_a_framework_it_cannot_build_before_the_engine_is_asked(
        args: list[str], said: str, tmp_path: Path) -> None:
    # No engine answers at this socket: asking it would be exit 3, not the usage error's 2.
    proc = invoke("image", "build", *args, env={"DOCKER_HOST": f"unix://{tmp_path}/no-such.sock"})
    assert_clean_error(proc, 2)
    assert said in proc.stderr


def test_image_build_help_explains_the_framework_options() -> None:
    text = CliRunner().invoke(app, ["image", "build", "--help"], terminal_width=200).output
    assert "--framework" in text and "--python" in text and "pytorch:1.11" in text and "py38" in text
