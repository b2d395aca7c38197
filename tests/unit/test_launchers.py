"""A distribution on an image that lacks its launcher is refused before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from fake_backend import FakeBackend

from emulator.defaults import DEFAULT_IMAGE, PYTORCH_IMAGE
from emulator.errors import ImageMissing
from emulator.jobspec import JobSpec, validate
from emulator.reports.console import RecordingReporter
from emulator.run.runner import run_job
from emulator.training_images.image_recipes import LAUNCHERS_LABEL, load_recipe
from emulator.training_images.launchers import missing_launchers, required_launchers

MPI = {"mpi": {"enabled": True, "processes_per_host": 2}}
TORCH = {"torch_distributed": {"enabled": True}}


def spec_with(tmp_path: Path, distribution: dict[str, object] | None, image: str = DEFAULT_IMAGE) -> JobSpec:
    (tmp_path / "code").mkdir(exist_ok=True)
    (tmp_path / "code" / "train.py").write_text("print('hi')\n")
    raw: dict[str, object] = {
        "job_name": "launchers", "entry_point": "train.py", "source_dir": "code", "image_uri": image,
        "output_path": "out",
        "instance_groups": [
            {"instance_group_name": "data", "instance_type": "ml.c5.xlarge", "instance_count": 1},
            {"instance_group_name": "trainers", "instance_type": "ml.c5.xlarge", "instance_count": 2}],
    }
    if distribution is not None:
        raw["distribution"] = {**distribution, "instance_groups": ["trainers"]}
    return validate(raw, base_dir=tmp_path)


@pytest.mark.parametrize(
    ("distribution", "expected"),
    [
        (MPI, {"mpi": ("mpirun", "sshd")}),
        ({"smdistributed": {"dataparallel": {"enabled": True}}}, {"smdistributed.dataparallel": ("mpirun", "sshd")}),
        ({"pytorchddp": {"enabled": True}}, {"pytorchddp": ("mpirun", "sshd")}),
        ({"mpi": {"enabled": True}, "smdistributed": {"modelparallel": {"enabled": True}}},
         {"mpi": ("mpirun", "sshd")}),
        (TORCH, {"torch_distributed": ("torchrun",)}),
        ({**TORCH, "smdistributed": {"dataparallel": {"enabled": True}}}, {"torch_distributed": ("torchrun",)}),
        (None, {}),
    ],
)
def test_each_strategy_needs_the_launcher_the_toolkit_runs(
    tmp_path: Path, distribution: dict[str, object] | None, expected: dict[str, tuple[str, ...]]
) -> None:
    assert required_launchers(spec_with(tmp_path, distribution)) == expected


def test_the_training_recipe_carries_mpi() -> None:
    # What the default image is built with: mpirun and sshd (images/training/recipe.yaml).
    recipe = yaml.safe_load((load_recipe("training").folder / "recipe.yaml").read_text())
    assert {"mpirun", "sshd"} <= set(recipe["launchers"])


def test_a_distribution_on_an_image_without_its_launcher_fails_before_anything_starts(tmp_path: Path) -> None:
    labels = {LAUNCHERS_LABEL: "mpirun,sshd"}
    fake = FakeBackend(labels_of={DEFAULT_IMAGE: labels})

    with pytest.raises(ImageMissing) as info:
        run_job(spec_with(tmp_path, TORCH), backend=fake, reporter=RecordingReporter())

    assert info.value.exit_code == 3
    assert info.value.message == (f"distribution.torch_distributed needs torchrun, which image {DEFAULT_IMAGE} "
                                  "does not have (it has: mpirun, sshd)")
    # The PyTorch framework images carry torchrun; a job builds the one it names when it is missing.
    assert info.value.hint == (f"use image_uri: {PYTORCH_IMAGE} (a PyTorch estimator's framework image, built "
                               "when missing)")
    assert "create_network" not in fake.call_names() and "create_container" not in fake.call_names()
    assert not (tmp_path / "out" / "launchers").exists()


def test_mpi_on_an_image_without_mpi_names_the_default_image_in_the_hint(tmp_path: Path) -> None:
    fake = FakeBackend(images=("my/trainer:1",), labels_of={"my/trainer:1": {LAUNCHERS_LABEL: ""}})

    with pytest.raises(ImageMissing) as info:
        run_job(spec_with(tmp_path, MPI, image="my/trainer:1"), backend=fake, reporter=RecordingReporter())

    assert info.value.message \
        == "distribution.mpi needs mpirun and sshd, which image my/trainer:1 does not have (it has: none)"
    assert f"image_uri: {DEFAULT_IMAGE} (`hetero-emu image build --variant training`)" in (info.value.hint or "")


@pytest.mark.parametrize("labels", [None, {}, {"maintainer": "someone"}])
def test_an_image_that_does_not_say_what_it_carries_is_not_judged(
    tmp_path: Path, labels: dict[str, str] | None
) -> None:
    assert missing_launchers(spec_with(tmp_path, TORCH), "my/trainer:1", labels) is None


def test_an_image_with_the_launcher_passes(tmp_path: Path) -> None:
    spec = spec_with(tmp_path, MPI)
    assert missing_launchers(spec, DEFAULT_IMAGE, {LAUNCHERS_LABEL: "mpirun,sshd"}) is None
    assert missing_launchers(spec_with(tmp_path, None), DEFAULT_IMAGE, {LAUNCHERS_LABEL: ""}) is None
