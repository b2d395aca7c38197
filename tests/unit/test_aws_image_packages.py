"""What AWS's training images carry, as the framework table records it and the image build installs it
(scripts/aws_image_packages.py, emulator.training_images.frameworks.aws_packages): the pure parts, no
Docker, no network."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from emulator.training_images import frameworks

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


# uv's answers, as `uv pip compile` words them (stderr).
UV_CONFLICT = """\
  × No solution found when resolving dependencies:
  ╰─▶ Because tensorflow==2.11.0 depends on absl-py>=1.0.0 and you require tensorflow==2.11.0, we can
      conclude that you require absl-py>=1.0.0.
      And because you require absl-py>=0.9,<0.11, we can conclude that your requirements are unsatisfiable.
"""
UV_NO_RELEASE = """\
  × No solution found when resolving dependencies:
  ╰─▶ Because only the following versions of sagemaker are available:
          sagemaker<=2.254.1
          sagemaker>=3.0.0
      and sagemaker>=2,<=2.254.1 depends on numpy<2.0, we can conclude that sagemaker<3 depends on numpy<2.0.
      And because you require numpy==2.1.0 and sagemaker<3, we can conclude that your requirements are
      unsatisfiable.
"""


def test_the_resolvers_failures_name_their_culprits_in_order() -> None:
    wanted = ["scipy", "absl-py", "sagemaker", "numpy-financial", "shap"]
    assert aws.culprits(UV_CONFLICT, wanted) == ["absl-py"]
    assert aws.culprits(UV_NO_RELEASE, wanted) == ["sagemaker"]  # numpy is the image's, not wanted
    assert aws.failure_line(UV_CONFLICT).startswith("No solution found") is False
    assert "absl-py>=0.9,<0.11" in aws.failure_line(UV_CONFLICT) and "\n" not in aws.failure_line(UV_CONFLICT)


def test_after_a_failure_aws_specifier_goes_first_then_the_package() -> None:
    wanted, relaxed, dropped = aws.next_step({"scipy": "", "absl-py": ">=0.9,<0.11"}, UV_CONFLICT)
    assert wanted == {"scipy": "", "absl-py": ""} and list(relaxed) == ["absl-py"] and dropped == {}
    # What is left of AWS's specifier is its cap below a major version: sagemaker stays below 3.
    wanted, relaxed, dropped = aws.next_step({"sagemaker": ">=2.80,<3"}, UV_NO_RELEASE)
    assert wanted == {"sagemaker": "<3"} and list(relaxed) == ["sagemaker"]
    assert aws.relaxed_spec(">=2,<3") == "<3" and aws.relaxed_spec("<0.54") == ""
    # Nothing left to loosen: the package goes, with the resolver's reason.
    wanted, relaxed, dropped = aws.next_step({"shap": "", "sagemaker": "<3"}, UV_NO_RELEASE)
    assert wanted == {"shap": ""} and list(dropped) == ["sagemaker"] and "numpy==2.1.0" in dropped["sagemaker"]


def test_the_resolver_loosens_one_package_a_step_until_a_set_resolves() -> None:
    asked: list[list[str]] = []

    def compile_(lines: list[str]) -> tuple[int, str, dict[str, str]]:
        asked.append(list(lines))
        if "absl-py>=0.9,<0.11" in lines:
            return 1, UV_CONFLICT, {}
        if "sagemaker<3" in lines:
            return 1, UV_NO_RELEASE, {}
        return 0, "", {"tensorflow": "2.11.0", "absl-py": "1.4.0", "scipy": "1.8.0", "six": "1.17.0"}

    pinned = ["tensorflow==2.11.0"]
    res = aws.resolve(pinned, {"scipy": "==1.8.0", "absl-py": ">=0.9,<0.11", "sagemaker": "<3"}, compile_)
    # Only what was wanted is pinned (not the image's pins, not what they bring).
    assert res.pins == {"scipy": "1.8.0", "absl-py": "1.4.0"}
    assert list(res.relaxed) == ["absl-py"] and list(res.dropped) == ["sagemaker"]
    # The image's pins first, after the options (scipy is taken from wheels: WHEELS_ONLY).
    assert all([line for line in lines if not line.startswith("--")][0] == "tensorflow==2.11.0" for lines in asked)
    assert all("--only-binary scipy" in lines for lines in asked) and len(asked) == 3
    # An old source package that fails to build is taken from wheels only, not left out for it.
    asked.clear()

    def builds_fail(lines: list[str]) -> tuple[int, str, dict[str, str]]:
        asked.append(list(lines))
        if "--only-binary spacy" not in lines:
            return 1, "  × Failed to build `spacy==2.0.17`\n  ╰─▶ The build backend returned an error\n", {}
        return 0, "", {"spacy": "3.7.5"}

    assert aws.resolve(pinned, {"spacy": ""}, builds_fail).pins == {"spacy": "3.7.5"}
    assert asked[-1][0] == "--only-binary spacy" and len(asked) == 2
    # A set that never resolves ends, every package left out.
    never = aws.resolve(pinned, {"a": "", "b": ""}, lambda lines: (1, "error: no", {}))
    assert never.pins == {} and set(never.dropped) == {"a", "b"}


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


def test_numba_is_held_to_a_release_that_states_its_numpy_range_beside_a_newer_numpy() -> None:
    asked: list[list[str]] = []

    def compile_(lines: list[str]) -> tuple[int, str, dict[str, str]]:
        asked.append(list(lines))
        return 0, "", {"numba": "0.59.1" if "numba>=0.56" in lines else "0.53.1"}

    assert aws.resolve(["numpy==1.26.4"], {"numba": "<0.54"}, compile_).pins == {"numba": "0.59.1"}
    assert aws.resolve(["numpy==1.19.5"], {"numba": "<0.54"}, compile_).pins == {"numba": "0.53.1"}
    assert aws.runtime_floors(["numpy==1.26.4"]) == {"numba": ">=0.56"} and aws.runtime_floors([]) == {}
    assert all("numba>=0.56" not in lines for lines in asked[1:])


def test_scipy_comes_from_wheels_so_that_no_source_release_the_image_cannot_build_is_chosen() -> None:
    # uv reads scipy 1.2.2's metadata from its sdist without building it; the image's pip then fails to build
    # it on Python 3.9 (numpy.distutils beside numpy 1.26): AWS's exact pin is loosened instead.
    asked: list[list[str]] = []
    no_wheel = ("  × No solution found when resolving dependencies:\n  ╰─▶ Because scipy==1.2.2 has no wheels with "
                "a matching Python ABI tag (e.g., `cp39`) and you require scipy==1.2.2, we can conclude that your "
                "requirements are unsatisfiable.\n")

    def compile_(lines: list[str]) -> tuple[int, str, dict[str, str]]:
        asked.append(list(lines))
        if "--only-binary scipy" in lines and "scipy==1.2.2" in lines:
            return 1, no_wheel, {}
        return 0, "", {"scipy": "1.13.1" if "--only-binary scipy" in lines else "1.2.2"}

    res = aws.resolve(["numpy==1.26.4"], {"scipy": "==1.2.2"}, compile_)
    assert res.pins == {"scipy": "1.13.1"} and "no wheels" in res.relaxed["scipy"]
    assert all(lines[0] == "--only-binary scipy" for lines in asked)
    assert "scipy" in aws.WHEELS_ONLY
