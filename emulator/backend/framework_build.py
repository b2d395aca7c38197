"""Build a framework image (`emulator.training_images.frameworks.FrameworkImage`) from images/framework/, offline.

Four steps, reported as every image build reports them (`emulator.backend.image_build`); the venv's
has a second half, AWS's packages (3b):

1. the Debian rootfs of the Python the image runs (bullseye 3.9, bookworm 3.11, trixie 3.13) with
   images/framework/packages.txt, made with mmdebstrap and cached by its recipe;
2. that tarball `docker import`ed as `hetero-emu/base:framework-<suite>`;
3. the venv: images/framework/venv.sh in a container of that base which reaches the package index
   (`emulator.backend.index_container`): pip installs the pinned framework, its companions and the
   toolkits into /opt/venv with the host's pip cache mounted (a second build downloads nothing), and a
   TensorFlow image compiles Horovod once per (Horovod, TensorFlow, Python); the container is
   committed as a stage image, kept while the rootfs, venv.sh and the pins stay the same;
3b. what AWS's training image of the version installs for scripts (`FrameworkImage.aws_packages`: scipy,
   pandas, opencv, tf-models-official...): images/framework/aws_packages.sh in a container of the venv
   stage, committed as a stage image of its own, kept while the venv stage, aws_packages.sh and those
   pins stay the same (a change to them redoes this stage, not the venv's gigabytes); none: skipped;
4. images/framework/configure.sh (ssh, PAM, the /opt/ml folders) in a container of the last stage image,
   committed as the image with the environment AWS's image of the framework has.

A `docker build` would copy the multi-gigabyte wheels into the build context, a layer, and a second
stage; a commit writes the installed files once. Like Docker's layer cache, a change to stage 4's
files redoes stage 4 alone (seconds), not the gigabytes of stage 3. Each image carries a label with
the hash of what made it; when an image with that tag and label exists its step is skipped.
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
from pathlib import Path

import docker
import docker.errors

from emulator.backend import image_build, index_container
from emulator.defaults import default_cache_dir
from emulator.errors import ImageBuildError
from emulator.reports.progress import LogFile, StepReporter, Task, as_step_reporter
from emulator.training_images.frameworks import FrameworkImage
from emulator.training_images.image_recipes import (
    LAUNCHERS_LABEL,
    VARIANT_LABEL,
    Recipe,
    images_dir,
    launchers_label,
    parse_package_list,
)

#: The recipe folder every framework image is built from.
VARIANT = "framework"
#: Labels on a framework image: what it is, so `describe` and the tests can say it without running it.
FRAMEWORK_LABEL = "hetero-emu.image.framework"
BUILD = "/opt/hetero-emu-build"
#: The files of images/training/ that configure.sh copies in (sshd and ssh settings): part of the hash.
SHARED_FILES = ("training/sshd.conf", "training/ssh.conf")
_PIP_FAILURE = re.compile(r"^(ERROR: .*)$")
#: PATH in every framework image: the venv's `train`, python and pip first.
IMAGE_PATH = "/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def base_recipe(suite: str) -> Recipe:
    """The rootfs recipe of framework images on `suite` (its packages from images/framework/packages.txt)."""
    folder = images_dir() / VARIANT
    try:
        packages = parse_package_list((folder / "packages.txt").read_text(encoding="utf-8"))
    except OSError as exc:
        raise ImageBuildError(f"cannot read {folder / 'packages.txt'}: {exc.strerror}",
                              hint="reinstall hetero-emu; images/ is part of the package") from exc
    return Recipe(name=f"{VARIANT}-{suite}", folder=folder, tag=f"{image_build.BASE_REPOSITORY}:{VARIANT}-{suite}",
                  debian=suite, base_recipe=None, packages=packages, requirements=None, launchers=(),
                  pip_wheel_args=())


#: The stage image of a framework image's venv (step 3), reused while what made it is unchanged.
STAGE_REPOSITORY = "hetero-emu/framework-stage"


def venv_hash(target: FrameworkImage) -> str:
    """sha256 of what decides the venv (step 3): the rootfs recipe, venv.sh and the pins."""
    folder = images_dir() / VARIANT
    digest = hashlib.sha256(image_build._rootfs_recipe(base_recipe(target.suite)).encode())
    digest.update(b"venv.sh\0" + read_file(folder / "venv.sh") + b"\0")
    digest.update(json.dumps([target.requirements, target.horovod, target.python]).encode())
    return digest.hexdigest()


def aws_hash(target: FrameworkImage) -> str:
    """sha256 of what decides the AWS-packages stage (step 3b): the venv's hash, aws_packages.sh and the pins."""
    digest = hashlib.sha256(venv_hash(target).encode())
    digest.update(b"aws_packages.sh\0" + read_file(images_dir() / VARIANT / "aws_packages.sh") + b"\0")
    digest.update(json.dumps(target.aws_packages).encode())
    return digest.hexdigest()


def recipe_hash(target: FrameworkImage) -> str:
    """sha256 of what decides the image: its last stage's hash, configure.sh, the shared ssh settings and the
    toolkit's module."""
    digest = hashlib.sha256((aws_hash(target) if target.aws_packages else venv_hash(target)).encode())
    for name in (f"{VARIANT}/configure.sh", *SHARED_FILES):
        digest.update(name.encode() + b"\0" + read_file(images_dir() / name) + b"\0")
    digest.update(target.training_module.encode())
    return digest.hexdigest()


def stage_tag(target: FrameworkImage) -> str:
    return f"{STAGE_REPOSITORY}:{target.framework}-{target.version}-py{target.python.replace('.', '')}"


def aws_stage_tag(target: FrameworkImage) -> str:
    return stage_tag(target) + "-aws"


def up_to_date(client: docker.DockerClient, target: FrameworkImage) -> bool:
    return image_build.image_labels(client, target.tag).get(image_build.RECIPE_LABEL) == recipe_hash(target)


def build_framework_image(
    client: docker.DockerClient,
    target: FrameworkImage,
    *,
    rebuild: bool = False,
    progress: StepReporter | image_build.Progress = print,
    cache_dir: Path | None = None,
    verbose: bool = False,
) -> image_build.BuildReport:
    """Build `target`'s image, or do nothing when it is up to date (built=False). `rebuild` redoes the
    install step (the rootfs, pip's cache and Horovod's wheel stay cached). Raises ImageBuildError,
    naming the build's log file. A Hugging Face image is its framework image and a layer, built by
    `emulator.backend.huggingface_build` (`emulator.backend.docker_images.LocalImages` picks which)."""
    if target.huggingface is not None:
        raise ImageBuildError(f"{target.tag} is a Hugging Face image", hint="build it with huggingface_build")
    steps = as_step_reporter(progress, verbose)
    cache = (cache_dir or default_cache_dir()).expanduser()
    want = recipe_hash(target)
    return image_build.build_once(
        client, target.tag, want, up_to_date=lambda: up_to_date(client, target), rebuild=rebuild, cache=cache,
        steps=steps, log_name=f"build-{target.framework}-{target.version}-py{target.python}",
        building=f"{target.tag} ({target.framework} {target.version} on Python {target.python}) from "
                 f"{images_dir() / VARIANT}",
        body=lambda log: _build_locked(client, target, cache, want, rebuild=rebuild, steps=steps, log=log))


def _build_locked(client: docker.DockerClient, target: FrameworkImage, cache: Path, want: str, *, rebuild: bool,
                  steps: StepReporter, log: LogFile) -> tuple[str, ...]:
    base = base_recipe(target.suite)
    # The rootfs is redone only with --rebuild of the rootfs itself; a framework --rebuild keeps it.
    base_step = image_build._step_base(client, base, cache, rebuild=False, steps=steps, log=log)
    stage, venv = stage_tag(target), venv_hash(target)
    if not rebuild and image_build.image_labels(client, stage).get(image_build.RECIPE_LABEL) == venv:
        steps.info(f"✓ {image_build._title(base, 3, f'venv: {stage} is up to date')}")
        venv_step = "venv: up to date"
    else:
        title = image_build._title(base, 3, f"venv: pip in a container of {image_build.base_image(base)} "
                                       f"({len(target.requirements)} pins{', horovod' if target.horovod else ''})")
        old_stage = image_build.image_id(client, stage)
        with steps.task(title, log=log) as task:
            in_container(client, target, image_build.base_image(base), "venv.sh", cache, task,
                          stage, {"Env": [f"PATH={IMAGE_PATH}"], "Cmd": ["bash"],
                                  "Labels": {image_build.RECIPE_LABEL: venv,
                                             image_build.STAGE_LABEL: "framework-venv"}})
        image_build.remove_quietly(client, old_stage, keep=image_build.image_id(client, stage))
        venv_step = "venv: built"
    last, aws_step = stage, _aws_stage(client, target, base, stage, cache, rebuild=rebuild, steps=steps, log=log)
    if aws_step is not None:
        last = aws_stage_tag(target)
    old_image = image_build.image_id(client, target.tag)
    with steps.task(image_build._title(base, 4, f"configure and commit {target.tag}"), log=log) as task:
        in_container(client, target, last, "configure.sh", cache, task, target.tag, image_config(target, want))
    image_build.remove_quietly(client, old_image, keep=image_build.image_id(client, target.tag))
    return (base_step, venv_step, *((aws_step,) if aws_step else ()), f"commit: {target.tag}")


def _aws_stage(client: docker.DockerClient, target: FrameworkImage, base: Recipe, stage: str, cache: Path, *,
               rebuild: bool, steps: StepReporter, log: LogFile) -> str | None:
    """Step 3b: AWS's image packages over the venv stage, as a stage image of their own (None: the version
    has none for this Python, and the step is skipped)."""
    if not target.aws_packages:
        return None
    tag, want = aws_stage_tag(target), aws_hash(target)
    if not rebuild and image_build.image_labels(client, tag).get(image_build.RECIPE_LABEL) == want:
        steps.info(f"✓ {image_build._title(base, 3, f'AWS image packages: {tag} is up to date')}")
        return "aws packages: up to date"
    old = image_build.image_id(client, tag)
    # Numbered with the venv (step 3 of the four every image build shows): it is the venv's second half.
    title = image_build._title(base, 3, f"AWS image packages: pip in a container of {stage} "
                                        f"({len(target.aws_packages)} pins)")
    with steps.task(title, log=log) as task:
        in_container(client, target, stage, "aws_packages.sh", cache, task, tag,
                      {"Env": [f"PATH={IMAGE_PATH}"], "Cmd": ["bash"],
                       "Labels": {image_build.RECIPE_LABEL: want, image_build.STAGE_LABEL: "framework-aws"}})
    image_build.remove_quietly(client, old, keep=image_build.image_id(client, tag))
    return "aws packages: built"


def in_container(client: docker.DockerClient, target: FrameworkImage, image: str, script: str, cache: Path,
                  task: Task, tag: str, config: dict[str, object]) -> None:
    """Run images/framework/<script> in a container of `image` that reaches the index; commit it as
    `tag` with exactly `config`. ImageBuildError naming pip's error when the script fails."""
    pip_cache = cache / "pip"
    horovod = cache / "horovod" / _horovod_key(target)
    for folder in (pip_cache, horovod):
        image_build._mkdir(folder)
    labels = config.get("Labels")
    want = labels.get(image_build.RECIPE_LABEL) if isinstance(labels, dict) else None
    with tempfile.TemporaryDirectory(prefix="hetero-emu-framework-") as tmp:
        (Path(tmp) / "requirements.txt").write_text("".join(pin + "\n" for pin in target.requirements))
        (Path(tmp) / "aws-packages.txt").write_text("".join(pin + "\n" for pin in target.aws_packages))
        binds = {
            tmp: {"bind": BUILD + "/job", "mode": "ro"},
            str(images_dir()): {"bind": BUILD + "/images", "mode": "ro"},
            str(pip_cache): {"bind": "/root/.cache/pip", "mode": "rw"},
            str(horovod): {"bind": BUILD + "/wheels", "mode": "rw"},
        }
        environment = {"HETERO_EMU_PYTHON": target.python, "HETERO_EMU_HOROVOD": target.horovod or "",
                       "HETERO_EMU_REQUIREMENTS": BUILD + "/job/requirements.txt",
                       "HETERO_EMU_AWS_PACKAGES": BUILD + "/job/aws-packages.txt"}

        def commit(container: docker.models.containers.Container) -> None:
            task.log(f"committing the container as {tag}")
            repository, name = tag.rsplit(":", 1)
            container.commit(repository=repository, tag=name, conf=config)

        outcome = index_container.run(
            client, image, ["bash", f"{BUILD}/images/{VARIANT}/{script}"], environment=environment,
            binds=binds, on_line=task.log, commit=commit)
    if outcome.exit_code != 0:
        failed = next((line for line in reversed(outcome.tail) if _PIP_FAILURE.match(line)), None)
        raise ImageBuildError(
            f"{script} of {target.framework} {target.version} on Python {target.python} failed (exit code "
            f"{outcome.exit_code})" + (f": {failed}" if failed else ""),
            hint="the build container needs the package index (PyPI) as the host reaches it; see the output above")
    if image_build.image_labels(client, tag).get(image_build.RECIPE_LABEL) != want:
        raise ImageBuildError(f"committing {tag} left no image with the new label",
                              hint=f"run `{target.build_command} --rebuild`")


def image_config(target: FrameworkImage, want: str) -> dict[str, object]:
    # The whole config, not changes over the build container's: that one's variables (PIP_CERT, ...)
    # and command must not become the image's.
    return {
        "Env": [
            "VIRTUAL_ENV=/opt/venv",
            f"PATH={IMAGE_PATH}",
            "LANG=C.UTF-8",
            "PYTHONUNBUFFERED=1",
            "PYTHONDONTWRITEBYTECODE=1",
            # As in AWS's image of the framework: the toolkit's `train` hands the job to this module.
            f"SAGEMAKER_TRAINING_MODULE={target.training_module}",
        ],
        "Cmd": ["train"],  # what the service runs in a training container (docs/contract.md: Command)
        "Entrypoint": None,
        "WorkingDir": "/opt/ml/code",
        "Labels": {
            image_build.RECIPE_LABEL: want,
            VARIANT_LABEL: VARIANT,
            LAUNCHERS_LABEL: launchers_label(target.launchers),
            FRAMEWORK_LABEL: json.dumps({"Framework": target.framework, "FrameworkVersion": target.version,
                                         "Python": target.python}, sort_keys=True),
        },
    }


def _horovod_key(target: FrameworkImage) -> str:
    # A Horovod wheel is compiled against one TensorFlow and one Python: its cache key is all three.
    return f"horovod-{target.horovod}-tf{target.version}-py{target.python}" if target.horovod else "none"


def read_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ImageBuildError(f"image recipe file {path} is missing: {exc.strerror}",
                              hint="reinstall hetero-emu; images/ is part of the package") from exc
