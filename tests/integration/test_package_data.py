"""The package as a user gets it: built, checked, installed outside any clone.

`python -m build` makes the sdist and, from it, the wheel (so a file the sdist lacks is missing from
the wheel too), once for this module; `twine check` passes both. The wheel ships the image recipes,
the compose template and the demo's job, and its module lookups find them when it is the only copy of
`emulator` on the path. Installed into a fresh venv (pip, from its cache where it can) it finds the
default image up to date from its own recipes and runs `hetero-emu demo` in an empty folder, and
`serve` and the pytest plugin are there.

Building fetches the build backend from the package index, hence an integration test; only the demo
and `serve` need the engine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from serving import running_server

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "data-offload"

# One worker builds the packages once and runs every test of the file (`--dist loadgroup`).
pytestmark = pytest.mark.xdist_group("package")

_PROBE = r"""
import json, emulator, emulator.training_images.image_recipes as r
from emulator.planning.compose import load_template
from emulator.backend.image_build import recipe_hash
from emulator.planning.hooks import SOURCES
from emulator.cli import DEMO_SPECS
training = r.load_recipe("training")
print(json.dumps({
    "emulator": emulator.__file__,
    "images": str(r.images_dir()),
    "variants": r.variant_names(),
    "files": sorted(p.relative_to(training.folder).as_posix() for p in training.files()),
    "packages": training.packages,
    "hash": recipe_hash(training),
    "hooks": {name: str(path) for name, path in SOURCES.items() if path.is_file()},
    "compose_template": load_template().source,
    "demo": [str(p) for p in DEMO_SPECS if p.is_file()],
}))
"""


def _clean_env(**extra: str) -> dict[str, str]:
    """This environment without what points Python at the checkout (the suite's PYTHONPATH)."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}}
    return {**env, "NO_COLOR": "1", **extra}


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and the wheel of the checkout, built as a release is."""
    tmp = tmp_path_factory.mktemp("package")
    # A copy of the checkout: setuptools builds in the source folder, and a stale build/ there could
    # hand the wheel files the checkout no longer has.
    source = tmp / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv*", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis", "site"))
    built = subprocess.run([sys.executable, "-m", "build", "--outdir", str(tmp / "dist"), str(source)],
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return tmp / "dist"


def _files(folder: Path) -> dict[str, bytes]:
    """The files under `folder` by relative path, without Python's bytecode caches."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


def _wheel(dist: Path) -> Path:
    (wheel,) = dist.glob("hetero_emu-*.whl")
    return wheel


def test_twine_passes_the_sdist_and_the_wheel(dist: Path) -> None:
    files = sorted(dist.iterdir())
    assert sorted(p.suffix for p in files) == [".gz", ".whl"], files
    checked = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *map(str, files)],
                             capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # The sdist holds what its wheel was built from: the mapped folders under their own names.
    (sdist,) = dist.glob("hetero_emu-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"pyproject.toml", "README.md", "CHANGELOG.md", "images/training/recipe.yaml",
            "compose-templates/compose.yaml", "examples/data-offload/job.yaml"} <= names


def test_the_wheel_ships_the_demo_as_the_example_is(dist: Path) -> None:
    with zipfile.ZipFile(_wheel(dist)) as archive:
        shipped = {name.removeprefix("emulator/demo/"): archive.read(name) for name in archive.namelist()
                   if name.startswith("emulator/demo/")}
        entry_points = archive.read(next(n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt")))
    in_repo = _files(DEMO)
    assert shipped.keys() == in_repo.keys()
    assert shipped == in_repo
    text = entry_points.decode()
    assert "hetero-emu = emulator.cli:main" in text
    assert "[pytest11]\nhetero_emu = emulator.pytest_plugin" in text


def test_image_recipes_are_found_from_a_built_wheel(dist: Path, tmp_path: Path) -> None:
    with zipfile.ZipFile(_wheel(dist)) as archive:
        names = set(archive.namelist())
        archive.extractall(tmp_path / "site")
    assert {"emulator/images/README.md", "emulator/images/training/recipe.yaml",
            "emulator/images/training/Dockerfile", "emulator/data/startup/sitecustomize.py",
            "emulator/data/instance/nvidia-smi",
            "emulator/compose_templates/compose.yaml", "emulator/demo/job.yaml"} <= names
    # Only the unpacked wheel provides `emulator`: the checkout is not on the path, cwd is elsewhere.
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path / "site")}
    probe = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env,
                           cwd=tmp_path, timeout=120)
    assert probe.returncode == 0, probe.stderr
    found = json.loads(probe.stdout)
    site = tmp_path / "site" / "emulator"
    assert found["emulator"] == str(site / "__init__.py")
    assert found["images"] == str(site / "images")
    assert "training" in found["variants"]
    # The start-up hook (`--debug-host`, the vCPU count) and the emulated nvidia-smi are staged from the
    # installed package.
    assert found["hooks"] == {"sitecustomize.py": str(site / "data" / "startup" / "sitecustomize.py"),
                              "nvidia-smi": str(site / "data" / "instance" / "nvidia-smi")}
    # `render` fills the top-level compose-templates/compose.yaml, shipped as emulator/compose_templates.
    assert found["compose_template"] == str(site / "compose_templates" / "compose.yaml")
    assert found["demo"] == [str(site / "demo" / "job.yaml")]
    in_checkout = sorted(p.relative_to(ROOT / "images" / "training").as_posix()
                         for p in (ROOT / "images" / "training").rglob("*") if p.is_file())
    assert found["files"] == in_checkout
    assert "openmpi-bin" in found["packages"]
    # Same recipe, same hash: an installed hetero-emu agrees with the checkout on what is up to date.
    from emulator.backend.image_build import recipe_hash

    assert found["hash"] == recipe_hash()


@pytest.fixture(scope="module")
def installed(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel and its serve extra installed by pip, as a user installs it, and
    pytest for the plugin; the venv's bin/ folder. pip's cache makes a second session's install take
    seconds."""
    venv = tmp_path_factory.mktemp("venv")
    # No pip of its own (ensurepip takes seconds): this interpreter's pip installs into it.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet",
         "--disable-pip-version-check", f"{_wheel(dist)}[serve]", "pytest"],
        capture_output=True, text=True, timeout=600, env=_clean_env())
    assert done.returncode == 0, done.stderr[-3000:]
    return venv / "bin"


@pytest.mark.docker
@pytest.mark.usefixtures("training_image", "no_leftovers")
def test_the_installed_package_runs_the_demo_from_an_empty_folder(installed: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    env = _clean_env(HETERO_EMU_STATE_DIR=str(tmp_path / "state"), PATH=f"{installed}:/usr/bin:/bin")
    version = subprocess.run(["hetero-emu", "--version"], capture_output=True, text=True, env=env, cwd=empty,
                             timeout=60)
    from importlib import metadata

    assert version.stdout == f"hetero-emu {metadata.version('hetero-emu')}\n", version.stderr
    # The packaged recipes agree with the checkout's: the image the suite built is up to date for it.
    built = subprocess.run(["hetero-emu", "image", "build"], capture_output=True, text=True, env=env, cwd=empty,
                           timeout=600, stdin=subprocess.DEVNULL)
    assert built.returncode == 0, built.stderr[-3000:]
    assert "hetero-emu/training:py311 is up to date" in built.stdout + built.stderr
    done = subprocess.run(["hetero-emu", "demo"], capture_output=True, text=True, env=env, cwd=empty,
                          timeout=600, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    (job,) = (empty / "hetero-emu-output").iterdir()
    assert job.name.startswith("data-offload-")
    assert json.loads((job / "job.json").read_text())["TrainingJobStatus"] == "Completed"
    assert (job / "output" / "model.tar.gz").is_file()
    # The run wrote nothing into the installed package (the demo's folder is read, never written);
    # pip compiled train.py at install time, the only __pycache__ there.
    site = next((installed.parent / "lib").glob("python3*/site-packages"))
    assert _files(site / "emulator" / "demo") == _files(DEMO)


@pytest.mark.docker
def test_the_installed_package_serves_and_has_its_pytest_plugin(installed: Path, tmp_path: Path) -> None:
    with running_server(tmp_path, program=[str(installed / "hetero-emu")], env=_clean_env()) as server:
        assert server.client("sagemaker").list_training_jobs()["TrainingJobSummaries"] == []
        code, output = server.stop()
    assert code == 130, output  # Ctrl-C's exit code (docs/failures.md)
    assert "Traceback" not in output
    # pytest finds the plugin through the entry point the wheel declares: installing is enough.
    (tmp_path / "test_nothing.py").write_text("def test_nothing() -> None:\n    pass\n")
    plugin = subprocess.run([str(installed / "python"), "-m", "pytest", "--fixtures", "-p", "no:cacheprovider"],
                            capture_output=True, text=True, env=_clean_env(), cwd=tmp_path, timeout=120)
    assert plugin.returncode == 0, plugin.stdout[-2000:] + plugin.stderr[-2000:]
    assert "fixtures defined from emulator.pytest_plugin" in plugin.stdout
    assert "\nhetero_emu" in plugin.stdout
