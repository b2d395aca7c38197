"""What AWS's training images carry, as the framework table records it and the image build installs it
(scripts/aws_image_packages.py, emulator.frameworks.aws_packages): the pure parts, no Docker, no network."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from emulator import frameworks

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


aws = _load("aws_image_packages")
framework_table = _load("framework_table")
SOURCES = json.loads((ROOT / "scripts" / "aws_dlc_installs.json").read_text())


def test_an_install_line_is_read_as_pip_would_read_it() -> None:
    item = aws.parse_install("pip:Pillow>=9.0.0<9.1.0")
    # AWS's line lacks the comma (old pip read it as one legacy specifier): restored, the name canonical.
    assert (item.tool, item.name, item.spec) == ("pip", "pillow", ">=9.0.0,<9.1.0")
    assert aws.parse_install("pip:urllib3>1.26.0<1.27.0").spec == ">1.26.0,<1.27.0"
    assert aws.parse_install("pip:sagemaker-experiments==0.*").spec == "==0.*"
    assert aws.parse_install("conda:opencv").name == "opencv-python"  # conda's name for PyPI's package
    assert aws.parse_install("source:smdebug==1.0.34").requirement == "smdebug==1.0.34"
    with pytest.raises(ValueError, match="TOOL:REQUIREMENT"):
        aws.parse_install("apt:libgtk2.0-dev")


def test_the_last_install_of_a_name_wins_as_pip_install_U_does() -> None:
    items = aws.merged(["pip:opencv-python==4.5.2.54", "pip:scipy", "pip:opencv-python>=4.3,<5"])
    assert list(items) == ["opencv-python", "scipy"]
    assert items["opencv-python"].spec == ">=4.3,<5"


def test_a_plan_sorts_aws_installs_into_in_the_image_left_out_and_wanted() -> None:
    plan = aws.plan("tensorflow", "2.11.0", [
        "pip:horovod==0.26.1", "pip:protobuf>=3.19,<3.20", "pip:sparkmagic<1", "pip:tf-models-official==2.11.0",
        "source:sagemaker-tensorflow==1.17.0", "url:awsio==0.0.1", "conda:mkl"])
    assert set(plan.in_image) == {"horovod", "protobuf"}
    assert set(plan.left_out) == {"sparkmagic", "awsio", "mkl"}
    assert all(plan.left_out.values())  # each with its reason
    # PipeModeDataset from a git tag: looked for among the PyPI releases of this TensorFlow series.
    assert plan.wanted == {"tf-models-official": "==2.11.0", "sagemaker-tensorflow": ">=2.11,<2.12"}
    assert "git tag" in plan.notes["sagemaker-tensorflow"] and "bucket" in plan.notes["awsio"]
    # opencv-python's cv2 needs libGL, which the stand-in's rootfs has not: the headless build, same version.
    plan = aws.plan("pytorch", "1.11.0", ["pip:opencv-python==4.5.5.62", "pip:opencv-python>=4.3,<5"])
    assert plan.wanted == {"opencv-python-headless": ">=4.3,<5"} and "libGL" in plan.notes["opencv-python"]


PIP_CONFLICT = """\
ERROR: Cannot install -r requirements.txt (line 4) and numpy==1.26.4 because these package versions have \
conflicting dependencies.

The conflict is caused by:
    The user requested numpy==1.26.4
    sagemaker 2.257.0 depends on numpy<2.0 and >=1.9.0
    shap 0.39.0 depends on numpy
"""
PIP_NOT_FOUND = """\
ERROR: Could not find a version that satisfies the requirement scipy==1.2.2 (from versions: 1.9.3, 1.10.0)
ERROR: No matching distribution found for scipy==1.2.2
"""


def test_an_interrupted_runs_answers_are_read_back() -> None:
    log = ("== pytorch:1.11.0:3.9: 28 packages\n  scipy: 1.13.1\n  numba<0.54: 0.53.1\n"
           "  together: pip chooses again for ['a']\n")
    assert aws.seeds_from(log) == {"scipy": "1.13.1", "numba<0.54": "0.53.1"}


def test_pips_failures_name_their_culprits() -> None:
    assert aws.culprits(PIP_NOT_FOUND) == ["scipy"]
    assert aws.culprits(PIP_CONFLICT) == ["numpy", "sagemaker", "shap"]
    assert aws.failure_line(PIP_NOT_FOUND).startswith("ERROR: Could not find a version")
    built = "Collecting psutil==5.6.7\n  Downloading psutil-5.6.7.tar.gz\nerror: subprocess-exited-with-error\n"
    assert aws.culprits(built) == ["psutil"]


def test_after_a_failure_aws_specifier_goes_first_then_the_package() -> None:
    pinned = ["numpy==1.26.4", "torch==1.11.0"]
    wanted, relaxed, dropped = aws.next_step({"scipy": "==1.2.2", "pandas": ""}, pinned, PIP_NOT_FOUND)
    assert wanted == {"scipy": "", "pandas": ""} and list(relaxed) == ["scipy"] and dropped == {}
    wanted, relaxed, dropped = aws.next_step({"sagemaker": "", "shap": ">=0.39,<1"}, pinned, PIP_CONFLICT)
    # What is left of AWS's specifier is its cap below a major version: shap stays below 1.
    assert wanted == {"sagemaker": "", "shap": "<1"} and list(relaxed) == ["shap"]
    assert aws.relaxed_spec(">=2,<3") == "<3" and aws.relaxed_spec("<0.54") == ""
    wanted, relaxed, dropped = aws.next_step({"sagemaker": "<3", "shap": "<1"}, pinned, PIP_CONFLICT)
    assert wanted == {} and set(dropped) == {"sagemaker", "shap"}  # nothing left to loosen
    wanted, relaxed, dropped = aws.next_step({"sagemaker": "", "shap": ""}, pinned, PIP_CONFLICT)
    # numpy is the image's own pin: the wanted packages pip names beside it go, with pip's reason.
    assert wanted == {} and set(dropped) == {"sagemaker", "shap"}
    assert "numpy==1.26.4" in dropped["sagemaker"]


def test_the_sources_name_a_file_and_commit_for_every_series_the_table_has() -> None:
    for framework in ("pytorch", "tensorflow"):
        for version in frameworks.versions(framework):
            if not frameworks.table()[framework][version].get("python_packages"):
                continue  # no stand-in (TensorFlow 2.4: no wheel for a Python here)
            source = SOURCES[framework][aws.series(version)]
            assert source["files"] and all(len(f["commit"]) == 40 for f in source["files"])
            assert f"/{aws.series(version)}/" in source["files"][0]["path"]
            for entry in source["installs"]:
                aws.parse_install(entry)


def test_the_table_records_where_aws_image_packages_came_from_and_what_differs() -> None:
    recorded = [(f, v) for f in ("pytorch", "tensorflow") for v in frameworks.versions(f)
                if frameworks.table()[f][v].get("aws_image")]
    assert recorded, "scripts/aws_image_packages.py has not written the table"
    for framework, version in recorded:
        entry = frameworks.table()[framework][version]
        info = entry["aws_image"]
        assert info["files"] == SOURCES[framework][info["series"]]["files"]
        plan = aws.plan(framework, version, SOURCES[framework][info["series"]]["installs"])
        assert info["left_out"] == plan.left_out and set(info["in_image"]) == set(plan.in_image)
        for python, pins in entry["aws_packages"].items():
            # Only what the plan wants is installed; each pin off AWS's specifier says why.
            assert set(pins) <= set(plan.wanted)
            left = entry["aws_left_out"][python]
            assert not set(pins) & set(left) and all(left.values())
            for name, pin in pins.items():
                spec = plan.wanted[name]
                if spec and not framework_table.satisfies(pin, framework_table.parse_specifiers(spec)):
                    assert name in entry["aws_differs"][python], (framework, version, python, name)


def test_the_image_installs_aws_packages_without_moving_the_venvs_pins() -> None:
    image = frameworks.choose("tensorflow", "2.9.2", "py39")
    assert image.aws_packages == frameworks.aws_packages("tensorflow", "2.9.2", "3.9")
    names = {pin.split("==")[0] for pin in image.aws_packages}
    venv = {pin.split("==")[0] for pin in image.requirements}
    assert names and not names & venv
    assert all(pin.count("==") == 1 for pin in image.aws_packages)


def test_the_docs_page_is_the_one_the_table_makes() -> None:
    page = ROOT / "docs" / "aws-image-packages.md"
    assert page.read_text() == aws.markdown(frameworks.table()), \
        "run `python scripts/aws_image_packages.py --markdown` after changing the table"
