"""requirements.txt offline, on the real engine with the real toolkit (README: requirements.txt).

A job whose source_dir has a requirements.txt naming a small pure-Python package the default image
lacks: pip resolves it once in a container of the job's image, every host's toolkit runs its own
`pip install -r requirements.txt` against the read-only wheelhouse and the script imports the
package; a second run finds the wheels cached. On a framework image of another Python (PyTorch 1.11 on
3.9), what the image has is not fetched again and the wheels are the image's Python's. A requirement
pip cannot find fails the run before anything is staged or created, naming it and the Python.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from emulator.errors import WheelhouseError
from emulator.jobspec import validate
from emulator.planning import wheelhouse_mount
from emulator.reports.console import RecordingReporter
from emulator.run import wheelhouse
from emulator.run.runner import run_job

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image", "no_leftovers")]

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "tabulate==0.9.0"  # pure Python, one module, not in the default image
MISSING = "hetero-emu-no-such-package-4f2a==1.0"

TRAIN = '''\
import json, os
import tabulate
from pathlib import Path
rc = json.loads(Path("/opt/ml/input/config/resourceconfig.json").read_text())
try:
    Path("/opt/hetero-emu/wheelhouse/new.whl").write_text("x")
    write = "written"
except OSError as err:
    write = err.__class__.__name__ + " " + str(err.errno)
print("SEEN " + json.dumps({"host": rc["current_host"], "version": tabulate.__version__,
                            "module": tabulate.__file__, "wheels": sorted(os.listdir("/opt/hetero-emu/wheelhouse")),
                            "write": write,
                            "env": {k: os.environ.get(k) for k in ("PIP_FIND_LINKS", "PIP_NO_INDEX")}}), flush=True)
'''


def _raw(tmp_path: Path, requirement: str, name: str) -> dict[str, Any]:
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "train.py").write_text(TRAIN)
    (code / "requirements.txt").write_text(f"# the job's own dependencies\n{requirement}\n")
    return {
        "job_name": name,
        "entry_point": "train.py",
        "source_dir": "code",
        "output_path": str(tmp_path / "out"),
        "instance_groups": [
            {"instance_group_name": "data_group", "instance_type": "ml.c5.xlarge", "instance_count": 1},
            {"instance_group_name": "train_group", "instance_type": "ml.c5.xlarge", "instance_count": 1},
        ],
    }


@pytest.fixture
def wheel_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache of this test's own, so the first run builds (the user's cache is never touched)."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    return cache / "hetero-emu" / "wheelhouses"


def test_the_toolkit_installs_requirements_from_the_wheelhouse_built_once(tmp_path: Path, wheel_cache: Path) -> None:
    spec = validate(_raw(tmp_path, PACKAGE, "wheels-first"), base_dir=tmp_path)
    first = RecordingReporter()
    started = time.monotonic()
    result = run_job(spec, reporter=first)
    built = time.monotonic() - started
    assert result.status == "Completed", result.failure_reason
    assert any(line.startswith("requirements.txt: resolving") for line in first.infos)
    assert ("requirements.txt: pip of hetero-emu/training:py311 (Python 3.11) decides what the image lacks"
            in first.infos)
    # One wheelhouse under the cache, named by the image and the file's hash, holding the wheel.
    [house] = wheel_cache.iterdir()
    assert house.name == wheelhouse_mount.cache_key(spec.requirements.digest, spec.image_uri)  # type: ignore[union-attr]
    assert sorted(p.name for p in house.iterdir()) == [".image-id", "tabulate-0.9.0-py3-none-any.whl"]

    for host in ("algo-1", "algo-2"):
        log = [line for h, _, line in first.lines if h == host]
        text = "\n".join(log)
        # The toolkit's own install step ran (modules.install_requirements), with pip reading the mount.
        assert "Installing dependencies from requirements.txt" in text
        assert "Looking in links: /opt/hetero-emu/wheelhouse" in text
        assert ("Processing /opt/hetero-emu/wheelhouse/tabulate-0.9.0-py3-none-any.whl "
                "(from -r requirements.txt (line 2))") in text
        assert "Successfully installed tabulate-0.9.0" in text
        [seen] = [json.loads(line[5:]) for line in log if line.startswith("SEEN ")]
        assert seen["version"] == "0.9.0"
        assert seen["module"].startswith("/opt/venv/lib/python3.11/site-packages/")
        assert seen["wheels"] == [wheelhouse.IMAGE_ID_FILE, "tabulate-0.9.0-py3-none-any.whl"]
        assert seen["write"] == "OSError 30"  # EROFS: the wheelhouse is read-only on every host
        assert seen["env"] == {"PIP_FIND_LINKS": "/opt/hetero-emu/wheelhouse", "PIP_NO_INDEX": "1"}

    # The second run of the same file builds nothing.
    second = RecordingReporter()
    started = time.monotonic()
    again = run_job(validate(_raw(tmp_path, PACKAGE, "wheels-second"), base_dir=tmp_path), reporter=second)
    cached = time.monotonic() - started
    assert again.status == "Completed", again.failure_reason
    assert not any(line.startswith("requirements.txt: resolving") for line in second.infos)
    assert f"requirements.txt: wheels cached in {house}" in second.infos
    print(f"\nrequirements.txt job: first run (build) {built:.1f}s, second run (cached) {cached:.1f}s")


def test_a_package_with_setup_py_is_installed_offline_too(tmp_path: Path, wheel_cache: Path) -> None:
    # modules.install: `pip install . -r requirements.txt`; building "." needs setuptools, which the
    # wheelhouse of a source_dir with setup.py holds.
    raw = _raw(tmp_path, PACKAGE, "wheels-package")
    (tmp_path / "code" / "setup.py").write_text(
        "from setuptools import setup\nsetup(name='job-code', version='0.1', py_modules=['train'])\n")
    spec = validate(raw, base_dir=tmp_path)
    reporter = RecordingReporter()
    result = run_job(spec, reporter=reporter)
    assert result.status == "Completed", result.failure_reason
    [house] = wheel_cache.iterdir()
    assert house.name.endswith("-setuptools")
    assert sorted(p.name.split("-")[0] for p in house.iterdir()) == [".image", "setuptools", "tabulate", "wheel"]
    for host in ("algo-1", "algo-2"):
        text = "\n".join(line for h, _, line in reporter.lines if h == host)
        assert "Installing module." in text  # the toolkit's package path, not install_requirements
        assert "Successfully installed job-code-0.1 tabulate-0.9.0" in text
        assert '"version": "0.9.0"' in text


def test_a_requirement_pip_cannot_find_fails_before_anything_is_created(tmp_path: Path, wheel_cache: Path) -> None:
    spec = validate(_raw(tmp_path, MISSING, "wheels-missing"), base_dir=tmp_path)
    reporter = RecordingReporter()
    with pytest.raises(WheelhouseError) as caught:
        run_job(spec, reporter=reporter)
    message = caught.value.message
    assert caught.value.exit_code == 3
    assert f"{tmp_path / 'code'}/requirements.txt" in message
    assert ("requirements.txt: hetero-emu-no-such-package-4f2a==1.0: not found on the package index for Python "
            "3.11") in message
    assert "No matching distribution found" in message  # pip's own last lines follow
    # Nothing staged, no half-built wheelhouse (no_leftovers checks the engine).
    assert not (tmp_path / "out" / "wheels-missing").exists()
    assert not wheel_cache.exists() or not any(wheel_cache.iterdir())
    assert not reporter.lines


def test_the_cli_says_which_requirement_failed_and_exits_3(tmp_path: Path, wheel_cache: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump(_raw(tmp_path, MISSING, "wheels-cli")))
    done = subprocess.run([sys.executable, "-m", "emulator.cli", "run", str(spec)], capture_output=True,
                          text=True, timeout=300, cwd=REPO, check=False,
                          env={**os.environ, "NO_COLOR": "1", "XDG_CACHE_HOME": str(wheel_cache.parents[1])})
    assert done.returncode == 3, done.stderr
    assert ("requirements.txt: hetero-emu-no-such-package-4f2a==1.0: not found on the package index for Python "
            "3.11") in done.stderr
    assert "No matching distribution found for hetero-emu-no-such-package-4f2a==1.0" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out" / "wheels-cli").exists()


GRPC_TRAIN = """\
import json, platform
import google.protobuf, grpc_tools, torchvision
print("GRPC_SEEN " + json.dumps({"python": platform.python_version(), "protobuf": google.protobuf.__version__,
                                 "torchvision": torchvision.__version__}), flush=True)
"""


def test_requirements_resolve_against_a_framework_image_of_another_python(
        tmp_path: Path, wheel_cache: Path, framework_image: Callable[[str, str, str], str]) -> None:
    """The PyTorch gRPC example's requirements.txt on PyTorch 1.11 (py38 -> Python 3.9): torchvision,
    which the image has, is not fetched; grpcio-tools and protobuf come as wheels for cp39."""
    image = framework_image("pytorch", "1.11.0", "py38")
    raw = _raw(tmp_path, "torchvision\ngrpcio-tools\nprotobuf==3.20.2", "wheels-grpc")
    (tmp_path / "code" / "train.py").write_text(GRPC_TRAIN)
    spec = validate({**raw, "image_uri": image}, base_dir=tmp_path)
    reporter = RecordingReporter()
    result = run_job(spec, reporter=reporter)
    assert result.status == "Completed", result.failure_reason
    [house] = wheel_cache.iterdir()
    wheels = sorted(p.name for p in house.glob("*.whl"))
    assert not any(w.startswith("torchvision") for w in wheels), wheels  # the image has it
    assert any(w.startswith("protobuf-3.20.2-") for w in wheels), wheels
    assert all("cp39" in w or "py3" in w or "py2.py3" in w for w in wheels), wheels
    assert any(w.startswith("grpcio_tools-") and "cp39" in w for w in wheels), wheels
    seen = [json.loads(line.split("GRPC_SEEN ", 1)[1]) for _, _, line in reporter.lines if "GRPC_SEEN " in line]
    assert [s["python"].rsplit(".", 1)[0] for s in seen] == ["3.9", "3.9"], seen
    assert {s["protobuf"] for s in seen} == {"3.20.2"} and {s["torchvision"].split("+")[0] for s in seen} == {
        "0.12.0"}


def test_no_package_index_is_said_before_anything_is_created(
        tmp_path: Path, wheel_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The index a wheelhouse needs cannot be reached (here: an index URL where nothing listens, which
    the container's pip is given as the host's is): one message saying so, nothing staged."""
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    spec = validate(_raw(tmp_path, PACKAGE, "wheels-no-index"), base_dir=tmp_path)
    with pytest.raises(WheelhouseError) as caught:
        run_job(spec, reporter=RecordingReporter())
    assert caught.value.message.startswith(
        "requirements.txt: the package index could not be reached from the image's container"), caught.value.message
    assert not (tmp_path / "out" / "wheels-no-index").exists()


# AWS's PyTorch 1.11 image is Python 3.8; its stand-in here runs 3.9 (emulator/training_images/frameworks.py).
PY38_IMAGE = "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:1.11.0-gpu-py38"
# Pure Python, small, not in the image, and its newest release requires Python >= 3.9.
AS_FOR_PACKAGE = "more-itertools"

AS_FOR_TRAIN = '''\
import json, os, platform
import more_itertools
print("AS_FOR_SEEN " + json.dumps({"python": platform.python_version(), "version": more_itertools.__version__,
                                   "constraint": os.environ.get("PIP_CONSTRAINT")}), flush=True)
'''


def pip_picks(package: str, python_version: str) -> str:
    """The version of `package` the real pip picks for `python_version` from wheels (as the service's
    pip on that Python would, for a package no installed one constrains)."""
    with tempfile.TemporaryDirectory() as folder:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
                        "--no-deps", "--only-binary=:all:", "--python-version", python_version, "-d", folder,
                        package], check=True, capture_output=True, timeout=300)
        [wheel] = os.listdir(folder)
    return wheel.split("-")[1]


def test_a_py38_job_on_its_python_3_9_stand_in_gets_what_pip_picks_for_3_8(
        tmp_path: Path, wheel_cache: Path, framework_image: Callable[[str, str, str], str]) -> None:
    """An unpinned requirement on the py38 estimator's stand-in (Python 3.9) resolves as pip resolves
    it for 3.8, the Python the job names, and that version is what every host's toolkit installs."""
    framework_image("pytorch", "1.11.0", "py38")
    for_38, for_39 = pip_picks(AS_FOR_PACKAGE, "3.8"), pip_picks(AS_FOR_PACKAGE, "3.9")
    assert for_38 != for_39, f"premise: {AS_FOR_PACKAGE}'s newest release ({for_39}) no longer installs on 3.8"
    raw = _raw(tmp_path, AS_FOR_PACKAGE, "wheels-as-for-38")
    (tmp_path / "code" / "train.py").write_text(AS_FOR_TRAIN)
    spec = validate({**raw, "image_uri": PY38_IMAGE}, base_dir=tmp_path)
    reporter = RecordingReporter()
    result = run_job(spec, reporter=reporter)
    assert result.status == "Completed", result.failure_reason

    note = ("pytorch 1.11.0 py38: running on Python 3.9 (Debian has no 3.8); requirements.txt resolved as for "
            "Python 3.8")
    assert reporter.warnings.count(note) == 1, reporter.warnings
    assert f"requirements.txt: for Python 3.8 pip chooses {AS_FOR_PACKAGE}=={for_38}" in reporter.infos
    [house] = wheel_cache.iterdir()
    assert "-as-py38-" in house.name  # and a short hash of the pins held
    assert sorted(p.name for p in house.glob("*.whl")) == [f"more_itertools-{for_38}-py3-none-any.whl"]
    pins = (house / wheelhouse_mount.CONSTRAINTS).read_text().splitlines()
    assert f"{AS_FOR_PACKAGE}=={for_38}" in pins and "torch==1.11.0" in pins
    for host in ("algo-1", "algo-2"):
        log = [line for h, _, line in reporter.lines if h == host]
        assert any(f"Successfully installed {AS_FOR_PACKAGE}-{for_38}" in line for line in log), log
        [seen] = [json.loads(line.split("AS_FOR_SEEN ", 1)[1]) for line in log if "AS_FOR_SEEN " in line]
        assert seen["python"].startswith("3.9.") and seen["version"] == for_38
        assert seen["constraint"] == f"{wheelhouse_mount.CONTAINER_PATH}/{wheelhouse_mount.CONSTRAINTS}"
