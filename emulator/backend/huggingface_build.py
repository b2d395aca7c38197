"""Build a Hugging Face image (a `FrameworkImage` with a `huggingface` layer), offline but for PyPI.

As AWS builds theirs (`FROM pytorch-training:2.1.0-gpu-py310-...` and one `pip install` of transformers,
datasets, accelerate...: aws/deep-learning-containers, huggingface/pytorch/training/docker/), in two steps:

1. the framework image of that version and Python (`emulator.backend.framework_build`; skipped when up
   to date, built first when missing);
2. images/framework/huggingface.sh in a container of it that reaches the package index, pip installing
   the layer's pins beside the framework's (pip's cache is the host's, mounted), committed as the image.

The image carries the hash of its framework image's recipe, the script and the pins; when an image with
that tag and label exists nothing is done. The layer holds only what pip added (the framework image's
gigabytes are shared with it), so a rebuild costs the layer alone.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import docker

from emulator.backend import framework_build, image_build
from emulator.defaults import default_cache_dir
from emulator.errors import ImageBuildError
from emulator.reports.progress import LogFile, StepReporter, as_step_reporter
from emulator.training_images.frameworks import FrameworkImage
from emulator.training_images.image_recipes import images_dir

SCRIPT = "huggingface.sh"


def recipe_hash(target: FrameworkImage) -> str:
    """sha256 of what decides the image: its framework image's recipe, huggingface.sh and the pins."""
    digest = hashlib.sha256(framework_build.recipe_hash(base(target)).encode())
    digest.update(SCRIPT.encode() + b"\0" + framework_build.read_file(images_dir() / framework_build.VARIANT / SCRIPT))
    digest.update(json.dumps(target.requirements).encode())
    return digest.hexdigest()


def base(target: FrameworkImage) -> FrameworkImage:
    """The framework image the layer goes on (the same version and Python, without the layer)."""
    layer = target.huggingface
    if layer is None:
        raise ImageBuildError(f"{target.tag} is not a Hugging Face image", hint="build it with framework_build")
    # replace(): every other field of the framework image (its Horovod...) stays as it is.
    return replace(target, requirements=target.requirements[:len(target.requirements) - len(layer.packages)],
                   huggingface=None)


def build_huggingface_image(client: docker.DockerClient, target: FrameworkImage, *, rebuild: bool,
                            progress: StepReporter | image_build.Progress, cache_dir: Path | None,
                            verbose: bool) -> image_build.BuildReport:
    """Build `target`'s image on its framework image (built first when missing), or do nothing when
    it is up to date (built=False); what `framework_build.build_framework_image` does for one, and its
    options. `rebuild` redoes the layer, not the framework image. Raises ImageBuildError naming the
    build's log file."""
    steps = as_step_reporter(progress, verbose)
    want = recipe_hash(target)
    framework = base(target)  # raises unless target has a layer
    layer = target.huggingface
    assert layer is not None

    def up_to_date() -> bool:
        return image_build.image_labels(client, target.tag).get(image_build.RECIPE_LABEL) == want

    first: list[image_build.BuildReport] = []

    def framework_first() -> None:  # `rebuild` redoes the layer, not the framework image
        first.append(framework_build.build_framework_image(client, framework, progress=steps, cache_dir=cache_dir,
                                                           verbose=verbose))

    cache = (cache_dir or default_cache_dir()).expanduser()

    def layer_step(log: LogFile) -> tuple[str, ...]:
        config = framework_build.image_config(target, want)
        labels = config["Labels"]
        assert isinstance(labels, dict)
        labels[framework_build.FRAMEWORK_LABEL] = json.dumps(
            {"Framework": target.framework, "FrameworkVersion": target.version, "Python": target.python,
             "TransformersVersion": layer.transformers}, sort_keys=True)
        old_image = image_build.image_id(client, target.tag)
        title = f"Hugging Face layer: pip in a container of {framework.tag} ({len(layer.packages)} pins)"
        with steps.task(title, log=log) as task:
            framework_build.in_container(client, target, framework.tag, SCRIPT, cache, task, target.tag, config)
        image_build.remove_quietly(client, old_image, keep=image_build.image_id(client, target.tag))
        return (f"framework: {framework.tag} {'built' if first[0].built else 'up to date'}", f"commit: {target.tag}")

    return image_build.build_once(
        client, target.tag, want, up_to_date=up_to_date, rebuild=rebuild, cache=cache, steps=steps,
        prepare=framework_first,
        log_name=f"build-huggingface-{layer.transformers}-{target.framework}-{target.version}-py{target.python}",
        building=f"{target.tag} (transformers {layer.transformers} on {target.framework} {target.version}, Python "
                 f"{target.python}) on {framework.tag}", body=layer_step)
