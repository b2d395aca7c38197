"""A job through `EmulatorSession` whose image is missing waits for its build, and `fit()` prints the
build's steps as the service's Starting status messages (emulator/run/build_status.py), on the real engine.

The image is a throwaway variant of the default one (a recipe `base: {recipe: training}` whose
Dockerfile sleeps a little longer than build_status.MIN_INTERVAL, so that a step's message is due while
it runs), in a recipes folder of the test's own ($HETERO_EMU_IMAGES_DIR: the package's recipes beside
it); the test removes the image it built, and never touches the default one.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest
from sagemaker.estimator import Estimator
from testkit import wait_for

from emulator.backend.image_build import RECIPE_LABEL, recipe_hash
from emulator.defaults import DEFAULT_IMAGE
from emulator.run import build_status
from emulator.sagemaker import EmulatorSession
from emulator.training_images.image_recipes import IMAGES_DIR_ENV, images_dir, load_recipe

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image", "no_leftovers")]

ROLE = "arn:aws:iam::111122223333:role/SageMakerRole"
VARIANT = "build-status-test"
DOCKERFILE = f"""\
ARG BASE_IMAGE
FROM ${{BASE_IMAGE}}
LABEL hetero-emu.test="{VARIANT}"
RUN sleep {build_status.MIN_INTERVAL + 4:.0f}
"""


@pytest.fixture
def throwaway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, docker_client: docker.DockerClient) -> Iterator[str]:
    """A recipes folder with the package's recipes and a variant of the default image; its tag."""
    tag = f"hetero-emu/{VARIANT}:{uuid.uuid4().hex[:10]}"
    recipes = tmp_path / "images"
    recipes.mkdir()
    for folder in images_dir().iterdir():
        if folder.is_dir():
            (recipes / folder.name).symlink_to(folder, target_is_directory=True)
    variant = recipes / VARIANT
    variant.mkdir()
    (variant / "recipe.yaml").write_text(f"tag: {tag}\nbase:\n  recipe: training\n")
    (variant / "Dockerfile").write_text(DOCKERFILE)
    monkeypatch.setenv(IMAGES_DIR_ENV, str(recipes))
    # A build cache of its own: its build lock is not the one a long build of another image may hold.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    # The default image this one starts FROM is up to date (the training_image fixture): the build is
    # this variant's own step, never the default image's.
    assert docker_client.images.get(DEFAULT_IMAGE).labels[RECIPE_LABEL] == recipe_hash(load_recipe("training"))
    yield tag
    with contextlib.suppress(docker.errors.NotFound):
        docker_client.images.remove(tag, force=True)


def estimator_of(image: str, tmp_path: Path, script: str) -> tuple[EmulatorSession, Estimator]:
    """An SDK v2 estimator of `image` running `script`, with its EmulatorSession."""
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text(script)
    (tmp_path / "s3").mkdir()
    session = EmulatorSession(s3_root=tmp_path / "s3")
    return session, Estimator(image_uri=image, entry_point="train.py", source_dir=str(tmp_path / "code"), role=ROLE,
                              instance_count=1, instance_type="ml.c5.xlarge", sagemaker_session=session)


def test_fit_prints_the_build_steps_of_the_image_its_job_waits_for(
    throwaway: str, tmp_path: Path, docker_client: docker.DockerClient, capsys: pytest.CaptureFixture[str],
) -> None:
    session, estimator = estimator_of(throwaway, tmp_path, "print('trained on the new image')\n")
    name = f"build-status-{uuid.uuid4().hex[:8]}"
    estimator.fit(job_name=name)  # logs=True, wait=True: as notebooks call it

    out = capsys.readouterr().out
    # The SDK's own status lines (sagemaker.utils.secondary_training_status_message), in order: the
    # build's step while it ran, its end, then the job's own steps.
    step = f"Starting - Building image {throwaway}: step 4/4, docker build {throwaway} FROM {DEFAULT_IMAGE}"
    built = f"Starting - Image {throwaway} built in "
    assert step in out and built in out, out
    assert out.index("Starting - Launching requested ML instances") < out.index(step) < out.index(built)
    assert out.index(built) < out.index("Training - ")
    assert "trained on the new image" in out
    assert docker_client.images.get(throwaway).labels["hetero-emu.test"] == VARIANT
    described = session.describe_training_job(name)
    assert described["TrainingJobStatus"] == "Completed"
    assert described["AlgorithmSpecification"]["TrainingImage"] == throwaway


def test_a_job_stopped_while_its_image_builds_ends_stopped(
    throwaway: str, tmp_path: Path, docker_client: docker.DockerClient,
) -> None:
    session, estimator = estimator_of(throwaway, tmp_path, "print('never runs')\n")
    name = f"build-stopped-{uuid.uuid4().hex[:8]}"
    estimator.fit(job_name=name, wait=False)

    def message() -> str:
        return str(session.describe_training_job(name)["SecondaryStatusTransitions"][-1]["StatusMessage"])

    wait_for(lambda: message().startswith(f"Building image {throwaway}"), "the build's first message", 120)
    estimator.latest_training_job.stop()
    # StopTrainingJob's Stopping, then the driver's Stopped: never Stopping for good.
    wait_for(lambda: session.describe_training_job(name)["TrainingJobStatus"] == "Stopped", "Stopped", 120)
    assert session.describe_training_job(name)["SecondaryStatus"] == "Stopped"
    with pytest.raises(docker.errors.ImageNotFound):
        docker_client.images.get(throwaway)
