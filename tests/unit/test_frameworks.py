"""The framework images' table and choices (emulator/frameworks.py): which version, which Python,
which pins, without Docker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emulator import frameworks
from emulator.errors import UsageError
from emulator.frameworks import DEBIAN_PYTHONS, choose, for_tag, nearest_python, parse_framework

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
    assert torch.substituted and torch.python_note() == "pytorch 1.11.0 py38: running on Python 3.9"
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


def test_every_version_the_sdk_lists_for_training_from_1_10_and_2_6_is_in_the_table() -> None:
    for framework, first in (("pytorch", (1, 10)), ("tensorflow", (2, 6))):
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
    (("pytorch", "1.9", "py38"), "not one of the pytorch versions"),
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

    from emulator import image_recipes as recipes
    from emulator.backend import framework_build

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
