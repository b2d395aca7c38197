"""Hugging Face images (emulator/training_images/huggingface.py): for every Hugging Face training image SDK v2 lists,
the image URI the SDK itself makes either gets a stand-in (the framework image of that version and
Python plus the Hugging Face layer) or a refusal naming what exists. No Docker."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import sagemaker

from emulator.errors import ImageMissing, UsageError
from emulator.training_images import frameworks, huggingface, stand_ins
from emulator.training_images.ecr_images import ECR_NAME, choose_image

ROOT = Path(__file__).resolve().parents[2]

SDK_CONFIG = Path(sagemaker.__file__).parent / "image_uri_config" / "huggingface.json"
REGION = "us-west-2"


def sdk_images() -> list[tuple[str, str, str, str]]:
    """(transformers, backend, version, py_version) of every training image SDK v2's own config lists."""
    versions = json.loads(SDK_CONFIG.read_text())["training"]["versions"]
    return [(transformers, backend, key[len(backend):], py)
            for transformers, entry in versions.items()
            for key, value in entry.items() if isinstance(value, dict) and "py_versions" in value
            for backend in ("pytorch", "tensorflow") if key.startswith(backend)
            for py in value["py_versions"]]


def sdk_uri(transformers: str, backend: str, version: str, py_version: str) -> str:
    """The image URI SDK v2 makes for a HuggingFace estimator of these versions (what fit() sends)."""
    return sagemaker.image_uris.retrieve("huggingface", REGION, version=transformers, py_version=py_version,
                                         instance_type="ml.g5.xlarge", image_scope="training",
                                         base_framework_version=f"{backend}{version}")


def test_the_table_has_every_training_image_the_sdk_lists() -> None:
    listed = {(t, b, v) for t, b, v, _ in sdk_images()}
    assert listed == {(t, b, v) for b in huggingface.REPOSITORIES for t, v in huggingface.pairs(b)}
    assert huggingface.table()["meta"]["sdk_version"] == sagemaker.__version__


@pytest.mark.parametrize(("transformers", "backend", "version", "py_version"), sdk_images())
def test_the_sdk_uri_of_each_listed_version_gets_a_stand_in_or_a_refusal(
        transformers: str, backend: str, version: str, py_version: str) -> None:
    uri = sdk_uri(transformers, backend, version, py_version)
    match = ECR_NAME.fullmatch(uri)
    assert match is not None, uri
    runs_here = version in frameworks.runnable_versions(backend)
    if not runs_here:
        # No framework image of that version: the clear refusal, naming what exists.
        with pytest.raises(ImageMissing) as refused:
            choose_image(uri, {}, lambda name: False)
        assert f"transformers {transformers}" in refused.value.message
        assert "transformers 4.36.0 on 2.1.0" in refused.value.message  # what does run here
        return
    choice = choose_image(uri, {}, lambda name: False)
    image = choice.framework
    assert image is not None and image.huggingface is not None, uri
    base = frameworks.for_tag(f"hetero-emu/{frameworks.FRAMEWORKS[backend]}:{version}-"
                              f"py{image.python.replace('.', '')}")
    assert base is not None
    # The framework image of that version, on the nearest Python its wheels exist for, said out loud
    wheels = [p for p in frameworks.table()[backend][version]["wheel_pythons"] if p in frameworks.DEBIAN_PYTHONS]
    assert image.python == frameworks.nearest_python(py_version, wheels)
    assert (image.framework, image.version, image.py_version) == (backend, version, py_version)
    assert choice.image == image.tag == (f"hetero-emu/huggingface-{backend}-training:{version}-transformers"
                                         f"{transformers}-py{image.python.replace('.', '')}")
    if image.substituted:
        assert image.python_note() in choice.notes()
    # ...keeps every pin of the framework image and adds the layer, transformers at the SDK's version.
    assert image.requirements[:len(base.requirements)] == base.requirements
    assert image.requirements[len(base.requirements):] == image.huggingface.packages
    assert [p for p in image.huggingface.packages if p.split("[")[0].split("=")[0] == "transformers"] and all(
        p.endswith(f"=={transformers}") for p in image.huggingface.packages if p.startswith("transformers"))
    assert image.training_module == frameworks.TRAINING_MODULES[backend]
    # The local tag names the same image again (what a job naming it builds when it is missing);
    # telling it from a framework image's tag is stand_ins' part, not frameworks'.
    assert stand_ins.for_tag(image.tag) == image and frameworks.for_tag(image.tag) is None


@pytest.mark.parametrize(("transformers", "framework", "py_version", "expected"), [
    ("4.12", "pytorch1.9", "py38", ("4.12.3", "1.9.1")),
    ("4.26", "pytorch1.13", "py39", ("4.26.0", "1.13.1")),
    ("4.36", "pytorch2.1", "py310", ("4.36.0", "2.1.0")),
])
def test_the_sdks_tag_of_aliased_versions_gets_the_stand_in_of_the_full_ones(
        transformers: str, framework: str, py_version: str, expected: tuple[str, str]) -> None:
    """AWS's notebooks write `HuggingFace(transformers_version="4.12", pytorch_version="1.9")`: the SDK
    puts those very strings in the tag (`1.9-transformers4.12-gpu-py38-...`)."""
    uri = sagemaker.image_uris.retrieve("huggingface", REGION, version=transformers, py_version=py_version,
                                        instance_type="ml.g5.xlarge", image_scope="training",
                                        base_framework_version=framework)
    image = choose_image(uri, {}, lambda name: False).framework
    assert image is not None and image.huggingface is not None, uri
    assert (image.huggingface.transformers, image.version, image.py_version) == (*expected, py_version)


def test_the_pytorch_2_1_image_has_what_aws_installs_at_aws_versions() -> None:
    image = huggingface.choose("pytorch", "4.36", "2.1", "py310")
    assert image.tag == "hetero-emu/huggingface-pytorch-training:2.1.0-transformers4.36.0-py311"
    pins = dict(p.split("==") for p in image.huggingface.packages)  # type: ignore[union-attr]
    names = {name.split("[")[0] for name in pins}
    assert {"transformers", "datasets", "accelerate", "evaluate", "tokenizers", "sentencepiece"} <= names
    # AWS's buildspec and Dockerfile of 2.1.0-transformers4.36.0 (aws/deep-learning-containers).
    aws = huggingface.table()["training"]["4.36.0"]["pytorch"]["2.1.0"]["aws"]
    assert aws["tag"] == "2.1.0-transformers4.36.0-gpu-py310-cu121-ubuntu20.04"
    for name in ("datasets", "accelerate", "evaluate"):
        assert pins[name] == aws["packages"][name]["spec"].removeprefix("=="), name


def test_a_requirements_txt_keeps_the_layers_versions() -> None:
    """A job's requirements.txt resolved as for py310 keeps what the image has (emulator.run.wheelhouse's
    constraints): the framework's pins and the layer's, without extras, which constraints cannot carry."""
    image = huggingface.choose("pytorch", "4.36", "2.1", "py310")
    keep = image.framework_pins
    assert {"torch==2.1.0", "transformers==4.36.0", "datasets==2.18.0"} <= set(keep)
    assert not [pin for pin in keep if "[" in pin]


@pytest.mark.parametrize(("value", "expected"), [
    ("huggingface-pytorch:4.36", ("pytorch", "4.36", None)),
    ("huggingface-pytorch:4.6.1:1.8", ("pytorch", "4.6.1", "1.8")),
    ("huggingface-tensorflow:4.17.0", ("tensorflow", "4.17.0", None)),
    ("pytorch:1.11", None),
])
def test_the_build_option_names_a_hugging_face_image(value: str, expected: object) -> None:
    assert huggingface.parse_build(value) == expected


@pytest.mark.parametrize("bad", ["huggingface-pytorch:", "huggingface-pytorch:four", "huggingface-pytorch:4.36:x"])
def test_a_malformed_build_option_is_a_usage_error(bad: str) -> None:
    with pytest.raises(UsageError) as refused:
        huggingface.parse_build(bad)
    assert "--framework" in refused.value.message and "huggingface-pytorch:4.36" in (refused.value.hint or "")


def test_the_build_command_an_image_names_builds_that_image() -> None:
    image = huggingface.choose("pytorch", "4.36.0", py_version="py310")
    command = image.build_command.split()
    assert command[:4] == ["hetero-emu", "image", "build", "--framework"]
    assert huggingface.build_target(command[4], command[6]) == image


@pytest.mark.parametrize(("args", "field"), [
    (("pytorch", "4.99"), "transformers 4.99"),
    (("tensorflow", "4.36"), "never released on TensorFlow"),
    (("pytorch", "4.36", "1.13"), "never released on PyTorch 1.13"),
    (("pytorch", "4.36", None, "py38"), "py38"),
    (("pytorch", "4.4.2"), "PyTorch 1.6.0"),
])
def test_what_cannot_run_is_refused_naming_it(args: tuple[str, ...], field: str) -> None:
    with pytest.raises(UsageError) as refused:
        huggingface.choose(*args)  # type: ignore[arg-type]
    assert field in refused.value.message
    assert refused.value.hint


def test_other_tags_are_no_hugging_face_image() -> None:
    for tag in ("hetero-emu/pytorch-training:2.1.0-py311", "hetero-emu/huggingface-pytorch-training:latest",
                "hetero-emu/huggingface-pytorch-training:2.1.0-transformers4.99.0-py311"):
        assert huggingface.for_tag(tag) is None, tag
    assert huggingface.from_ecr("huggingface-pytorch-inference", "2.1.0-transformers4.36.0-gpu-py310") is None


@pytest.mark.parametrize(("call", "args"), [
    (huggingface.choose, ("pytorch", "4." + "9" * 5000)),
    (huggingface.choose, ("pytorch", "4.36", "2." + "1" * 5000)),
    (huggingface.choose, ("pytorch", "4.36", None, "py" + "3" * 5000)),
    (huggingface.parse_build, ("huggingface-pytorch:" + "x" * 5000,)),
    (frameworks.choose, ("pytorch", "1." + "1" * 5000)),
    (frameworks.choose, ("x" * 5000, "1.11")),
    (frameworks.choose, ("pytorch", "1.11", "py" + "3" * 5000)),
    (frameworks.parse_framework, ("x" * 5000,)),
])
def test_a_huge_version_from_a_request_gives_a_short_message(call: Any, args: tuple[Any, ...]) -> None:
    # Versions reach these from a remote client's request (serve): the answer names them, briefly.
    with pytest.raises(UsageError) as refused:
        call(*args)
    assert len(refused.value.message) < 300, refused.value.message[:400]


def _heredoc(starting: str) -> str:
    """The Python that huggingface.sh runs from the heredoc starting with `starting`."""
    script = (ROOT / "images" / "framework" / "huggingface.sh").read_text()
    return next(part.split("\nPY\n", 1)[0] for part in script.split("<<'PY'\n")[1:] if part.startswith(starting))


def _layer_check(tmp_path: Path, pins: str, modules: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    """huggingface.sh's import check (its PY heredoc), run by this Python against fake modules."""
    check = _heredoc("import importlib")
    for name in modules:
        (tmp_path / f"{name}.py").write_text("__version__ = '1.0'\n")
    (tmp_path / "pins.txt").write_text(pins)
    return subprocess.run([sys.executable, "-c", check, str(tmp_path / "pins.txt")], capture_output=True, text=True,
                          env={"PYTHONPATH": str(tmp_path)}, cwd=tmp_path)


def test_the_layer_check_asks_for_accelerate_only_where_the_layer_pins_it(tmp_path: Path) -> None:
    # transformers 4.12's image (AWS's and ours) has no accelerate: its build must not fail for that.
    old = _layer_check(tmp_path, "transformers==4.12.3\ndatasets==1.15.1\n", ("transformers", "datasets"))
    assert old.returncode == 0 and old.stdout.strip() == "== transformers 1.0, datasets 1.0", old.stderr
    new = _layer_check(tmp_path, "transformers[sklearn]==4.36.0\ndatasets==2.18.0\naccelerate==0.26.0\n",
                       ("transformers", "datasets"))
    assert new.returncode != 0 and "accelerate" in new.stderr


def test_where_the_layer_and_aws_packages_pin_one_package_the_layers_pin_wins(tmp_path: Path) -> None:
    # AWS's PyTorch 2.1 image installs accelerate as well; pip refused the two pins together.
    (tmp_path / "layer.txt").write_text("transformers[sklearn]==4.36.0\naccelerate==0.26.0\n")
    (tmp_path / "aws.txt").write_text("Accelerate==1.15.0\nscipy==1.11.4\nsagemaker_experiments==0.1.45\n")
    done = subprocess.run([sys.executable, "-c", _heredoc("import re"), str(tmp_path / "layer.txt"),
                           str(tmp_path / "aws.txt"), str(tmp_path / "kept.txt")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "kept.txt").read_text() == "scipy==1.11.4\nsagemaker_experiments==0.1.45\n"
