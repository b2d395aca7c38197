"""The framework images' table and choices (emulator/training_images/frameworks.py): which version, which Python,
which pins, without Docker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emulator.errors import ImageMissing, UsageError
from emulator.training_images import frameworks
from emulator.training_images.ecr_images import choose_image
from emulator.training_images.frameworks import DEBIAN_PYTHONS, choose, for_tag, nearest_python, parse_framework

SDK_CONFIG = Path(__import__("sagemaker").__file__).parent / "image_uri_config"


@pytest.mark.parametrize(("py_version", "available", "expected"), [
    ("py38", ["3.9"], "3.9"),
    ("py39", ["3.9", "3.11"], "3.9"),
    ("py310", ["3.9", "3.11"], "3.11"),  # a tie goes to the newer
    ("py311", ["3.9", "3.11", "3.13"], "3.11"),
    ("py312", ["3.9", "3.11", "3.13"], "3.13"),
    ("py312", ["3.9", "3.11"], "3.11"),  # the nearest the wheels exist for
])
def test_the_nearest_python(py_version: str, available: list[str], expected: str) -> None:
    assert nearest_python(py_version, available) == expected


def test_the_issue_examples_run_on_the_pythons_debian_has() -> None:
    torch = choose("pytorch", "1.11", "py38")
    assert (torch.version, torch.python, torch.suite, torch.tag) == (
        "1.11.0", "3.9", "bullseye", "hetero-emu/pytorch-training:1.11.0-py39")
    assert torch.substituted and torch.python_note() == "pytorch 1.11.0 py38: running on Python 3.9 (Debian has no 3.8)"
    assert torch.python_note(requirements=True) == ("pytorch 1.11.0 py38: running on Python 3.9 (Debian has no 3.8); "
                                                    "requirements.txt resolved as for Python 3.8")
    assert (torch.named_python, torch.framework_pins) == ("3.8", ("torch==1.11.0", "torchaudio==0.11.0",
                                                                  "torchvision==0.12.0"))
    tf = choose("tensorflow", "2.9.2", "py39")
    assert (tf.python, tf.substituted, tf.horovod) == ("3.9", False, "0.28.1")
    assert choose("pytorch", "2.1.0", "py310").python == "3.11"


def test_pins_carry_the_framework_its_companions_and_the_toolkits() -> None:
    pins = dict(p.split("==") for p in choose("pytorch", "1.11.0", "py38").requirements)
    assert {k: pins[k] for k in ("torch", "torchvision", "torchaudio")} == {
        "torch": "1.11.0", "torchvision": "0.12.0", "torchaudio": "0.11.0"}
    # AWS's PyTorch 1.x images have a protobuf 3, which sagemaker-training 5 (protobuf >= 5.28) refuses.
    assert pins["sagemaker-training"].startswith("4.") and pins["protobuf"].startswith("3.")
    assert {"sagemaker-pytorch-training", "mpi4py", "debugpy", "numpy"} <= set(pins)
    tf = dict(p.split("==") for p in choose("tensorflow", "2.9.2", "py39").requirements)
    assert tf["tensorflow"] == "2.9.2" and "sagemaker-tensorflow-training" in tf


def test_every_version_the_sdk_lists_for_training_from_1_8_and_2_4_is_in_the_table() -> None:
    for framework, first in (("pytorch", (1, 8)), ("tensorflow", (2, 4))):
        config = json.loads((SDK_CONFIG / f"{framework}.json").read_text())["training"]
        listed = {v for v in config["versions"] if tuple(int(x) for x in v.split(".")[:2]) >= first}
        assert listed <= set(frameworks.versions(framework)), sorted(listed - set(frameworks.versions(framework)))
        for version in listed:
            assert sorted(frameworks.table()[framework][version]["sdk_py_versions"]) == sorted(
                config["versions"][version]["py_versions"]), version


def test_every_runnable_version_pins_what_an_image_needs() -> None:
    for framework in frameworks.FRAMEWORKS:
        for version in frameworks.runnable_versions(framework):
            for python in frameworks.table()[framework][version]["wheel_pythons"]:
                assert python in DEBIAN_PYTHONS
                names = {p.split("==")[0] for p in frameworks.requirements(framework, version, python)}
                toolkit = f"sagemaker-{framework}-training"
                assert {framework if framework == "tensorflow" else "torch", toolkit, "sagemaker-training",
                        "mpi4py", "debugpy"} <= names, (framework, version, python)


@pytest.mark.parametrize(("args", "message"), [
    (("pytorch", "1.7", "py36"), "not one of the pytorch versions"),
    (("pytorch", "1.9", "py36"), "never released for py36"),
    (("pytorch", "1.11", "py310"), "never released for py310"),
    (("keras", "3.0", None), "unknown framework"),
    (("tensorflow", "2.9.2", "python3"), "is not a py_version"),
])
def test_bad_versions_and_pythons_are_usage_errors(args: tuple[str, str, str | None], message: str) -> None:
    with pytest.raises(UsageError, match=message) as info:
        choose(*args)
    assert info.value.hint


def test_a_version_with_no_wheels_for_any_python_here_names_what_is_available(
        monkeypatch: pytest.MonkeyPatch) -> None:
    table = json.loads(json.dumps(frameworks.table()))
    table["pytorch"]["1.10.0"]["wheel_pythons"] = ["3.8"]
    monkeypatch.setattr(frameworks, "table", lambda: table)
    with pytest.raises(UsageError, match=r"pytorch 1.10.0 has no wheels for any Python this machine can run") as info:
        choose("pytorch", "1.10.0", "py38")
    assert "1.11.0" in str(info.value.hint) and "1.10.0," not in str(info.value.hint)


def test_a_local_framework_tag_names_its_image() -> None:
    found = for_tag("hetero-emu/pytorch-training:1.11.0-py39")
    assert found is not None and (found.framework, found.version, found.python) == ("pytorch", "1.11.0", "3.9")
    assert found.requirements == choose("pytorch", "1.11.0", "py38").requirements
    for other in ("hetero-emu/training:py311", "hetero-emu/pytorch-training:1.11.0-py311",
                  "hetero-emu/pytorch-training:9.9.9-py39", "pytorch-training:1.11.0-py39"):
        assert for_tag(other) is None, other


def test_the_framework_option() -> None:
    assert parse_framework("tensorflow:2.9") == ("tensorflow", "2.9")
    for bad in ("pytorch", "torch:1.11", "pytorch:"):
        with pytest.raises(UsageError):
            parse_framework(bad)


def test_a_change_to_configure_sh_keeps_the_venv_stage_and_one_to_venv_sh_redoes_both(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from emulator.backend import framework_build
    from emulator.training_images import image_recipes as recipes

    shutil.copytree(recipes.images_dir(), tmp_path / "images")
    monkeypatch.setattr(framework_build, "images_dir", lambda: tmp_path / "images")
    monkeypatch.setattr(recipes, "images_dir", lambda: tmp_path / "images")
    target = choose("pytorch", "1.11.0", "py38")
    venv, whole = framework_build.venv_hash(target), framework_build.recipe_hash(target)
    with (tmp_path / "images" / "framework" / "configure.sh").open("a") as f:
        f.write("# changed\n")
    assert framework_build.venv_hash(target) == venv and framework_build.recipe_hash(target) != whole
    changed = framework_build.recipe_hash(target)
    with (tmp_path / "images" / "framework" / "venv.sh").open("a") as f:
        f.write("# changed\n")
    assert framework_build.venv_hash(target) != venv and framework_build.recipe_hash(target) != changed
    # Another version of the same framework is another venv.
    assert framework_build.venv_hash(choose("pytorch", "1.12.1", "py38")) != framework_build.venv_hash(target)
    assert framework_build.stage_tag(target) == "hetero-emu/framework-stage:pytorch-1.11.0-py39"


def test_tensorflow_from_2_16_has_no_horovod_and_says_why() -> None:
    assert choose("tensorflow", "2.9.2", "py39").horovod_missing() is None
    assert choose("pytorch", "2.1.0", "py310").horovod_missing() is None
    said = choose("tensorflow", "2.16.2", "py310").horovod_missing()
    assert said is not None and said.startswith("tensorflow 2.16.2: no Horovod in the image") and "Keras 3" in said


def test_pytorch_1_8_and_1_9_stand_in_on_python_3_9_and_say_so() -> None:
    # The SDK's aliases: 1.8 -> 1.8.1, 1.9 -> 1.9.1; AWS's images were py36 (and `py3`) and py38.
    for version, py_version, full in (("1.8", "py36", "1.8.1"), ("1.8.0", "py3", "1.8.0"), ("1.9", "py38", "1.9.1")):
        image = choose("pytorch", version, py_version)
        assert (image.version, image.python, image.tag) == (full, "3.9", f"hetero-emu/pytorch-training:{full}-py39")
        # A bare py3 names no Python to resolve a requirements.txt as for.
        why = "py3 names no minor version" if py_version == "py3" else f"Debian has no 3.{py_version[3:]}"
        assert image.substituted
        assert image.python_note() == f"pytorch {full} {py_version}: running on Python 3.9 ({why})"
        assert image.python_note(requirements=True) == image.python_note() + (
            "" if py_version == "py3" else f"; requirements.txt resolved as for Python 3.{py_version[3:]}")
        pins = dict(p.split("==") for p in image.requirements)
        assert pins["torch"] == full
        # torchvision and torchaudio of the release whose wheels pin this very torch (0.9.1 / 0.8.1 for 1.8.1).
        assert pins["torchvision"].startswith({"1.8": "0.9.", "1.9": "0.10."}[full[:3]])
        assert pins["torchaudio"].startswith({"1.8": "0.8.", "1.9": "0.9."}[full[:3]])
        assert pins["sagemaker-training"].startswith("4.") and pins["protobuf"].startswith("3.")
    # Without a py_version the newest the SDK lists: py36 beside the bare py3.
    assert choose("pytorch", "1.8.1").py_version == "py36"
    built = for_tag("hetero-emu/pytorch-training:1.8.1-py39")
    assert built is not None and built.py_version == "py36"
    assert built.requirements == choose("pytorch", "1.8.1", "py3").requirements


@pytest.mark.parametrize("tag", ["1.8.1-gpu-py3", "1.8-cpu-py36"])  # what the SDK names for 1.8.1 and its alias 1.8
def test_an_ecr_name_of_pytorch_1_8_gets_a_stand_in_said_out_loud(tag: str) -> None:
    choice = choose_image(f"763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:{tag}", {}, lambda _: False)
    assert choice.image == "hetero-emu/pytorch-training:1.8.1-py39"
    assert choice.notes()[1].startswith(f"pytorch 1.8.1 {tag.rpartition('-')[2]}: running on Python 3.9 (")


def test_tensorflow_2_5_stands_in_on_python_3_9_with_the_numpy_it_requires() -> None:
    image = choose("tensorflow", "2.5", "py37")
    assert (image.version, image.python, image.substituted) == ("2.5.1", "3.9", True)
    assert image.python_note() == "tensorflow 2.5.1 py37: running on Python 3.9 (Debian has no 3.7)"
    pins = dict(p.split("==") for p in image.requirements)
    # tensorflow 2.5.1 requires numpy~=1.19.2; sagemaker-tensorflow-training 20.5.0 sagemaker-training<=4.8.3.
    assert pins["tensorflow"] == "2.5.1" and pins["numpy"].startswith("1.19.")
    assert pins["sagemaker-training"] == "4.8.3" and "sagemaker-tensorflow-training" in pins
    assert image.horovod is not None and image.horovod_missing() is None


def test_tensorflow_2_4_has_no_wheel_for_python_3_9_and_is_refused_naming_its_wheels() -> None:
    with pytest.raises(UsageError, match=r"tensorflow 2.4.3 has no wheels for any Python this machine can run "
                                         r"\(3.9, 3.11, 3.13\); its wheels are for 3.6, 3.7, 3.8") as info:
        choose("tensorflow", "2.4", "py37")
    assert str(info.value.hint).startswith("pick a version with images here: 2.5.0, 2.5.1, 2.6.0")
    # Asked for by its ECR name, only a real image can run it: the refusal says how to bring one.
    name = "763104351884.dkr.ecr.us-west-2.amazonaws.com/tensorflow-training:2.4.1-cpu-py37"
    with pytest.raises(ImageMissing) as missing:
        choose_image(name, {}, lambda _: False)
    assert name in missing.value.message
    assert "TensorFlow 2.4.1 has wheels only for Python 3.6, 3.7, 3.8" in missing.value.message
    assert "from PyTorch 1.8" in missing.value.message and "from TensorFlow 2.5" in missing.value.message
    assert "docker load" in str(missing.value.hint) and "images=" in str(missing.value.hint)
    # A real image under that name, or a mapping of its repository, still runs it.
    assert choose_image(name, {"tensorflow-training": "mine:1"}, lambda _: False).image == "mine:1"
    assert choose_image(name, {}, lambda n: n == name).image == name
