"""What a run checks and makes ready before it creates anything: the job's image (built when a recipe
builds it and the run may build: the default image, a framework image, a variant of images/), the
launchers the job's distribution needs in it, the wheelhouse of its requirements.txt, and no
resources of a job with this name in the engine."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

from emulator.backend import Backend
from emulator.backend.networks import RESTART_FIX
from emulator.defaults import DEFAULT_IMAGE
from emulator.errors import EnvironmentProblem, ImageMissing, JobFolderTaken
from emulator.options import RunOptions
from emulator.planning.plan import Plan
from emulator.reports.console import Reporter
from emulator.run import build_status, wheelhouse
from emulator.training_images.frameworks import FrameworkImage
from emulator.training_images.image_recipes import all_launchers, load_recipe, variant_for_tag
from emulator.training_images.launchers import launcher_hint, missing_launchers
from emulator.training_images.stand_ins import for_tag


class Preflight:
    """One run's checks before its hosts are created. A missing image is built only with the run's
    builders (`image_builder` for the default image, `framework_builder` for a framework image) and
    when `options.build_image`."""

    def __init__(self, plan: Plan, backend: Backend, reporter: Reporter, options: RunOptions,
                 image_builder: Callable[[Reporter], object] | None,
                 framework_builder: Callable[[FrameworkImage, Reporter], object] | None) -> None:
        self.plan = plan
        self.backend = backend
        self.reporter = reporter
        self.options = options
        self.image_builder = image_builder
        self.framework_builder = framework_builder

    def ensure_image(self) -> None:
        self.find_image()
        problem = missing_launchers(self.plan.spec, self.plan.image, self.backend.images.labels(self.plan.image))
        if problem is not None:
            raise ImageMissing(problem, hint=launcher_hint(self.plan.spec))

    def find_image(self) -> None:
        image = self.plan.image
        if self.backend.images.present(image):
            return
        framework = for_tag(image)
        if framework is not None:
            self.build_framework_image(framework)
            return
        if image != DEFAULT_IMAGE:
            variant = variant_for_tag(image)
            if variant is not None and all_launchers(load_recipe(variant)):
                self.build_recipe_image(image, variant)
                return
            # An image no recipe builds, or one that runs no jobs (the swarm node carries no launchers)
            # is not built on the fly: say how to build it.
            raise ImageMissing(
                f"image {image} is not in the Docker engine",
                hint=f"build it with `hetero-emu image build --variant {variant}`" if variant else
                "build or load it first (docker build / docker load); no registry is reachable here",
            )
        if not self.options.build_image:
            raise ImageMissing(f"the default image {image} is not built yet (and --no-build builds nothing)",
                               hint="build it with `hetero-emu image build`, or run without --no-build")
        if self.image_builder is None:
            raise ImageMissing(f"the default image {image} is not built yet", hint="run `hetero-emu image build`")
        # The builder says what comes of it: built (its steps and its log file), or found built by
        # another process that held the build lock meanwhile ("waited 93 s for another build").
        self.reporter.step(f"the default image {image} is missing")
        with self.build_said(image) as reporter:
            self.image_builder(reporter)

    def build_framework_image(self, framework: FrameworkImage) -> None:
        """A missing framework image is built as the default one is (progress, under the build lock, once)."""
        command = framework.build_command
        if not self.options.build_image:
            raise ImageMissing(f"the framework image {framework.tag} is not built yet (and --no-build builds nothing)",
                               hint=f"build it with `{command}`, or run without --no-build")
        if self.framework_builder is None:
            raise ImageMissing(f"the framework image {framework.tag} is not built yet", hint=f"run `{command}`")
        self.reporter.step(f"the framework image {framework.tag} is missing: building it "
                           f"({framework.framework} {framework.version} on Python {framework.python})")
        if (missing := framework.horovod_missing()) is not None:
            self.reporter.warn(missing)
        with self.build_said(framework.tag) as reporter:
            self.framework_builder(framework, reporter)

    def build_recipe_image(self, image: str, variant: str) -> None:
        """A missing image of another training recipe of images/ (a variant of the default image) is
        built as the default one is."""
        command = f"hetero-emu image build --variant {variant}"
        if not self.options.build_image:
            raise ImageMissing(f"image {image} is not built yet (and --no-build builds nothing)",
                               hint=f"build it with `{command}`, or run without --no-build")
        if not self.backend.capabilities.builds_images:
            raise ImageMissing(f"image {image} is not in the Docker engine", hint=f"build it with `{command}`")
        self.reporter.step(f"the image {image} is missing: building it from its recipe {variant}")
        with self.build_said(image) as reporter:
            self.backend.images.build_recipe_image(variant, reporter)

    def build_said(self, image: str) -> contextlib.AbstractContextManager[Reporter]:
        """The reporter a build of `image` reports to: the console, and for a job CreateTrainingJob recorded
        before this run (the SDK's, `serve`'s) its Starting StatusMessage, which says the build's steps
        while the job waits (emulator/run/build_status.py). A `hetero-emu run` job is recorded once staged."""
        made = self.options.created is not None
        return build_status.publishing(self.reporter, image,
                                       build_status.to_record(self.plan.job_name) if made else None)

    def ensure_wheels(self) -> None:
        """The wheelhouse the hosts' `pip install -r requirements.txt` reads, resolved in a container of
        the job's image before anything is staged or created: a requirement pip cannot resolve for the
        image's Python fails the run here (WheelhouseError)."""
        requirements, folder = self.plan.spec.requirements, self.plan.wheelhouse
        if requirements is None or folder is None:
            return
        image = self.plan.image
        self.reporter.step("requirements.txt: wheels for the hosts' pip (no package index in the containers)")

        def build(code: Path, out: Path, progress: Callable[[str], None], shown: str) -> None:
            self.backend.images.build_wheelhouse(image, code, out, progress, shown)

        wheelhouse.ensure(requirements, Path(folder), self.backend.images.image_id(image), self.reporter.info, build,
                          warn=self.reporter.warn)

    def check_leftovers(self) -> None:
        """Refuse to start over resources of a job with this very name; warn about other jobs' ones
        whose driver is gone (a job another driver is running now is none of our business)."""
        found = self.backend.find()
        mine = [r for r in found if r.job == self.plan.job_name]
        if mine:
            names = ", ".join(sorted(r.name for r in mine))
            job = self.plan.job_name
            if self.plan.spec.job_name is None:
                # A generated name another run of this spec drew at the same moment: its containers
                # can exist before this run reaches the job folder. run_job takes the next name.
                raise JobFolderTaken(f"another run drew the job name {job} at the same moment",
                                     hint="give the job a job_name, or run it again")
            if all(r.stuck for r in mine):
                # Its name is taken until the engine restarts (backend/networks.py, moby#42119).
                raise EnvironmentProblem(f"the network of an earlier job named {job} is stuck in the engine: {names}",
                                         hint=f"give this run another --job-name, or restart the engine "
                                         f"({RESTART_FIX}) and `hetero-emu clean --job {job}`")
            if all(r.orphaned for r in mine):
                raise EnvironmentProblem(f"containers or networks of an earlier job named {job} are still there: "
                                         f"{names}", hint=f"`hetero-emu clean --job {job}` removes them")
            raise EnvironmentProblem(f"a job named {job} is running now (its containers: {names})",
                                     hint="give this run another --job-name, or stop that job first "
                                     f"(`hetero-emu stop {job}`)")
        # A stuck network blocks nothing (it holds a name no later job draws, and one small subnet):
        # `ps` and `clean` tell it with its fix, and a run stays quiet about it.
        leftovers = {r.job for r in found if r.orphaned and not r.stuck}
        if leftovers:
            self.reporter.warn(
                f"containers or networks of earlier jobs are still there ({', '.join(sorted(leftovers))}); "
                "`hetero-emu clean` removes them"
            )
