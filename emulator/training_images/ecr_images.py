"""Which image runs a job whose request names an ECR image.

A framework estimator without `image_uri` (`PyTorch(framework_version="1.11.0", py_version="py38")`)
asks the SDK for AWS's Deep Learning Container of that framework, an ECR name such as
`763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:1.11.0-gpu-py38`. The rules, in order:

1. **A real image wins.** An image the engine has under the very name the request gives (pulled
   elsewhere and `docker load`ed, or a local build tagged so) runs as it is.
2. **The user's table.** A key is a whole image name, a repository and tag
   (`pytorch-training:1.11.0-gpu-py38`) or a repository (`pytorch-training`); the most specific key
   wins, and `*` stands for every other ECR name (`EmulatorSession(images=...)`).
3. **A framework image.** AWS's PyTorch and TensorFlow training images become the framework image of
   that version and Python (`emulator.training_images.frameworks`; built when missing).
4. Otherwise the name has no stand-in: an error naming it, before anything starts.

A name that is not an ECR name is a local image already and is used as it is. Pure: the engine is
asked only through the `present` function the caller passes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from emulator.errors import EmulatorError, ImageMissing
from emulator.jobspec.model import JobSpec
from emulator.training_images.frameworks import FrameworkImage
from emulator.training_images.stand_ins import from_ecr, no_stand_in

# <account>.dkr.ecr.<region>.amazonaws.com[.cn]/<repository>[:tag|@digest]
ECR_NAME = re.compile(r"(?P<registry>\d{12}\.dkr\.ecr(-fips)?\.[a-z0-9-]+\.amazonaws\.com(\.cn)?)/"
                      r"(?P<repository>[^:@]+)(?P<reference>[:@].+)?")
#: The user's table by default: nothing beyond the framework images.
DEFAULT_IMAGE_MAP: Mapping[str, str] = {}


@dataclass(frozen=True)
class ImageChoice:
    """The image a job names and the image that runs it."""

    requested: str
    image: str
    #: The framework image that stands in (rule 3), None otherwise.
    framework: FrameworkImage | None = None

    @property
    def stands_in(self) -> bool:
        return self.image != self.requested

    def notes(self, requirements: bool = False) -> tuple[str, ...]:
        """The lines a job prints once: which image stands in for the one it named, and on which Python
        a framework image runs when it is not the one named (`pytorch 1.11.0 py38: running on Python 3.9
        (Debian has no 3.8)`, with `requirements` saying how its requirements.txt resolves)."""
        if not self.stands_in:
            return ()
        lines = [f"{self.image} stands in for {self.requested}, which is not in the Docker engine"]
        if self.framework is not None and self.framework.substituted:
            lines.append(self.framework.python_note(requirements))
        return tuple(lines)

    @property
    def python_substituted(self) -> FrameworkImage | None:
        """The framework stand-in when it runs another Python than the one named, else None."""
        return self.framework if self.framework is not None and self.framework.substituted else None


def choose_image(name: str, table: Mapping[str, str], present: Callable[[str], bool]) -> ImageChoice:
    """The image that runs for `name` (the module's rules). ImageMissing when an ECR name has no
    stand-in; UsageError when it names a framework version or Python that cannot run here."""
    match = ECR_NAME.fullmatch(name)
    if match is None or present(name):
        return ImageChoice(name, name)
    repository = match["repository"]
    tag = (match["reference"] or ":latest").lstrip(":")
    for key in (name, f"{repository}:{tag}", repository):
        if key in table:
            return ImageChoice(name, table[key])
    framework = from_ecr(repository, tag)
    if framework is not None:
        return ImageChoice(name, framework.tag, framework)
    if "*" in table:
        return ImageChoice(name, table["*"])
    raise ImageMissing(
        f"image {name} is not in the Docker engine, and no local image stands in for it "
        f"({no_stand_in(repository, tag)})",
        hint=f"load or tag a local image as {name} (docker load / docker tag), or map its repository to a "
        f"local image: EmulatorSession(images={{'{repository}': 'IMAGE'}})")


def local_image(name: str, table: Mapping[str, str], present: Callable[[str], bool] = lambda name: False) -> str:
    """The image that runs for `name`: `choose_image(...).image`."""
    return choose_image(name, table, present).image


def with_image(spec: JobSpec, table: Mapping[str, str], present: Callable[[str], bool]) -> JobSpec:
    """The spec with the image that runs it (`choose_image`), the name it gave and the notes kept. On
    a framework stand-in that runs another Python than the one named, the job's requirements.txt is
    resolved as pip would resolve it for the named one, the framework's pins kept (emulator.run.wheelhouse)."""
    choice = choose_image(spec.image_uri, table, present)
    if not choice.stands_in:
        return spec
    requirements = spec.requirements
    framework = choice.python_substituted
    if requirements is not None and framework is not None and framework.named_python is not None:
        requirements = replace(requirements, as_python=framework.named_python, keep=framework.framework_pins,
                               core=framework.core_pins)
    return replace(spec, image_uri=choice.image, requested_image=choice.requested, requirements=requirements,
                   image_notes=choice.notes(requirements is not None))


def python_note(spec: JobSpec) -> str | None:
    """Of a spec `with_image` gave, the note that its framework stand-in runs another Python (None
    when it does not): the one note a job says as a warning, since the job's code may behave otherwise."""
    if spec.requested_image is None:
        return None
    try:
        framework = choose_image(spec.requested_image, {}, lambda name: False).python_substituted
    except EmulatorError:  # a name the user's table maps, which no framework image stands in for
        return None
    if framework is None or framework.tag != spec.image_uri:
        return None
    return framework.python_note(spec.requirements is not None)
