"""requirements.txt offline (emulator.wheelhouse): the cache key, when the plan mounts a wheelhouse and
sets pip's variables, and the build step with a fake pip (README: requirements.txt)."""

from __future__ import annotations

import hashlib
import io
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fake_backend import FakeBackend

from emulator import api, compose, wheelhouse
from emulator.console import RecordingReporter
from emulator.defaults import DEFAULT_IMAGE
from emulator.errors import WheelhouseError
from emulator.plan import Mount, make_plan, render
from emulator.runner import run_job
from emulator.spec import JobSpec

PIP_VARS = {"PIP_FIND_LINKS": wheelhouse.CONTAINER_PATH, "PIP_NO_INDEX": "1"}
TAG = "cpython-311-linux"

# A stand-in for `python -m pip`: `wheel ... --wheel-dir DIR --requirement FILE` writes one wheel per
# requirement line into DIR and counts its calls beside itself.
FAKE_PIP = '''\
import sys
from pathlib import Path
args = sys.argv[1:]
Path(__file__).with_suffix(".calls").open("a").write("x")
out = Path(args[args.index("--wheel-dir") + 1])
for line in Path(args[args.index("--requirement") + 1]).read_text().splitlines():
    if line and not line.startswith("#"):
        name, version = line.split("==")
        print(f"Collecting {line}")
        (out / f"{name}-{version}-py3-none-any.whl").write_text("wheel")
print("Successfully built")
'''
FAILING_PIP = '''\
import sys
print("Collecting no-such-thing==1.0")
print("ERROR: Could not find a version that satisfies the requirement no-such-thing==1.0 (from versions: none)")
print("ERROR: No matching distribution found for no-such-thing==1.0")
sys.exit(1)
'''


def fake_pip(folder: Path, script: str = FAKE_PIP) -> tuple[str, ...]:
    path = folder / "fake_pip.py"
    path.write_text(script)
    return (sys.executable, str(path))


def calls(pip: tuple[str, ...]) -> int:
    calls_file = Path(pip[1]).with_suffix(".calls")
    return len(calls_file.read_text()) if calls_file.exists() else 0


@pytest.fixture
def with_requirements(project: Path) -> Path:
    requirements = project / "code" / "requirements.txt"
    requirements.write_text("tabulate==0.9.0\n")
    return requirements


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "hetero-emu" / "wheelhouses"


# --------------------------------------------------------------------------------------------------
# Cache key


def test_the_cache_key_is_the_interpreter_and_the_files_hash() -> None:
    digest = hashlib.sha256(b"tabulate==0.9.0\n").hexdigest()
    assert wheelhouse.cache_key(digest, TAG) == f"{TAG}-{digest[:16]}"
    assert wheelhouse.cache_key(digest, TAG) == wheelhouse.cache_key(digest, TAG)
    other_file = hashlib.sha256(b"tabulate==0.8.10\n").hexdigest()
    assert wheelhouse.cache_key(other_file, TAG) != wheelhouse.cache_key(digest, TAG)
    assert wheelhouse.cache_key(digest, "cpython-312-linux") != wheelhouse.cache_key(digest, TAG)
    assert wheelhouse.cache_key(digest, TAG, package=True) == f"{TAG}-{digest[:16]}-setuptools"


def test_the_interpreter_tag_names_this_interpreter() -> None:
    assert wheelhouse.interpreter_tag() == f"{sys.implementation.cache_tag}-{sys.platform}"


def test_the_cache_lives_under_xdg_cache_home(cache: Path) -> None:
    assert wheelhouse.cache_root() == cache


# --------------------------------------------------------------------------------------------------
# Which jobs get one (the toolkit's own conditions)


def test_the_spec_records_the_requirements_files_hash(
    load: Callable[[dict[str, Any]], JobSpec], valid_raw: dict[str, Any], with_requirements: Path
) -> None:
    spec = load(valid_raw)
    assert spec.requirements == wheelhouse.Requirements(
        str(with_requirements.parent), False, hashlib.sha256(b"tabulate==0.9.0\n").hexdigest())


def test_no_requirements_file_no_requirements(load: Callable[[dict[str, Any]], JobSpec],
                                              valid_raw: dict[str, Any]) -> None:
    assert load(valid_raw).requirements is None


@pytest.mark.parametrize("change", [
    {"entry_point": "run.sh"},  # the toolkit runs a shell script as a command: no install
    {"entry_point": "run"},  # nor any other command
    {"container_entry_point": ["python3", "/opt/ml/code/train.py"]},  # no toolkit at all
    {"container_arguments": ["python3", "/opt/ml/code/train.py"]},  # the image's CMD replaced
])
def test_nothing_is_installed_where_the_toolkit_installs_nothing(
    load: Callable[[dict[str, Any]], JobSpec], valid_raw: dict[str, Any], with_requirements: Path, project: Path,
    change: dict[str, Any],
) -> None:
    (project / "code" / "run.sh").write_text("echo hi\n")
    (project / "code" / "run").write_text("echo hi\n")
    assert load({**valid_raw, **change}).requirements is None


def test_a_package_with_setup_py_installs_requirements_whatever_its_entry_point(
    load: Callable[[dict[str, Any]], JobSpec], valid_raw: dict[str, Any], with_requirements: Path, project: Path
) -> None:
    # modules.install: `pip install . -r requirements.txt` for a source_dir with setup.py.
    (project / "code" / "setup.py").write_text("from setuptools import setup\nsetup()\n")
    (project / "code" / "run").write_text("print('hi')\n")
    requirements = load({**valid_raw, "entry_point": "run"}).requirements
    assert requirements is not None and requirements.package
    # Its wheelhouse holds setuptools too (pip's isolated build of "."): a key of its own.
    assert wheelhouse.location(requirements, Path("/c"), TAG).name.endswith("-setuptools")


def test_a_sourcedir_archive_is_read_for_its_requirements(
    load: Callable[[dict[str, Any]], JobSpec], valid_raw: dict[str, Any], project: Path
) -> None:
    archive = project / "sourcedir.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, data in {"./train.py": b"print(1)\n", "./requirements.txt": b"six==1.17.0\n"}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    spec = load({**valid_raw, "source_dir": "sourcedir.tar.gz"})
    digest = hashlib.sha256(b"six==1.17.0\n").hexdigest()
    assert spec.requirements == wheelhouse.Requirements(str(archive), True, digest)


# --------------------------------------------------------------------------------------------------
# The plan: a read-only mount and pip's variables, only with a requirements.txt


def test_the_plan_mounts_the_wheelhouse_read_only_on_every_host(
    load: Callable[[dict[str, Any]], JobSpec], valid_raw: dict[str, Any], with_requirements: Path, tmp_path: Path
) -> None:
    spec = load(valid_raw)
    plan = make_plan(spec, "job", wheel_cache=tmp_path / "wheels", python_tag=TAG)
    folder = str(tmp_path / "wheels" / wheelhouse.cache_key(spec.requirements.digest, TAG))  # type: ignore[union-attr]
    assert plan.wheelhouse == folder
    for host in plan.hosts:
        assert Mount(folder, wheelhouse.CONTAINER_PATH, read_only=True) in host.container.mounts
        assert {k: host.container.environment[k] for k in PIP_VARS} == PIP_VARS
    # Pure: the same arguments, an equal plan.
    assert plan == make_plan(spec, "job", wheel_cache=tmp_path / "wheels", python_tag=TAG)


def test_without_requirements_no_mount_and_no_pip_variables(
    load: Callable[[dict[str, Any]], JobSpec], valid_raw: dict[str, Any], tmp_path: Path
) -> None:
    plan = make_plan(load(valid_raw), "job", wheel_cache=tmp_path / "wheels", python_tag=TAG)
    assert plan.wheelhouse is None
    for host in plan.hosts:
        assert all(m.target != wheelhouse.CONTAINER_PATH for m in host.container.mounts)
        assert not set(PIP_VARS) & set(host.container.environment)


def test_the_specs_own_pip_variables_win(
    load: Callable[[dict[str, Any]], JobSpec], valid_raw: dict[str, Any], with_requirements: Path
) -> None:
    plan = make_plan(load({**valid_raw, "environment": {"PIP_NO_INDEX": "0"}}), "job", python_tag=TAG)
    assert plan.hosts[0].container.environment["PIP_NO_INDEX"] == "0"
    assert plan.hosts[0].container.environment["PIP_FIND_LINKS"] == wheelhouse.CONTAINER_PATH


def test_render_and_compose_show_the_mount_and_the_variables(
    load: Callable[[dict[str, Any]], JobSpec], valid_raw: dict[str, Any], with_requirements: Path, tmp_path: Path
) -> None:
    plan = make_plan(load(valid_raw), "job", wheel_cache=tmp_path / "wheels", python_tag=TAG)
    assert (f"  wheels   requirements.txt: {plan.wheelhouse} -> {wheelhouse.CONTAINER_PATH} (read-only), "
            "PIP_FIND_LINKS=/opt/hetero-emu/wheelhouse PIP_NO_INDEX=1") in render(plan).splitlines()
    for service in compose.compose_project(plan)["services"].values():
        assert f"{plan.wheelhouse}:{wheelhouse.CONTAINER_PATH}:ro" in service["volumes"]
        assert {k: service["environment"][k] for k in PIP_VARS} == PIP_VARS


# --------------------------------------------------------------------------------------------------
# The build step


def requirements_in(folder: Path, text: str = "tabulate==0.9.0\n") -> wheelhouse.Requirements:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "requirements.txt").write_text(text)
    return wheelhouse.Requirements(str(folder), False, hashlib.sha256(text.encode()).hexdigest())


def test_the_wheels_are_built_once_then_found_in_the_cache(tmp_path: Path) -> None:
    pip = fake_pip(tmp_path)
    requirements = requirements_in(tmp_path / "code")
    target = tmp_path / "cache" / "key"
    lines: list[str] = []
    assert wheelhouse.ensure(requirements, target, DEFAULT_IMAGE, lines.append, pip=pip) is True
    assert [p.name for p in target.iterdir()] == ["tabulate-0.9.0-py3-none-any.whl"]
    assert lines[0] == f"requirements.txt: building its wheels once: pip wheel -r {tmp_path}/code/requirements.txt"
    assert "  Collecting tabulate==0.9.0" in lines  # pip's own lines, as progress
    assert lines[-1].startswith(f"requirements.txt: 1 wheel(s) in {target} (")
    lines.clear()
    assert wheelhouse.ensure(requirements, target, DEFAULT_IMAGE, lines.append, pip=pip) is False
    assert lines == [f"requirements.txt: wheels cached in {target}"]
    assert calls(pip) == 1
    assert [p.name for p in target.parent.iterdir()] == ["key"]  # no partial folder left


def test_an_archives_requirements_are_built_from_it_unpacked(tmp_path: Path) -> None:
    archive = tmp_path / "sourcedir.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, data in {"train.py": b"print(1)\n", "requirements.txt": b"six==1.17.0\n"}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    requirements = wheelhouse.Requirements(str(archive), True, hashlib.sha256(b"six==1.17.0\n").hexdigest())
    lines: list[str] = []
    target = tmp_path / "cache" / "key"
    assert wheelhouse.ensure(requirements, target, DEFAULT_IMAGE, lines.append, pip=fake_pip(tmp_path))
    assert [p.name for p in target.iterdir()] == ["six-1.17.0-py3-none-any.whl"]
    assert lines[0] == f"requirements.txt: building its wheels once: pip wheel -r {archive}!requirements.txt"


def test_a_failing_pip_is_a_clear_error_with_its_tail_and_leaves_no_wheelhouse(tmp_path: Path) -> None:
    requirements = requirements_in(tmp_path / "code", "no-such-thing==1.0\n")
    target = tmp_path / "cache" / "key"
    with pytest.raises(WheelhouseError) as caught:
        wheelhouse.ensure(requirements, target, DEFAULT_IMAGE, lambda line: None,
                          pip=fake_pip(tmp_path, FAILING_PIP))
    err = caught.value
    assert err.exit_code == 3
    assert err.message.startswith(f"requirements.txt: pip could not build the wheels of {tmp_path}/code/"
                                  "requirements.txt (exit code 1): ERROR: No matching distribution found for "
                                  "no-such-thing==1.0; pip's last lines:\n")
    assert "    ERROR: Could not find a version that satisfies the requirement no-such-thing==1.0" in err.message
    assert err.hint is not None and "no container was started" in err.hint
    assert list(target.parent.iterdir()) == []


@pytest.mark.parametrize(("implementation", "version", "image", "refused"), [
    ("cpython", (3, 12), DEFAULT_IMAGE, True),
    ("pypy", (3, 11), DEFAULT_IMAGE, True),
    ("cpython", (3, 11), DEFAULT_IMAGE, False),
    ("cpython", (3, 12), "my/own:image", False),  # another image's Python is the user's to match
])
def test_the_default_image_needs_a_cpython_311_host(implementation: str, version: tuple[int, int], image: str,
                                                    refused: bool) -> None:
    if refused:
        with pytest.raises(WheelhouseError, match="default image's .* is CPython 3.11"):
            wheelhouse.check_interpreter(image, implementation, version)
    else:
        wheelhouse.check_interpreter(image, implementation, version)


# --------------------------------------------------------------------------------------------------
# The runner builds it before anything is staged or created


def test_the_runner_fails_before_any_container_when_pip_fails(
    load: Callable[[dict[str, Any]], JobSpec], valid_raw: dict[str, Any], with_requirements: Path,
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(wheelhouse, "PIP", fake_pip(tmp_path, FAILING_PIP))
    spec = load(valid_raw)
    fake = FakeBackend()
    with pytest.raises(WheelhouseError):
        run_job(spec, backend=fake, reporter=RecordingReporter())
    assert fake.created == [] and fake.networks_created == []
    assert not (spec.output_path / "hetero-test").exists()


def test_the_runner_builds_the_wheelhouse_then_runs(
    load: Callable[[dict[str, Any]], JobSpec], valid_raw: dict[str, Any], with_requirements: Path,
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    pip = fake_pip(tmp_path)
    monkeypatch.setattr(wheelhouse, "PIP", pip)
    reporter = RecordingReporter()
    result = run_job(load(valid_raw), backend=FakeBackend(), reporter=reporter)
    assert result.status == "Completed"
    assert "requirements.txt: wheels for the hosts' pip (no package index in the containers)" in reporter.steps
    [house] = cache.iterdir()
    assert [p.name for p in house.iterdir()] == ["tabulate-0.9.0-py3-none-any.whl"]
    assert calls(pip) == 1


def test_render_builds_the_wheelhouse_compose_yaml_mounts(
    load: Callable[[dict[str, Any]], JobSpec], valid_raw: dict[str, Any], with_requirements: Path,
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(wheelhouse, "PIP", fake_pip(tmp_path))
    lines: list[str] = []
    plan = api.render(load(valid_raw), tmp_path / "rendered", progress=lines.append)
    assert plan.wheelhouse is not None
    assert [p.name for p in Path(plan.wheelhouse).iterdir()] == ["tabulate-0.9.0-py3-none-any.whl"]
    assert f"{plan.wheelhouse}:{wheelhouse.CONTAINER_PATH}:ro" in (tmp_path / "rendered" / "compose.yaml").read_text()
    assert lines[0].startswith("requirements.txt: building its wheels once")
