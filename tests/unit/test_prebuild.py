"""`hetero-emu image build --for FILE` (emulator/run/prebuild.py): the image a YAML spec or a
CreateTrainingJob request would run, chosen by the run's own rules, handed to the builder that builds it; files that are
no job refused with exit code 2. The engine and the builders are fakes at the backend's boundary."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import docker.errors
import pytest
from testkit import invoke, write_train_project

from emulator.backend import docker_parts, framework_build, image_build
from emulator.defaults import DEFAULT_IMAGE
from emulator.training_images.frameworks import FrameworkImage

AWS_PYTORCH = "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:1.11.0-gpu-py38"
AWS_TENSORFLOW = "763104351884.dkr.ecr.us-west-2.amazonaws.com/tensorflow-training:2.9.2-cpu-py39"
SPEC = """\
job_name: prebuilt
entry_point: train.py
source_dir: code
instance_groups:
  - {instance_group_name: g, instance_type: ml.c5.xlarge, instance_count: 1}
output_path: out
"""


class FakeImages:
    def __init__(self, present: set[str]) -> None:
        self.present = present

    def get(self, name: str) -> Any:
        if name not in self.present:
            raise docker.errors.ImageNotFound(name)
        return type("Image", (), {"attrs": {"Size": 1000}, "labels": {}})()


class FakeClient:
    def __init__(self, present: set[str]) -> None:
        self.images = FakeImages(present)


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What the builders were asked for: `framework:TAG` or `recipe:NAME`; the engine has no image."""
    asked: list[str] = []
    monkeypatch.setattr(docker_parts, "connect", lambda *a, **k: FakeClient(set()))

    def framework(client: Any, target: FrameworkImage, **kw: Any) -> image_build.BuildReport:
        asked.append(f"framework:{target.tag}")
        return image_build.BuildReport(target.tag, True, 1.0, 10, ())

    def recipe(client: Any, recipe: Any, **kw: Any) -> image_build.BuildReport:
        asked.append(f"recipe:{recipe.name}")
        return image_build.BuildReport(recipe.tag, True, 1.0, 10, ())

    monkeypatch.setattr(framework_build, "build_framework_image", framework)
    monkeypatch.setattr(image_build, "build_image", recipe)
    return asked


def test_a_spec_naming_an_ecr_framework_image_prebuilds_its_stand_in(builds: list[str], tmp_path: Path) -> None:
    write_train_project(tmp_path, job=SPEC + f"image_uri: {AWS_PYTORCH}\n")
    proc = invoke("image", "build", "--for", tmp_path / "job.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert builds == ["framework:hetero-emu/pytorch-training:1.11.0-py39"]
    # What the job will say, said before the build: the stand-in and the Python it runs on.
    assert f"stands in for {AWS_PYTORCH}" in proc.stderr and "running on Python 3.9" in proc.stderr
    assert proc.stdout.startswith("built hetero-emu/pytorch-training:1.11.0-py39")


def test_a_spec_naming_no_image_prebuilds_the_default_one(builds: list[str], tmp_path: Path) -> None:
    write_train_project(tmp_path, job=SPEC)
    proc = invoke("image", "build", "--for", "job.yaml", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert builds == ["recipe:training"]
    assert json.loads(proc.stdout)["image"] == DEFAULT_IMAGE


def test_a_create_training_job_request_prebuilds_its_algorithm_s_image(builds: list[str], tmp_path: Path) -> None:
    write_train_project(tmp_path)
    asked = {
        "TrainingJobName": "prebuilt-request",
        "AlgorithmSpecification": {"TrainingImage": AWS_TENSORFLOW, "TrainingInputMode": "File"},
        "HyperParameters": {"sagemaker_program": "train.py", "sagemaker_submit_directory": "code"},
        "ResourceConfig": {"InstanceType": "ml.c5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 30},
        "OutputDataConfig": {"S3OutputPath": "out"},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
        "RoleArn": "arn:aws:iam::111122223333:role/x",
    }
    (tmp_path / "request.json").write_text(json.dumps(asked))
    proc = invoke("image", "build", "--for", "request.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert builds == ["framework:hetero-emu/tensorflow-training:2.9.2-py39"]


def test_an_image_the_engine_has_and_no_recipe_builds_is_left_as_it_is(
    builds: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(docker_parts, "connect", lambda *a, **k: FakeClient({"my/own:1"}))
    write_train_project(tmp_path, job=SPEC + "image_uri: my/own:1\n")
    proc = invoke("image", "build", "--for", "job.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert builds == [] and "nothing to build" in proc.stderr
    assert proc.stdout.startswith("up to date: my/own:1")


def test_a_missing_image_no_recipe_builds_is_exit_3_with_a_hint(builds: list[str], tmp_path: Path) -> None:
    write_train_project(tmp_path, job=SPEC + "image_uri: my/missing:1\n")
    proc = invoke("image", "build", "--for", "job.yaml", cwd=tmp_path)
    assert proc.returncode == 3 and "Traceback" not in proc.stderr
    assert "image my/missing:1 is not in the Docker engine" in proc.stderr and "docker load" in proc.stderr


@pytest.mark.parametrize(("content", "said"), [
    (None, "spec file not found"),
    ("hello: world\n", "hello: unknown key"),
    ('{"TrainingJobName": "x"}', "ResourceConfig.InstanceGroups: missing"),
])
def test_a_file_that_is_no_job_is_exit_2_before_the_engine_is_asked(
    content: str | None, said: str, tmp_path: Path,
) -> None:
    name = "request.json" if content and content.startswith("{") else "job.yaml"
    if content is not None:
        (tmp_path / name).write_text(content)
    # No engine answers at this socket: asking it would be exit 3, not the spec error's 2.
    proc = invoke("image", "build", "--for", tmp_path / name, env={"DOCKER_HOST": f"unix://{tmp_path}/no.sock"})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert said in proc.stderr


def test_for_goes_without_the_options_that_name_an_image(tmp_path: Path) -> None:
    proc = invoke("image", "build", "--for", "job.yaml", "--framework", "pytorch:1.11",
                  env={"DOCKER_HOST": f"unix://{tmp_path}/no.sock"})
    assert proc.returncode == 2 and "--for names the image by its job" in proc.stderr


def test_emulator_session_prebuilds_what_fit_would_run(builds: list[str], tmp_path: Path) -> None:
    from sagemaker.pytorch import PyTorch

    from emulator.sagemaker import EmulatorSession

    (tmp_path / "s3").mkdir()
    session = EmulatorSession(s3_root=tmp_path / "s3")
    estimator = PyTorch(entry_point="train.py", framework_version="1.11.0", py_version="py38",
                        role="arn:aws:iam::111122223333:role/x", instance_count=1, instance_type="ml.c5.xlarge",
                        sagemaker_session=session)
    said: list[str] = []
    report = session.prebuild(estimator, progress=said.append)
    # The SDK names AWS's image (estimator.training_image_uri(), what fit() sends); its stand-in is built.
    assert estimator.training_image_uri().endswith("/pytorch-training:1.11.0-cpu-py38")
    assert builds == ["framework:hetero-emu/pytorch-training:1.11.0-py39"]
    assert report.image == "hetero-emu/pytorch-training:1.11.0-py39" and report.built
    assert any("stands in for" in line for line in said)

