"""The pytest plugin (emulator.pytest_plugin) without Docker: its entry point, what loading it does (nothing
until a test uses the fixture), the skip or failure without an engine, and a run's result over the fake
engine (hosts, logs, artifacts, unique job names per test and per xdist worker).

Inner pytest sessions run in this process (pytester): the fake engine registered here is theirs too.
The plugin is loaded there with `-p` (and its entry point blocked), so these tests do not depend on
how the package was installed; tests/integration/test_pytest_plugin_in_containers.py runs it as installed.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import sys
from pathlib import Path

import pytest
from fake_backend import FakeBackend, exits

from emulator import api
from emulator.backend import registry
from emulator.errors import UsageError
from emulator.jobspec import JOB_NAME_PATTERN

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ["-p", "no:hetero_emu", "-p", "emulator.pytest_plugin", "-p", "no:cacheprovider"]

CODE_AND_SPEC = {
    "code/train.py": "print('hi')\n",
    "job.yaml": """
base_job_name: fit-line
entry_point: train.py
source_dir: code
instance_groups:
  - {instance_group_name: data_group, instance_type: ml.c5.xlarge, instance_count: 2}
  - {instance_group_name: train_group, instance_type: ml.g5.xlarge, instance_count: 1}
output_path: ./output
""",
}


def write_project(pytester: pytest.Pytester, test_source: str) -> None:
    for name, text in CODE_AND_SPEC.items():
        (pytester.path / name).parent.mkdir(parents=True, exist_ok=True)
        (pytester.path / name).write_text(text)
    pytester.makepyfile(test_source)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeBackend:
    """The fake engine, chosen by the plugin through HETERO_EMU_ENGINE as the CLI chooses it."""
    backend = FakeBackend({
        "algo-1": exits(0, logs=["DATA algo-1: rows=20\n"], files={"output/data/algo-1.json": "{}"}),
        "algo-2": exits(0, logs=["DATA algo-2: rows=20\n", b"bad byte \xff\n"],
                        files={"output/data/algo-2.json": "{}"}),
        "algo-3": exits(0, logs=["TRAIN fitted\n"], files={"model/model.json": '{"slope": 2.0}',
                                                          "model/sub/notes.txt": "fitted"}),
    })
    monkeypatch.setitem(registry._FACTORIES, "fake", lambda: backend)
    monkeypatch.setenv("HETERO_EMU_ENGINE", "fake")
    monkeypatch.setenv("HETERO_EMU_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv("EMULATOR_REQUIRE_DOCKER", raising=False)
    return backend


@pytest.fixture
def dead_engine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The real Docker engine client, pointed at a socket nobody listens on."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    monkeypatch.delenv("HETERO_EMU_ENGINE", raising=False)
    monkeypatch.delenv("EMULATOR_REQUIRE_DOCKER", raising=False)


# --------------------------------------------------------------------------------------------------
# Registration


def test_the_pytest11_entry_point_names_an_importable_module_with_the_fixture() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    entry_points = project["project"]["entry-points"]["pytest11"]
    assert entry_points == {"hetero_emu": "emulator.pytest_plugin"}
    module = importlib.import_module(entry_points["hetero_emu"])
    assert callable(module.pytest_addoption)
    # Fixtures are found by their pytest marker on the module's attributes.
    fixtures = {name for name, value in vars(module).items() if hasattr(value, "_fixture_function_marker")
                or type(value).__name__ == "FixtureFunctionDefinition"}
    assert {"hetero_emu", "hetero_emu_session"} <= fixtures


def test_job_names_are_sagemaker_names_unique_per_worker_token_and_count() -> None:
    from emulator.pytest_plugin import job_name_for

    long = "test_" + "x" * 100 + "[case-1]"
    names = {job_name_for(test, worker, token, count) for test in ("test_a", long, "test_b[ü/ä]", "___")
             for worker in ("", "gw0", "gw13") for token in ("ab12cd", "ef34ab") for count in (1, 2, 1000)}
    assert len(names) == 4 * 3 * 2 * 3
    assert all(JOB_NAME_PATTERN.fullmatch(name) and len(name) <= 63 for name in names), names
    assert job_name_for("test_fit[3 hosts]", "gw1", "ab12cd", 7) == "test-fit-3-hosts-gw1-ab12cd-7"
    assert job_name_for("test_fit", "", "ab12cd", 1) == "test-fit-ab12cd-1"


# --------------------------------------------------------------------------------------------------
# Loading the plugin has no effect on tests that do not use it


def test_tests_that_do_not_use_the_fixture_never_ask_an_engine(
        pytester: pytest.Pytester, fake: FakeBackend) -> None:
    write_project(pytester, "def test_plain():\n    assert True\n")
    result = pytester.runpytest(*PLUGIN)
    result.assert_outcomes(passed=1)
    assert fake.calls == []


def test_collecting_tests_that_use_the_fixture_asks_no_engine(pytester: pytest.Pytester, fake: FakeBackend) -> None:
    write_project(pytester, "def test_job(hetero_emu):\n    hetero_emu.run('job.yaml')\n")
    result = pytester.runpytest(*PLUGIN, "--collect-only")
    result.assert_outcomes()
    result.stdout.fnmatch_lines(["*<Function test_job>*"])
    assert fake.calls == []


def test_the_option_is_listed_in_help(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(*PLUGIN, "--help")
    result.stdout.fnmatch_lines(["*hetero-emu*", "*--hetero-emu-require-docker*", "*hetero_emu_require_docker*"])


# --------------------------------------------------------------------------------------------------
# No engine: a skip naming the reason, or a failure when asked for


NO_ENGINE_TESTS = """
def test_one(hetero_emu):
    raise AssertionError("never reached: no engine")

def test_two(hetero_emu):
    raise AssertionError("never reached: no engine")

def test_without_the_fixture():
    pass
"""


def test_without_an_engine_the_tests_using_the_fixture_skip_with_the_reason(
        pytester: pytest.Pytester, dead_engine: None) -> None:
    write_project(pytester, NO_ENGINE_TESTS)
    result = pytester.runpytest(*PLUGIN, "-rs")
    result.assert_outcomes(passed=1, skipped=2)
    reason = "hetero-emu: no Docker engine answers: *(start the Docker daemon*"
    result.stdout.fnmatch_lines([f"SKIPPED *.py:1: {reason}", f"SKIPPED *.py:4: {reason}"])


@pytest.mark.parametrize("how", ["option", "ini", "env"])
def test_without_an_engine_the_tests_fail_when_an_engine_is_required(
        pytester: pytest.Pytester, dead_engine: None, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    write_project(pytester, NO_ENGINE_TESTS)
    args = list(PLUGIN)
    if how == "option":
        args.append("--hetero-emu-require-docker")
    elif how == "ini":
        pytester.makeini("[pytest]\nhetero_emu_require_docker = true\n")
    else:
        monkeypatch.setenv("EMULATOR_REQUIRE_DOCKER", "1")
    result = pytester.runpytest(*args)
    result.assert_outcomes(passed=1, errors=2)
    result.stdout.fnmatch_lines(["*hetero-emu: no Docker engine answers: *; required by --hetero-emu-require-docker*"])
    # One clear line, not a traceback through the plugin.
    assert "pytest_plugin.py" not in result.stdout.str()


# --------------------------------------------------------------------------------------------------
# A run: the result, the files, the names


RUN_TESTS = """
import json
import os
from pathlib import Path

import pytest
import yaml

from emulator import InstanceGroup, Job
from emulator.api import load

NAMES = []


def check(run, tmp_path):
    NAMES.append(run.job_name)
    assert run.status == "Completed" and run.exit_code == 0 and run.failure_reason is None
    assert run.job_dir.parent == tmp_path / "hetero-emu" / "output"
    assert list(run.hosts) == ["algo-1", "algo-2", "algo-3"]
    host = run.hosts["algo-2"]
    assert (host.name, host.group, host.instance_type, host.exit_code) == ("algo-2", "data_group", "ml.c5.xlarge", 0)
    assert host.log == "DATA algo-2: rows=20\\nbad byte \\ufffd\\n"
    assert host.opt_ml == run.job_dir / "hosts" / "algo-2"
    assert json.loads((run.model / "model.json").read_text()) == {"slope": 2.0}
    assert (run.model / "sub" / "notes.txt").read_text() == "fitted"
    assert run.model.is_relative_to(tmp_path) and run.model == run.model  # unpacked once
    assert sorted(p.name for p in run.output.iterdir()) == ["algo-1.json", "algo-2.json"]
    assert run.describe()["TrainingJobName"] == run.job_name
    assert run.describe()["TrainingJobStatus"] == "Completed"


def test_a_spec_file(hetero_emu, tmp_path):
    check(hetero_emu.run("job.yaml"), tmp_path)


def test_a_mapping_and_a_jobspec(hetero_emu, tmp_path):
    raw = yaml.safe_load(Path(__file__).with_name("job.yaml").read_text())
    check(hetero_emu.run(raw), tmp_path)
    check(hetero_emu.run(load(Path(__file__).with_name("job.yaml"))), tmp_path)


def test_a_job_of_the_python_api(hetero_emu, tmp_path):
    job = Job(base_dir=Path(__file__).parent, entry_point="train.py", source_dir="code",
              instance_groups=[InstanceGroup("data_group", "ml.c5.xlarge", 2),
                               InstanceGroup("train_group", "ml.g5.xlarge", 1)])
    check(hetero_emu.run(job), tmp_path)


def test_a_request(hetero_emu, tmp_path):
    request = {"AlgorithmSpecification": {"TrainingImage": "hetero-emu/training:py311", "TrainingInputMode": "File"},
               "HyperParameters": {"sagemaker_program": '"train.py"', "sagemaker_submit_directory": '"code"'},
               "ResourceConfig": {"InstanceGroups": [
                   {"InstanceGroupName": "data_group", "InstanceType": "ml.c5.xlarge", "InstanceCount": 2},
                   {"InstanceGroupName": "train_group", "InstanceType": "ml.g5.xlarge", "InstanceCount": 1}]},
               "OutputDataConfig": {"S3OutputPath": "output"}, "TrainingJobName": "fixed-name",
               "RoleArn": "arn:aws:iam::111122223333:role/R"}
    check(hetero_emu.run(request), tmp_path)


def test_zz_names(tmp_path):
    print("NAMES", json.dumps(NAMES))
"""


def test_every_kind_of_job_runs_under_the_tests_tmp_path_with_a_name_of_its_own(
        pytester: pytest.Pytester, fake: FakeBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    write_project(pytester, RUN_TESTS)
    result = pytester.runpytest(*PLUGIN, "-s")
    result.assert_outcomes(passed=5)
    names = json.loads(re.search(r"NAMES (\[.*\])", result.stdout.str()).group(1))  # type: ignore[union-attr]
    assert len(names) == len(set(names)) == 5
    assert all(re.fullmatch(r"test-a-[a-z-]+-gw3-[0-9a-f]{6}-[1-5]", name) for name in names), names
    assert {name.rsplit("-", 1)[1] for name in names} == {"1", "2", "3", "4", "5"}  # one counter per session
    assert len({name.rsplit("-", 2)[1] for name in names}) == 1  # one token per session
    # The engine was asked once for the session, then only by the runs (each run twice: before it asks
    # what the machine has, and as it begins).
    assert fake.call_names().count("ping") == 1 + 2 * 5


def test_a_jobspec_whose_data_holds_the_tests_folder_is_refused(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "code").mkdir(parents=True)
    (project / "code" / "t.py").write_text("")
    spec = api.load_mapping({"entry_point": "t.py", "source_dir": "code", "instance_type": "ml.c5.xlarge",
                             "inputs": {"training": "."}, "output_path": "../out"}, base_dir=project)
    with pytest.raises(UsageError, match=r"output folder .*/project/hetero-emu/output is inside inputs.training"):
        api.relocate(spec, job_name="j", output_path=project / "hetero-emu" / "output")
    with pytest.raises(UsageError, match="is not a SageMaker job name"):
        api.relocate(spec, job_name="no_underscores", output_path=tmp_path / "elsewhere")
    moved = api.relocate(spec, job_name="j-2", output_path=tmp_path / "elsewhere")
    assert (moved.job_name, moved.output_path) == ("j-2", tmp_path / "elsewhere")


def test_a_failed_job_is_returned_with_its_reason_logs_and_artifacts(
        pytester: pytest.Pytester, fake: FakeBackend) -> None:
    fake.scripts["algo-2"] = exits(1, stderr=["boom\n"])
    write_project(pytester, """
import pytest
from emulator import RunOptions

def test_failed(hetero_emu):
    run = hetero_emu.run("job.yaml", RunOptions(grace=0.1))
    assert run.status == "Failed" and run.exit_code == 1
    assert run.hosts["algo-2"].exit_code == 1 and "boom" in run.hosts["algo-2"].log
    assert run.failure_reason.startswith("AlgorithmError: , exit code: 1")
    assert "Failed" in repr(run) and "algo-2=1" in repr(run)
    assert run.model.is_dir()  # the service packs what the hosts left, also of a failed job
""")
    result = pytester.runpytest(*PLUGIN)
    result.assert_outcomes(passed=1)


def test_the_default_image_is_checked_once_per_session_and_only_for_jobs_that_use_it(
        pytester: pytest.Pytester, fake: FakeBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    builds: list[object] = []
    monkeypatch.setattr(api, "build_image", lambda **kw: builds.append(kw))
    monkeypatch.setitem(registry._FACTORIES, "docker", lambda: fake)  # the fake, under the default engine's name
    monkeypatch.delenv("HETERO_EMU_ENGINE")
    fake.images.add("my/own:image")
    write_project(pytester, """
import yaml
from pathlib import Path

def spec(image=None):
    raw = yaml.safe_load(Path(__file__).with_name("job.yaml").read_text())
    return {**raw, "image_uri": image} if image else raw

def test_own_image(hetero_emu):
    assert hetero_emu.run(spec("my/own:image")).status == "Completed"

def test_default_image(hetero_emu):
    assert hetero_emu.run(spec()).status == "Completed"
    assert hetero_emu.run(spec()).status == "Completed"

def test_default_image_again(hetero_emu):
    assert hetero_emu.run(spec()).status == "Completed"
""")
    pytester.runpytest(*PLUGIN, "-k", "own_image").assert_outcomes(passed=1, deselected=2)
    assert builds == []
    pytester.runpytest(*PLUGIN).assert_outcomes(passed=3)
    assert len(builds) == 1


def test_the_sessions_jobs_are_recorded_in_a_folder_of_the_session_not_the_users(
        pytester: pytest.Pytester, fake: FakeBackend, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("HETERO_EMU_STATE_DIR")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "users-state"))
    write_project(pytester, """
import os
from emulator.state import job_records

def test_job(hetero_emu):
    run = hetero_emu.run("job.yaml")
    print("STATE", os.environ["HETERO_EMU_STATE_DIR"])
    assert job_records.find(run.job_name).job_dir == run.job_dir
""")
    result = pytester.runpytest(*PLUGIN, "-s")
    result.assert_outcomes(passed=1)
    state = Path(re.search(r"STATE (\S+)", result.stdout.str()).group(1))  # type: ignore[union-attr]
    assert state.is_relative_to(pytester.path.parent) and len(list((state / "jobs").glob("*.json"))) == 1
    assert not (tmp_path / "users-state").exists()
    assert "HETERO_EMU_STATE_DIR" not in os.environ  # given back when the session ended


def test_an_invalid_job_raises_its_error_with_the_problems_and_the_hint(
        pytester: pytest.Pytester, fake: FakeBackend) -> None:
    write_project(pytester, """
import pytest
from emulator import api
from emulator.errors import SpecError, UsageError

def test_invalid_spec(hetero_emu):
    with pytest.raises(SpecError, match="instance_type"):
        hetero_emu.run({"entry_point": "train.py", "source_dir": "code"})

def test_output_inside_the_data(hetero_emu, tmp_path):
    spec = api.load_mapping({"entry_point": "train.py", "source_dir": "code", "instance_type": "ml.c5.xlarge",
                             "inputs": {"training": str(tmp_path)}}, base_dir=".")
    hetero_emu.run(spec)
""")
    result = pytester.runpytest(*PLUGIN)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["E *UsageError: output folder */hetero-emu/output is inside inputs.training*",
                                 "E * hint: the job would write into the code or data it reads*"])
    assert fake.call_names().count("create_container") == 0


def test_a_second_worker_waits_for_the_first_workers_build_and_then_finds_the_image_up_to_date(
        tmp_path: Path) -> None:
    """What makes "built once per session" hold under pytest-xdist: every worker calls
    `api.build_image`; the one that finds the build lock taken waits, then finds the image built."""
    import fcntl
    import threading
    import time
    from types import SimpleNamespace

    from emulator.backend import image_build
    from emulator.training_images.image_recipes import DEFAULT_VARIANT, load_recipe

    recipe = load_recipe(DEFAULT_VARIANT)
    labels: dict[str, str] = {}  # the engine's image: out of date until the first worker is done
    found = SimpleNamespace(labels=labels, id="sha256:built", attrs={"Size": 1})
    client = SimpleNamespace(images=SimpleNamespace(get=lambda tag: found))
    lines: list[str] = []
    reports: list[image_build.BuildReport] = []
    with open(tmp_path / "build.lock", "a") as first_worker:
        fcntl.flock(first_worker, fcntl.LOCK_EX)  # the first worker is building
        second = threading.Thread(target=lambda: reports.append(
            image_build.build_image(client, recipe, progress=lines.append, cache_dir=tmp_path)))  # type: ignore[arg-type]
        second.start()
        deadline = time.monotonic() + 10
        while not lines and time.monotonic() < deadline:
            time.sleep(0.01)
        assert lines and "waiting for another image build" in lines[0], lines
        assert reports == [] and second.is_alive()  # waiting, not building
        labels[image_build.RECIPE_LABEL] = image_build.recipe_hash(recipe)  # the first worker's build is done
        fcntl.flock(first_worker, fcntl.LOCK_UN)
    second.join(10)
    assert [(r.built, r.waited_seconds is not None) for r in reports] == [(False, True)], lines
    assert "for another build of hetero-emu/training:py311 to finish" in lines[-1]
