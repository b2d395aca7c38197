"""Which launcher a job's distribution needs, and whether its image carries it.

The toolkit inside the image starts a distribution's processes itself: `mpirun` over ssh for MPI and
the smdistributed libraries (sagemaker_training/mpi.py, smdataparallel.py), `torchrun` for
torch_distributed (sagemaker_training/torch_distributed.py). An image without that launcher fails on
every distribution host only after the job has started, with a toolkit traceback; the images this
project builds say what they carry in a label (images/README.md), so the run can say so before any
container starts. An image without the label (one of the user's own) is not judged: only they know
what is in it.
"""

from __future__ import annotations

from collections.abc import Mapping

from emulator.defaults import PYTORCH_IMAGE
from emulator.errors import ImageBuildError
from emulator.jobspec.model import JobSpec
from emulator.jobspec.model import strategy_enabled as _enabled
from emulator.training_images.frameworks import for_tag
from emulator.training_images.image_recipes import (
    LAUNCHERS_LABEL,
    all_launchers,
    image_launchers,
    load_recipe,
    variant_names,
)

MPI_LAUNCHERS = ("mpirun", "sshd")
TORCH_LAUNCHERS = ("torchrun",)



def required_launchers(spec: JobSpec) -> dict[str, tuple[str, ...]]:
    """The distribution's strategy (as the spec names it) -> the launchers the toolkit runs for it."""
    if spec.distribution is None:
        return {}
    options = spec.distribution.options
    smdistributed = options.get("smdistributed")
    data_parallel = smdistributed.get("dataparallel") if isinstance(smdistributed, Mapping) else None
    model_parallel = smdistributed.get("modelparallel") if isinstance(smdistributed, Mapping) else None
    if _enabled(options.get("torch_distributed")):
        # torchrun launches, smdistributed beside it included (SMP v2, p5).
        return {"torch_distributed": TORCH_LAUNCHERS}
    if _enabled(options.get("mpi")):
        return {"mpi": MPI_LAUNCHERS}
    if _enabled(data_parallel) or _enabled(options.get("pytorchddp")):
        # The toolkit's SMDataParallel runner is mpirun with the library's options.
        return {"smdistributed.dataparallel" if _enabled(data_parallel) else "pytorchddp": MPI_LAUNCHERS}
    if _enabled(model_parallel):
        return {"smdistributed.modelparallel": MPI_LAUNCHERS}
    return {}


def missing_launchers(spec: JobSpec, image: str, labels: Mapping[str, str] | None) -> str | None:
    """One line saying what the image lacks for the distribution and which image has it, or None when
    nothing is missing or the image does not say what it carries."""
    if labels is None or LAUNCHERS_LABEL not in labels:
        return None
    carried = image_launchers(labels)
    for strategy, launchers in required_launchers(spec).items():
        lacking = [name for name in launchers if name not in carried]
        if lacking:
            return (f"distribution.{strategy} needs {' and '.join(lacking)}, which image {image} does not have "
                    f"(it has: {', '.join(sorted(carried)) or 'none'})")
    return None


def images_with(launchers: tuple[str, ...]) -> list[tuple[str, str]]:
    """(variant, tag) of the recipes whose images carry all of `launchers` (a recipe built on another
    carries that one's launchers too); a recipe that cannot be read offers nothing."""
    found = []
    for name in variant_names():
        try:
            recipe = load_recipe(name)
            carried = set(all_launchers(recipe))
        except ImageBuildError:
            continue
        if set(launchers) <= carried:
            found.append((name, recipe.tag))
    return found


def launcher_hint(spec: JobSpec) -> str:
    """Where the missing launchers are: the images of this project that carry them, and how to get one."""
    wanted = tuple(name for launchers in required_launchers(spec).values() for name in launchers)
    offers = [f"image_uri: {tag} (`hetero-emu image build --variant {variant}`)"
              for variant, tag in images_with(wanted)]
    framework = for_tag(PYTORCH_IMAGE)
    if framework is not None and set(wanted) <= set(framework.launchers):
        # The framework images carry torchrun (PyTorch) and mpirun; a job builds the one it names.
        offers.append(f"image_uri: {PYTORCH_IMAGE} (a PyTorch estimator's framework image, built when missing)")
    return "use " + " or ".join(offers) if offers else "use an image that has it"
