"""Image recipes: the folders under the top-level `images/` (images/README.md).

Each image the emulator can build is one folder, `images/<variant>/`, holding a `recipe.yaml` (the
tag, what the image starts FROM, the distribution launchers it carries), a Dockerfile, and the
files the recipe names (Debian packages, Python requirements) or the Dockerfile COPYs. The folder
ships inside the package as `emulator/images` (pyproject.toml maps it), so an installed hetero-emu
finds the same recipes as a source checkout.

Pure: reads files, never talks to Docker (backend/image_build.py builds what a Recipe describes). Also
home of the launchers label, which the runner reads to refuse a distribution an image cannot run.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emulator.errors import ImageBuildError, UsageError

#: The variant `hetero-emu image build` builds when none is named; its tag is DEFAULT_IMAGE.
DEFAULT_VARIANT = "training"
#: The file that makes a folder of images/ a recipe.
RECIPE_FILE = "recipe.yaml"
#: Label on every built image: the launchers it carries, comma-separated (`mpirun,sshd`).
LAUNCHERS_LABEL = "hetero-emu.image.launchers"
#: Label on every built image: the variant (recipe folder) it was built from.
VARIANT_LABEL = "hetero-emu.image.variant"

_KEYS = {"tag", "base", "packages", "requirements", "launchers", "pip_wheel_args"}
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")

_PACKAGE = Path(__file__).resolve().parents[1]  # emulator/, beside its images/ (or the checkout's)


@dataclass(frozen=True)
class Recipe:
    """One image recipe, as read from `images/<name>/recipe.yaml`.

    Exactly one of `debian` (a Debian suite: the image starts FROM a minbase rootfs of it plus
    `packages`) and `base_recipe` (the variant whose image this one starts FROM) is set.
    """

    name: str
    folder: Path
    tag: str
    debian: str | None
    base_recipe: str | None
    packages: tuple[str, ...]
    requirements: str | None
    launchers: tuple[str, ...]
    pip_wheel_args: tuple[str, ...]

    def files(self) -> tuple[Path, ...]:
        """Every file of the recipe folder, sorted: the build context and what the recipe hash covers."""
        return tuple(sorted(p for p in self.folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts))


#: A folder of recipes to build from instead of the package's (a copy of images/ with recipes of one's own).
IMAGES_DIR_ENV = "HETERO_EMU_IMAGES_DIR"


def images_dir() -> Path:
    """The folder of recipes: $HETERO_EMU_IMAGES_DIR, else `emulator/images` in an installed package, else
    `images/` of the checkout."""
    if os.environ.get(IMAGES_DIR_ENV):
        chosen = Path(os.environ[IMAGES_DIR_ENV]).expanduser()
        if not any(chosen.glob(f"*/{RECIPE_FILE}")):
            raise ImageBuildError(f"{IMAGES_DIR_ENV}={chosen} holds no recipe (no */{RECIPE_FILE})",
                                  hint="a copy of hetero-emu's images/ folder with recipes of your own, or unset it")
        return chosen
    # A wheel carries the top-level images/ as emulator/images (pyproject: package-dir). A source
    # checkout (editable install, PYTHONPATH) has it next to the package.
    candidates = (_PACKAGE / "images", _PACKAGE.parent / "images")
    for candidate in candidates:
        # A folder this user may not enter (a checkout under root's 0700 temp folder, run by another
        # user) holds no recipe for them: the run goes on, and only a build says none was found.
        with contextlib.suppress(OSError):
            if any(candidate.glob(f"*/{RECIPE_FILE}")):
                return candidate
    raise ImageBuildError(
        f"no image recipes found (no */{RECIPE_FILE} in {' or '.join(map(str, candidates))})",
        hint="reinstall hetero-emu; its images/ folder is part of the package",
    )


def variant_names() -> tuple[str, ...]:
    """The variants that can be built: the recipe folders under images_dir(), sorted."""
    try:
        root = images_dir()
    except ImageBuildError:
        return ()
    return tuple(sorted(p.parent.name for p in root.glob(f"*/{RECIPE_FILE}")))


def variant_for_tag(tag: str) -> str | None:
    """The variant whose recipe builds `tag` (so a missing image can be named with its build command),
    None when no readable recipe does."""
    for name in variant_names():
        try:
            if load_recipe(name).tag == tag:
                return name
        except ImageBuildError:
            continue
    return None


def load_recipe(name: str) -> Recipe:
    """Read `images/<name>/recipe.yaml`. UsageError for an unknown variant, ImageBuildError for a bad file."""
    import yaml  # deferred: the planner imports this module's label helpers without needing yaml

    known = variant_names()
    if name not in known:
        raise UsageError(
            f"unknown image variant {name!r}",
            hint=f"--variant is one of: {', '.join(known) or '(none found)'}",
        )
    folder = images_dir() / name
    path = folder / RECIPE_FILE
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ImageBuildError(f"cannot read image recipe {path}: {exc}", hint="fix the recipe file") from exc
    packages_file = data.get("packages") if isinstance(data, dict) else None
    packages_text = _read_text(folder, packages_file, path) if isinstance(packages_file, str) else None
    return parse_recipe(name, folder, data, packages_text)


def parse_recipe(name: str, folder: Path, data: Any, packages_text: str | None) -> Recipe:
    """A Recipe from the parsed recipe.yaml and the text of its packages file; ImageBuildError naming the field."""
    where = f"{folder.name}/{RECIPE_FILE}"

    def bad(field: str, why: str) -> ImageBuildError:
        return ImageBuildError(f"image recipe {where}: {field} {why}", hint="see images/README.md (Recipes)")

    if not isinstance(data, dict):
        raise bad("(top level)", "must be a mapping")
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise bad(unknown[0], f"is not a recipe field (known: {', '.join(sorted(_KEYS))})")
    tag = data.get("tag")
    if not isinstance(tag, str) or ":" not in tag:
        raise bad("tag", "must be an image tag such as hetero-emu/training:py311")
    base = data.get("base")
    if not isinstance(base, dict) or len(base) != 1 or next(iter(base)) not in ("debian", "recipe"):
        raise bad("base", "must be {debian: <suite>} or {recipe: <variant>}")
    kind, value = next(iter(base.items()))
    if not isinstance(value, str) or not _NAME.match(value):
        raise bad(f"base.{kind}", "must be a name")
    if kind == "recipe" and value == name:
        raise bad("base.recipe", "cannot name the recipe itself")
    packages_file = data.get("packages")
    if packages_file is not None and kind != "debian":
        # No apt runs inside a docker build (no registry, no network by design): Debian packages
        # can only go into a rootfs, which only a Debian-based recipe makes.
        raise bad("packages", "needs a Debian base (base: {debian: ...}); put them in that recipe")
    requirements = data.get("requirements")
    if requirements is not None and not isinstance(requirements, str):
        raise bad("requirements", "must be a file name in the recipe folder")
    return Recipe(
        name=name,
        folder=folder,
        tag=tag,
        debian=value if kind == "debian" else None,
        base_recipe=value if kind == "recipe" else None,
        packages=parse_package_list(packages_text or ""),
        requirements=requirements,
        launchers=_names(data.get("launchers", []), bad, "launchers"),
        pip_wheel_args=_strings(data.get("pip_wheel_args", []), bad, "pip_wheel_args"),
    )


def parse_package_list(text: str) -> tuple[str, ...]:
    """Debian package names of a packages file: one a line, `#` comments and blank lines ignored."""
    return tuple(name for line in text.splitlines() if (name := line.split("#", 1)[0].strip()))


def launchers_label(launchers: Iterable[str]) -> str:
    """The LAUNCHERS_LABEL value for these launchers: sorted, unique, comma-separated."""
    return ",".join(sorted(set(launchers)))


# How many recipes a chain of `base: {recipe: ...}` may hold before it counts as a loop.
CHAIN_LIMIT = 8


def chain_error(recipe: Recipe) -> ImageBuildError:
    return ImageBuildError(
        f"image recipe {recipe.name}: its chain of base recipes is a loop or deeper than {CHAIN_LIMIT}",
        hint="base: {recipe: ...} must end at a recipe with base: {debian: ...}",
    )


def all_launchers(recipe: Recipe) -> tuple[str, ...]:
    """The launchers of the recipe and of every recipe it is based on: what its image carries
    (sorted, unique). A chain that loops is an ImageBuildError."""
    found = list(recipe.launchers)
    chain = recipe
    for _ in range(CHAIN_LIMIT):
        if chain.base_recipe is None:
            return tuple(sorted(set(found)))
        chain = load_recipe(chain.base_recipe)
        found += chain.launchers
    raise chain_error(recipe)


def image_launchers(labels: Mapping[str, str] | None) -> frozenset[str]:
    """The launchers an image carries, from its labels (empty for an image not built here)."""
    value = (labels or {}).get(LAUNCHERS_LABEL, "")
    return frozenset(part.strip() for part in value.split(",") if part.strip())


def _read_text(folder: Path, name: str, recipe: Path) -> str:
    path = folder / name
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ImageBuildError(
            f"image recipe {recipe}: packages file {path} cannot be read: {exc.strerror}",
            hint="see images/README.md (Recipes)",
        ) from exc


_Bad = Callable[[str, str], ImageBuildError]


def _strings(value: Any, bad: _Bad, field: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise bad(field, "must be a list of strings")
    return tuple(value)


def _names(value: Any, bad: _Bad, field: str) -> tuple[str, ...]:
    names = _strings(value, bad, field)
    for item in names:
        if not _NAME.match(item) or "," in item:
            raise bad(field, f"has {item!r}, which is not a launcher name")
    return names
