"""requirements.txt offline (emulator.run.wheelhouse): the cache key, when the plan mounts a wheelhouse and
sets pip's variables, the build step with a fake engine (its `build_wheelhouse` writes a wheel per
line, as pip in the image would), and what pip's failures are said as (README: requirements.txt)."""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fake_backend import FakeBackend

from emulator import api
from emulator.backend import pip_output
from emulator.defaults import DEFAULT_IMAGE
from emulator.errors import SpecError, WheelhouseError
from emulator.jobspec import JobSpec
from emulator.jobspec.requirements import MAX_BYTES
from emulator.planning import compose, wheelhouse_mount
from emulator.planning.plan import Mount, make_plan, summary
from emulator.reports.console import RecordingReporter
from emulator.run import wheelhouse
from emulator.run.runner import run_job

PIP_VARS = {"PIP_FIND_LINKS": wheelhouse_mount.CONTAINER_PATH, "PIP_NO_INDEX": "1"}
IMAGE = "hetero-emu/pytorch-training:1.11.0-py39"

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


def test_the_cache_key_is_the_image_and_the_files_hash() -> None:
    digest = hashlib.sha256(b"tabulate==0.9.0\n").hexdigest()
    key = wheelhouse_mount.cache_key(digest, IMAGE)
    assert key == f"hetero-emu_pytorch-training_1.11.0-py39-{digest[:16]}" and "/" not in key
    other_file = hashlib.sha256(b"tabulate==0.8.10\n").hexdigest()
    assert wheelhouse_mount.cache_key(other_file, IMAGE) != key
    assert wheelhouse_mount.cache_key(digest, DEFAULT_IMAGE) != key
    assert wheelhouse_mount.cache_key(digest, IMAGE, package=True) == f"{key}-setuptools"


def test_the_digest_covers_every_file_the_requirements_include() -> None:
    files = {"requirements.txt": b"-r base.txt\n--constraint=pins/c.txt\ngrpcio-tools\n", "base.txt": b"six\n",
             "pins/c.txt": b"-r ../base.txt\nprotobuf==3.20.2\n"}
    digest = wheelhouse.included_digest("requirements.txt", files.get)
    assert digest == wheelhouse.included_digest("requirements.txt", dict(files).get)
    for name in files:  # an edit of any of them, nested or not, is another wheelhouse
        changed = {**files, name: files[name] + b"# edited\n"}
        assert wheelhouse.included_digest("requirements.txt", changed.get) != digest, name
    assert wheelhouse.included_digest("requirements.txt", {**files, "base.txt": None}.get) != digest


def test_the_cache_lives_under_xdg_cache_home(cache: Path) -> None:
    assert wheelhouse_mount.cache_root() == cache


# --------------------------------------------------------------------------------------------------
# Which jobs get one (the toolkit's own conditions)


def test_the_spec_records_the_requirements_files_hash(
    load: Callable[[dict[str, Any]], JobSpec], valid_raw: dict[str, Any], with_requirements: Path
) -> None:
    spec = load(valid_raw)
    assert spec.requirements == wheelhouse.Requirements(
        str(with_requirements.parent), False,
        wheelhouse.included_digest("requirements.txt", {"requirements.txt": b"tabulate==0.9.0\n"}.get))
    # A file it includes is read too: editing it gives the spec another digest.
    with_requirements.write_text("-r more.txt\n")
    (with_requirements.parent / "more.txt").write_text("six==1.17.0\n")
    first = load(valid_raw).requirements
    (with_requirements.parent / "more.txt").write_text("six==1.16.0\n")
    assert first is not None and load(valid_raw).requirements != first


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
    assert wheelhouse_mount.location(requirements, Path("/c"), IMAGE).name.endswith("-setuptools")


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
    digest = wheelhouse.included_digest("requirements.txt", {"requirements.txt": b"six==1.17.0\n"}.get)
    assert spec.requirements == wheelhouse.Requirements(str(archive), True, digest)


def test_an_include_outside_the_code_is_not_read(
    load: Callable[[dict[str, Any]], JobSpec], valid_raw: dict[str, Any], with_requirements: Path, tmp_path: Path
) -> None:
    # A file beside the code (or /etc/passwd) is never read here: it counts as absent, so the digest
    # stays the same whatever it holds.
    outside = tmp_path / "secret.txt"
    outside.write_text("one\n")
    with_requirements.write_text(f"-r {outside}\n-c ../../secret.txt\n-r /etc/passwd\n")
    first = load(valid_raw).requirements
    outside.write_text("two\n")
    assert first is not None and load(valid_raw).requirements == first


def _archive(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.parametrize("where", ["folder", "archive"])
def test_a_huge_requirements_file_is_refused_naming_it_not_read_into_memory(
    load: Callable[[dict[str, Any]], JobSpec], valid_raw: dict[str, Any], with_requirements: Path,
    project: Path, where: str,
) -> None:
    # A code archive from a remote client (serve) can hold gigabytes that compress to little.
    huge = b"six\n" * (MAX_BYTES // 4 + 1)
    if where == "folder":
        with_requirements.write_text("-r more/big.txt\n")
        (project / "code" / "more").mkdir()
        (project / "code" / "more" / "big.txt").write_bytes(huge)
        raw = valid_raw
    else:
        _archive(project / "sourcedir.tar.gz", {"train.py": b"print(1)\n", "requirements.txt": b"-r more/big.txt\n",
                                                "more/big.txt": huge})
        raw = {**valid_raw, "source_dir": "sourcedir.tar.gz"}
    with pytest.raises(SpecError) as refused:
        load(raw)
    text = str(refused.value)
    assert "source_dir" in text and "more/big.txt is over 1 MiB" in text, text


# --------------------------------------------------------------------------------------------------
# The plan: a read-only mount and pip's variables, only with a requirements.txt


def test_the_plan_mounts_the_wheelhouse_read_only_on_every_host(
    load: Callable[[dict[str, Any]], JobSpec], valid_raw: dict[str, Any], with_requirements: Path, tmp_path: Path
) -> None:
    spec = load(valid_raw)
    plan = make_plan(spec, "job", wheel_cache=tmp_path / "wheels")
    folder = str(tmp_path / "wheels" / wheelhouse_mount.cache_key(spec.requirements.digest, spec.image_uri))  # type: ignore[union-attr]
    assert plan.wheelhouse == folder
    for host in plan.hosts:
        assert Mount(folder, wheelhouse_mount.CONTAINER_PATH, read_only=True) in host.container.mounts
        assert {k: host.container.environment[k] for k in PIP_VARS} == PIP_VARS
    # Pure: the same arguments, an equal plan.
    assert plan == make_plan(spec, "job", wheel_cache=tmp_path / "wheels")


def test_without_requirements_no_mount_and_no_pip_variables(
    load: Callable[[dict[str, Any]], JobSpec], valid_raw: dict[str, Any], tmp_path: Path
) -> None:
    plan = make_plan(load(valid_raw), "job", wheel_cache=tmp_path / "wheels")
    assert plan.wheelhouse is None
    for host in plan.hosts:
        assert all(m.target != wheelhouse_mount.CONTAINER_PATH for m in host.container.mounts)
        assert not set(PIP_VARS) & set(host.container.environment)


def test_the_specs_own_pip_variables_win(
    load: Callable[[dict[str, Any]], JobSpec], valid_raw: dict[str, Any], with_requirements: Path
) -> None:
    plan = make_plan(load({**valid_raw, "environment": {"PIP_NO_INDEX": "0"}}), "job")
    assert plan.hosts[0].container.environment["PIP_NO_INDEX"] == "0"
    assert plan.hosts[0].container.environment["PIP_FIND_LINKS"] == wheelhouse_mount.CONTAINER_PATH


def test_render_and_compose_show_the_mount_and_the_variables(
    load: Callable[[dict[str, Any]], JobSpec], valid_raw: dict[str, Any], with_requirements: Path, tmp_path: Path
) -> None:
    plan = make_plan(load(valid_raw), "job", wheel_cache=tmp_path / "wheels")
    assert (f"  wheels   requirements.txt: {plan.wheelhouse} -> {wheelhouse_mount.CONTAINER_PATH} (read-only), "
            "PIP_FIND_LINKS=/opt/hetero-emu/wheelhouse PIP_NO_INDEX=1") in summary(plan).splitlines()
    for service in compose.compose_project(plan)["services"].values():
        assert f"{plan.wheelhouse}:{wheelhouse_mount.CONTAINER_PATH}:ro" in service["volumes"]
        assert {k: service["environment"][k] for k in PIP_VARS} == PIP_VARS


# --------------------------------------------------------------------------------------------------
# The build step


def requirements_in(folder: Path, text: str = "tabulate==0.9.0\n") -> wheelhouse.Requirements:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "requirements.txt").write_text(text)
    return wheelhouse.Requirements(str(folder), False, hashlib.sha256(text.encode()).hexdigest())


def test_the_wheels_are_resolved_once_per_image_then_found_in_the_cache(tmp_path: Path) -> None:
    fake = FakeBackend()
    requirements = requirements_in(tmp_path / "code")
    target = tmp_path / "cache" / "key"
    lines: list[str] = []
    assert wheelhouse.ensure(requirements, target, "sha256:one", lines.append, builder(fake)) is True
    assert sorted(p.name for p in target.iterdir()) == [".image-id", "tabulate-0.9.0-py3-none-any.whl"]
    assert lines[0] == (f"requirements.txt: resolving {tmp_path}/code/requirements.txt against the job's image, "
                        "once")
    assert "  Collecting tabulate==0.9.0" in lines  # pip's own lines, as progress
    assert lines[-1].startswith(f"requirements.txt: 1 wheel(s) in {target} (")
    lines.clear()
    assert wheelhouse.ensure(requirements, target, "sha256:one", lines.append, builder(fake)) is False
    assert lines == [f"requirements.txt: wheels cached in {target}"]
    assert len(fake.images.wheelhouse_builds) == 1
    # The image was rebuilt (another id): resolved again, in place.
    assert wheelhouse.ensure(requirements, target, "sha256:two", lines.append, builder(fake)) is True
    assert (target / ".image-id").read_text() == "sha256:two\n" and len(fake.images.wheelhouse_builds) == 2
    assert [p.name for p in target.parent.iterdir()] == ["key"]  # no partial or old folder left


def builder(fake: FakeBackend, image: str = IMAGE) -> wheelhouse.Builder:
    return lambda code, out, progress, shown: fake.images.build_wheelhouse(image, code, out, progress, shown)


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
    assert wheelhouse.ensure(requirements, target, "sha256:x", lines.append, builder(FakeBackend()))
    assert (target / "six-1.17.0-py3-none-any.whl").is_file()
    assert lines[0] == f"requirements.txt: resolving {archive}!requirements.txt against the job's image, once"


def test_a_failing_build_leaves_no_wheelhouse(tmp_path: Path) -> None:
    fake = FakeBackend()
    fake.images.wheelhouse_failure = WheelhouseError("requirements.txt: no-such-thing==1.0: not found")
    target = tmp_path / "cache" / "key"
    with pytest.raises(WheelhouseError):
        wheelhouse.ensure(requirements_in(tmp_path / "code"), target, "sha256:x", lambda line: None, builder(fake))
    assert list(target.parent.iterdir()) == []


# pip's own words (pip 24 and 26), and what the error makes of them.
NO_WHEEL_FOR_PYTHON = """\
Collecting debugpy==1.8.22
ERROR: Ignored the following yanked versions: 1.4.2, 1.8.10
ERROR: Ignored the following versions that require a different python version: 1.8.22 Requires-Python >=3.10
ERROR: Could not find a version that satisfies the requirement debugpy==1.8.22 (from versions: 1.8.20, 1.8.21)
ERROR: No matching distribution found for debugpy==1.8.22"""
NOT_FOUND = """\
ERROR: Could not find a version that satisfies the requirement no-such-thing==1.0 (from versions: none)
ERROR: No matching distribution found for no-such-thing==1.0"""
CONFLICT = """\
ERROR: Cannot install -r requirements.txt (line 1) and protobuf==3.20.2 because these package versions have \
conflicting dependencies.

The conflict is caused by:
    The user requested protobuf==3.20.2
    grpcio-tools 1.62.0 depends on protobuf<5.0dev and >=4.21.6

To fix this you could try to:
ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/en/latest/topics/dependency-resolution/"""
BUILD_FAILED = """\
  error: subprocess-exited-with-error
  ERROR: Failed building wheel for numpy
Failed to build numpy
ERROR: Failed to build installable wheels for some pyproject.toml based projects (numpy)"""
NO_INDEX = """\
WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after connection broken \
by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object>: Failed to establish a new \
connection: [Errno -3] Temporary failure in name resolution')': /simple/six/
ERROR: Could not find a version that satisfies the requirement six (from versions: none)
ERROR: No matching distribution found for six"""


@pytest.mark.parametrize(("output", "said"), [
    (NO_WHEEL_FOR_PYTHON, "debugpy==1.8.22: no release of it installs on Python 3.9 (releases for other Pythons: "
                          "1.8.22 Requires-Python >=3.10)"),
    (NOT_FOUND, "no-such-thing==1.0: not found on the package index for Python 3.9 (no such package or version)"),
    (CONFLICT, "conflicting requirements for Python 3.9: The user requested protobuf==3.20.2; grpcio-tools 1.62.0 "
               "depends on protobuf<5.0dev and >=4.21.6"),
    (BUILD_FAILED, "numpy: no wheel of it for Python 3.9, and its source package does not build there"),
    (NO_INDEX, "the package index could not be reached from the image's container"),
    (NOT_FOUND + "\nINDEX_UNREACHABLE http://127.0.0.1:9/simple (<urlopen error [Errno 111] Connection refused>)",
     "the package index could not be reached from the image's container: http://127.0.0.1:9/simple"),
])
def test_pips_failures_are_said_naming_the_requirement_the_python_and_why(output: str, said: str) -> None:
    assert pip_output.pip_failure(output.splitlines(), "3.9").startswith(said)
    err = pip_output.failure("code/requirements.txt", output.splitlines(), "3.9", 1)
    assert err.exit_code == 3 and err.message.startswith(f"requirements.txt: {said}")
    assert output.splitlines()[-1] in err.message  # pip's last lines follow
    assert err.hint is not None and "no container of the job was started" in err.hint


# --------------------------------------------------------------------------------------------------
# The runner builds it before anything is staged or created


def test_the_runner_fails_before_any_container_when_pip_fails(
    load: Callable[[dict[str, Any]], JobSpec], valid_raw: dict[str, Any], with_requirements: Path, cache: Path,
) -> None:
    spec = load(valid_raw)
    fake = FakeBackend()
    fake.images.wheelhouse_failure = pip_output.failure("x", NOT_FOUND.splitlines(), "3.11", 1)
    with pytest.raises(WheelhouseError):
        run_job(spec, backend=fake, reporter=RecordingReporter())
    assert fake.created == [] and fake.networks_created == []
    assert not (spec.output_path / "hetero-test").exists()


def test_the_runner_resolves_the_wheelhouse_in_the_jobs_image_then_runs(
    load: Callable[[dict[str, Any]], JobSpec], valid_raw: dict[str, Any], with_requirements: Path, cache: Path,
) -> None:
    fake = FakeBackend()
    reporter = RecordingReporter()
    result = run_job(load(valid_raw), backend=fake, reporter=reporter)
    assert result.status == "Completed"
    assert "requirements.txt: wheels for the hosts' pip (no package index in the containers)" in reporter.steps
    assert fake.images.wheelhouse_builds == [DEFAULT_IMAGE]
    [house] = cache.iterdir()
    assert sorted(p.name for p in house.iterdir()) == [".image-id", "tabulate-0.9.0-py3-none-any.whl"]
    assert (house / ".image-id").read_text() == f"sha256:id-of-{DEFAULT_IMAGE}\n"
    assert fake.call_names().index("images.build_wheelhouse") < fake.call_names().index("create_network")


def test_render_builds_the_wheelhouse_compose_yaml_mounts(
    load: Callable[[dict[str, Any]], JobSpec], valid_raw: dict[str, Any], with_requirements: Path,
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeBackend()
    monkeypatch.setattr(api, "engine", lambda name=None: fake)
    lines: list[str] = []
    plan = api.render(load(valid_raw), tmp_path / "rendered", progress=lines.append)
    assert plan.wheelhouse is not None
    assert (Path(plan.wheelhouse) / "tabulate-0.9.0-py3-none-any.whl").is_file()
    rendered = (tmp_path / "rendered" / "compose.yaml").read_text()
    assert f"{plan.wheelhouse}:{wheelhouse_mount.CONTAINER_PATH}:ro" in rendered
    assert lines[0].startswith("requirements.txt: resolving")


def test_render_without_the_image_warns_and_writes_the_rest(
    load: Callable[[dict[str, Any]], JobSpec], valid_raw: dict[str, Any], with_requirements: Path,
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeBackend(images=())
    monkeypatch.setattr(api, "engine", lambda name=None: fake)
    warnings: list[str] = []
    plan = api.render(load(valid_raw), tmp_path / "rendered", progress=lambda line: None, warn=warnings.append)
    assert fake.images.wheelhouse_builds == [] and (tmp_path / "rendered" / "compose.yaml").is_file()
    assert any(f"({plan.wheelhouse}) was not built: image {DEFAULT_IMAGE} is not in the engine" in w
               for w in warnings), warnings
