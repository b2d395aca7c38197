"""Build an image from its recipe in images/<variant>/, offline (images/README.md).

No registry is reachable where the emulator runs, so nothing can be pulled, not even a base image.
Every image is therefore made from parts this machine can reach:

1. for a recipe with a Debian base, a minbase rootfs of its packages made with mmdebstrap (or
   debootstrap) from the Debian archive the host's apt already uses, written as a tarball into the
   cache directory; for a recipe based on another recipe, that recipe's image, built first;
2. that tarball `docker import`ed as the recipe's base image;
3. wheels of the recipe's requirements built on the host with `pip wheel` (the
   sagemaker-training toolkit is source-only and needs gcc + Python headers, which the host has
   and a minbase image does not);
4. a classic `docker build` of the recipe's Dockerfile with those wheels, `FROM` the base.

The image carries a label with the hash of its recipe; when an image with that tag and that label
exists the whole build is skipped. This is the only module that builds images.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import docker
import docker.errors
import requests

from emulator.backend.docker_http import read_timeout

# What every build returns, and the label it puts on the image, are the image capability's contract
# (a loaded image is up to date by the same label); their names stay importable here.
from emulator.backend.images import RECIPE_LABEL as RECIPE_LABEL
from emulator.backend.images import BuildReport as BuildReport
from emulator.defaults import default_cache_dir
from emulator.errors import ImageBuildError
from emulator.reports.progress import LogFile, StepReporter, Task, as_step_reporter, new_log
from emulator.training_images.image_recipes import (
    CHAIN_LIMIT,
    DEFAULT_VARIANT,
    LAUNCHERS_LABEL,
    VARIANT_LABEL,
    Recipe,
    all_launchers,
    chain_error,
    launchers_label,
    load_recipe,
)

Progress = Callable[[str], None]

#: The repository of the imported Debian rootfs of a recipe, tagged with the recipe's name
#: (`hetero-emu/base:training`); the Dockerfile gets it as the build argument BASE_IMAGE.
BASE_REPOSITORY = "hetero-emu/base"
#: Label on the base image: the key of the rootfs recipe it was made from.
ROOTFS_LABEL = "hetero-emu.image.rootfs"
#: Label the Dockerfile puts on its first stage, so that stage can be pruned after the build.
STAGE_LABEL = "hetero-emu.image.stage"

#: The Debian suite whose mirrors are read from the host (bookworm: its Python is the 3.11 the
#: host-built wheels are for).
SUITE = "bookworm"
#: Files deleted from every rootfs before it is packed: openssh-server's postinst generates host
#: keys, and a key baked into an image would be shared by every host of every job. The emulator
#: mounts a per-job host key instead (images/training/sshd.conf).
ROOTFS_REMOVE: tuple[str, ...] = ("etc/ssh/ssh_host_*",)
#: Keep documentation out of the rootfs as Debian's slim images do (copyright files stay); this
#: config is also written into the image, so packages a user adds later stay slim too.
DPKG_OPTIONS: tuple[str, ...] = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/lintian/*",
)
#: mmdebstrap's hook that merges /usr with symlinks itself. Without it, bookworm's
#: init-system-helpers pulls in the usrmerge package and, through it, ~45 MB of perl.
MERGED_USR_HOOK = Path("/usr/share/mmdebstrap/hooks/merged-usr")
#: Suites the hook is not for: bullseye predates usrmerge's pull-in (and the hook's essential step
#: fails there), so its rootfs keeps the layout its own packages give it.
NO_MERGED_USR_HOOK = frozenset({"bullseye"})
#: A rootfs is only useful for building this image, so recommends would be dead weight.
APT_OPTIONS: tuple[str, ...] = ('APT::Install-Recommends "false"',)

#: Environment variables that override the Debian mirror read from the host's apt sources.
MIRROR_ENV = "HETERO_EMU_DEBIAN_MIRROR"
SECURITY_MIRROR_ENV = "HETERO_EMU_DEBIAN_SECURITY_MIRROR"

_STEPS = 4
#: `Step 3/12 : RUN ...`: the classic builder's progress through the Dockerfile.
_DOCKERFILE_STEP = re.compile(r"^Step (\d+)/(\d+) :")


@dataclass(frozen=True)
class AptSource:
    """One `deb` line of the host's apt configuration (one URI x one suite)."""

    uri: str
    suite: str
    components: tuple[str, ...]

    def line(self) -> str:
        return " ".join(["deb", self.uri, self.suite, *self.components])


# --------------------------------------------------------------------------------------------
# public API


def image_present(client: docker.DockerClient, tag: str) -> bool:
    """True when the engine has an image with this tag. Other engine errors propagate."""
    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def base_image(recipe: Recipe) -> str:
    """The tag the recipe's Dockerfile starts FROM: its imported rootfs, or its base recipe's image."""
    if recipe.base_recipe is not None:
        return load_recipe(recipe.base_recipe).tag
    return f"{BASE_REPOSITORY}:{recipe.name}"


def recipe_hash(recipe: Recipe | None = None) -> str:
    """sha256 of everything that decides the image's content, stored in its RECIPE_LABEL.

    Every file of the recipe folder, the rootfs recipe of a Debian base, and the hash of a base
    recipe (so an image is rebuilt when the image it starts FROM changes). Default: the training recipe.
    """
    return _recipe_hash(recipe or load_recipe(DEFAULT_VARIANT), depth=0)


def build_once(client: docker.DockerClient, tag: str, want: str, *, up_to_date: Callable[[], bool], rebuild: bool,
               cache: Path, steps: StepReporter, log_name: str, building: str,
               body: Callable[[LogFile], tuple[str, ...] | None],
               prepare: Callable[[], None] | None = None) -> BuildReport:
    """The frame of every image build (a recipe's, a framework's, a Hugging Face layer's): nothing to do
    when `up_to_date()` (unless `rebuild`); else one build at a time on this machine, the check made
    again after waiting for another (parallel test workers, two terminals, two runs race on the cache
    and the tags); a log file under <cache>/logs, said first with `building` (what, from what);
    `body(log)` runs the steps and gives their lines (None: it found nothing to build after all);
    `prepare()`, when given, first builds what the image stands on, outside the lock (which that build
    takes itself: flock from a second descriptor of this process would wait for ever). An
    ImageBuildError names the log; the report has the time and the image's size."""
    started = time.monotonic()
    if not rebuild and up_to_date():
        steps.info(f"image {tag} is up to date (recipe {want[:12]}); nothing to build")
        return BuildReport(tag, False, time.monotonic() - started, image_size(client, tag), ())
    if prepare is not None:
        prepare()
    _mkdir(cache)
    with _build_lock(cache / "build.lock", steps) as waited:
        if waited is not None and not rebuild and up_to_date():
            steps.info(f"waited {waited:.0f} s for another build of {tag} to finish")
            return BuildReport(tag, False, time.monotonic() - started, image_size(client, tag), (), waited)
        if waited is not None:
            steps.info(f"waited {waited:.0f} s for another image build to finish")
        try:
            log = new_log(cache / "logs", log_name)
        except OSError as exc:
            raise ImageBuildError(f"cannot create the build log under {cache / 'logs'}: {exc.strerror}",
                                  hint="set XDG_CACHE_HOME to a writable directory") from exc
        steps.info(f"building {building}; the tools' output goes to {log.path}")
        try:
            done = body(log)
        except ImageBuildError as err:
            raise ImageBuildError(f"{err.message} (the build's whole output: {log.path})", hint=err.hint) from err
        finally:
            log.close()
    size = image_size(client, tag)
    seconds = time.monotonic() - started
    if done is None:
        return BuildReport(tag, False, seconds, size, (), waited)
    steps.info(f"image {tag} built in {seconds:.1f} s ({size / 1e6:.0f} MB)")
    return BuildReport(tag, True, seconds, size, done, waited)


def build_image(
    client: docker.DockerClient,
    recipe: Recipe,
    *,
    rebuild: bool = False,
    progress: StepReporter | Progress = print,
    cache_dir: Path | None = None,
    verbose: bool = False,
) -> BuildReport:
    """Build the recipe's image offline, or do nothing when it is already up to date.

    Idempotent: an image with the tag and the current recipe label is kept (built=False) unless
    `rebuild`, which also ignores the cached rootfs tarball and wheels of this recipe (an image it
    is based on is built only when out of date). Each step is reported to `progress` (a
    `StepReporter`, or a function that prints a line) as one line; the tools' output goes to a log
    file under <cache>/logs/ whose path is reported first (with `verbose`, also to `progress`).
    Raises ImageBuildError, naming the log file.
    """
    steps = as_step_reporter(progress, verbose)
    cache = (cache_dir or default_cache_dir()).expanduser()
    want = recipe_hash(recipe)
    return build_once(client, recipe.tag, want, up_to_date=lambda: _up_to_date(client, recipe, want),
                      rebuild=rebuild, cache=cache, steps=steps, log_name=f"build-{recipe.name}",
                      building=f"{recipe.tag} from {recipe.folder}",
                      body=lambda log: _build_locked(client, recipe, cache, rebuild=rebuild, steps=steps, log=log))


def build_default_image(
    client: docker.DockerClient,
    *,
    rebuild: bool = False,
    progress: StepReporter | Progress = print,
    cache_dir: Path | None = None,
    verbose: bool = False,
) -> BuildReport:
    """Build the default training image (DEFAULT_IMAGE, images/training/): `build_image` of that recipe."""
    recipe = load_recipe(DEFAULT_VARIANT)
    return build_image(client, recipe, rebuild=rebuild, progress=progress, cache_dir=cache_dir, verbose=verbose)


def _build_locked(
    client: docker.DockerClient, recipe: Recipe, cache: Path, *, rebuild: bool, steps: StepReporter, log: LogFile,
) -> tuple[str, ...] | None:
    """The recipe's steps (its base image's first, when out of date); None when the image is found up to
    date (a base built under the lock can make it so)."""
    want = recipe_hash(recipe)
    if recipe.base_recipe is not None:
        # The image this one starts FROM comes first (and only when out of date, even on --rebuild:
        # rebuilding a variant should not redo the default image under it).
        base = load_recipe(recipe.base_recipe)
        built = not _up_to_date(client, base, recipe_hash(base))
        if built:  # its own steps, under its own name
            _build_locked(client, base, cache, rebuild=False, steps=steps, log=log)
        base_step = f"base: {base.tag} " + ("built" if built else "up to date")
        _skip(steps, recipe, 1, f"base: image {base.tag} of recipe {base.name} "
              + ("built" if built else "is up to date"))
        _skip(steps, recipe, 2, f"import: nothing to do (based on {base.tag})")
    if not rebuild and _up_to_date(client, recipe, want):
        steps.info(f"image {recipe.tag} is up to date (recipe {want[:12]}); nothing to build")
        return None
    if recipe.base_recipe is None:
        base_step = _step_base(client, recipe, cache, rebuild=rebuild, steps=steps, log=log)
    old_image = image_id(client, recipe.tag)
    done = (
        base_step,
        _step_wheels(recipe, cache, rebuild=rebuild, steps=steps, log=log),
        _step_build(client, recipe, _wheels_dir(recipe, cache), want, rebuild, steps, log),
    )
    remove_quietly(client, old_image, keep=image_id(client, recipe.tag))
    return done


def _skip(steps: StepReporter, recipe: Recipe, number: int, text: str) -> None:
    """A step with nothing to do (cached, up to date): one line, no time."""
    steps.info(f"✓ {_title(recipe, number, text)}")


def _title(recipe: Recipe, number: int, text: str) -> str:
    return f"[{recipe.name} {number}/{_STEPS}] {text}"


# --------------------------------------------------------------------------------------------
# host apt sources -> Debian mirrors (pure functions; the mirror is never written into the repo)


def parse_apt_sources(files: Mapping[str, str]) -> list[AptSource]:
    """Every enabled `deb` entry in apt source files, keyed by file name (`.list` or `.sources`)."""
    found: list[AptSource] = []
    for name, text in files.items():
        found += _parse_deb822(text) if name.endswith(".sources") else _parse_one_line(text)
    return found


def debian_mirrors(sources: Sequence[AptSource], suite: str = SUITE) -> list[AptSource]:
    """The entries mmdebstrap should use for `suite`, chosen from the host's apt sources.

    A bookworm host's own entries are used as they are (main, updates, security; not backports).
    Any other Debian host lends its archive URIs, with the suite names swapped for `suite`'s.
    """
    wanted = {suite, f"{suite}-updates", f"{suite}-security"}
    same = [s for s in sources if s.suite in wanted]
    if any(s.suite == suite for s in same):
        return _dedupe(same)
    picked: list[AptSource] = []
    for source in sources:
        last = urlsplit(source.uri).path.rstrip("/").rsplit("/", 1)[-1]
        if last == "debian" and not source.suite.endswith(("-backports", "-security")):
            updates = source.suite.endswith("-updates")
            picked.append(AptSource(source.uri, f"{suite}-updates" if updates else suite, ("main",)))
        elif last == "debian-security":
            picked.append(AptSource(source.uri, f"{suite}-security", ("main",)))
    if any(s.suite == suite for s in picked):
        return _dedupe(picked)
    return []


def host_debian_mirrors(
    environ: Mapping[str, str] | None = None, apt_dir: Path = Path("/etc/apt"), suite: str = SUITE
) -> list[AptSource]:
    """The Debian mirrors for the rootfs: $HETERO_EMU_DEBIAN_MIRROR, else the host's apt sources."""
    env = os.environ if environ is None else environ
    if env.get(MIRROR_ENV):
        chosen = [AptSource(env[MIRROR_ENV], suite, ("main",))]
        if env.get(SECURITY_MIRROR_ENV):
            chosen.append(AptSource(env[SECURITY_MIRROR_ENV], f"{suite}-security", ("main",)))
        return chosen
    files: dict[str, str] = {}
    paths = [apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*.list"))]
    paths += sorted((apt_dir / "sources.list.d").glob("*.sources"))
    for path in paths:
        with contextlib.suppress(OSError):
            files[path.name] = path.read_text(encoding="utf-8", errors="replace")
    chosen = debian_mirrors(parse_apt_sources(files), suite)
    if not chosen:
        raise ImageBuildError(
            f"no Debian archive found in the apt sources under {apt_dir}",
            hint=f"set {MIRROR_ENV} to the URL of a Debian mirror this machine can reach "
            f"(optionally {SECURITY_MIRROR_ENV} for security updates)",
        )
    return chosen


def _parse_one_line(text: str) -> list[AptSource]:
    found: list[AptSource] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        # Options such as [signed-by=...] are dropped: mmdebstrap supplies the archive keys.
        line = re.sub(r"\[[^\]]*\]", " ", line)
        fields = line.split()
        if len(fields) >= 3 and fields[0] == "deb" and not fields[1].startswith("cdrom:"):
            found.append(AptSource(fields[1], fields[2], tuple(fields[3:]) or ("main",)))
    return found


def _parse_deb822(text: str) -> list[AptSource]:
    found: list[AptSource] = []
    for stanza in re.split(r"\n[ \t]*\n", text):
        fields: dict[str, str] = {}
        key = ""
        for raw in stanza.splitlines():
            if raw.startswith("#") or not raw.strip():
                continue
            if raw[0] in " \t" and key:  # a continuation line of a multi-line field
                fields[key] += " " + raw.strip()
            elif ":" in raw:
                key, value = raw.split(":", 1)
                key = key.strip().lower()
                fields[key] = value.strip()
        if "deb" not in fields.get("types", "").split():
            continue
        if fields.get("enabled", "yes").lower() == "no":
            continue
        components = tuple(fields.get("components", "main").split())
        for uri in fields.get("uris", "").split():
            if uri.startswith("cdrom:"):
                continue
            for suite in fields.get("suites", "").split():
                found.append(AptSource(uri, suite, components))
    return found


def _dedupe(sources: Iterable[AptSource]) -> list[AptSource]:
    return list(dict.fromkeys(sources))


# --------------------------------------------------------------------------------------------
# step 1+2: base rootfs and its import


def _step_base(client: docker.DockerClient, recipe: Recipe, cache: Path, *, rebuild: bool, steps: StepReporter,
               log: LogFile) -> str:
    key = _rootfs_key(recipe)
    base = base_image(recipe)
    if not rebuild and image_labels(client, base).get(ROOTFS_LABEL) == key:
        _skip(steps, recipe, 1, f"base rootfs: image {base} is up to date")
        _skip(steps, recipe, 2, "import: nothing to do")
        return f"base: {base} up to date"
    tarball = cache / "rootfs" / f"{recipe.debian}-{key[:16]}.tar"
    if tarball.is_file() and not rebuild:
        _skip(steps, recipe, 1, f"base rootfs: cached {tarball}")
        rootfs_note = "rootfs cached"
    else:
        _make_rootfs(recipe, tarball, steps, log)
        rootfs_note = "rootfs built"
    old_base = image_id(client, base)
    with steps.task(_title(recipe, 2, f"import: docker import {tarball.name} as {base}"), log=log):
        _import_rootfs(client, tarball, key, base)
    remove_quietly(client, old_base, keep=image_id(client, base))
    return f"base: {rootfs_note}, imported as {base}"


def _make_rootfs(recipe: Recipe, tarball: Path, steps: StepReporter, log: LogFile) -> None:
    suite = str(recipe.debian)
    mirrors = host_debian_mirrors(suite=suite)
    tool = _rootfs_tool()
    used = mirrors if tool == "mmdebstrap" else [m for m in mirrors if m.suite == suite]
    where = ", ".join(f"{m.uri} {m.suite}" for m in used)
    title = _title(recipe, 1, f"base rootfs: Debian {suite} minbase + {len(recipe.packages)} packages ({tool})")
    with steps.task(title, log=log) as task:
        task.log(f"{tool} from {where}")
        _make_rootfs_with(recipe, tarball, tool, mirrors, task)


def _make_rootfs_with(recipe: Recipe, tarball: Path, tool: str, mirrors: Sequence[AptSource], task: Task) -> None:
    suite = str(recipe.debian)
    _mkdir(tarball.parent)
    partial = tarball.with_name(tarball.name + ".part")
    hint = (
        f"{tool} needs root (or, for mmdebstrap, unprivileged user namespaces) and the Debian "
        "mirror from the host's apt sources; see its output above"
    )
    try:
        if tool == "mmdebstrap":
            cmd = [
                "mmdebstrap",
                "--variant=minbase",
                "--format=tar",
                f"--include={','.join(recipe.packages)}",
                *([f"--hook-dir={MERGED_USR_HOOK}"] if MERGED_USR_HOOK.is_dir() and suite not in NO_MERGED_USR_HOOK
                  else []),
                *(f"--aptopt={opt}" for opt in APT_OPTIONS),
                *(f"--dpkgopt={opt}" for opt in DPKG_OPTIONS),
                *(f'--customize-hook=rm -f "$1"/{pattern}' for pattern in ROOTFS_REMOVE),
                suite,
                str(partial),
                *(m.line() for m in mirrors),
            ]
            _run_tool(cmd, what="mmdebstrap", hint=hint, task=task)
        else:
            _debootstrap(recipe, partial, mirrors, hint, task)
        partial.replace(tarball)
    finally:
        partial.unlink(missing_ok=True)


def _rootfs_tool() -> str:
    for tool in ("mmdebstrap", "debootstrap"):
        if shutil.which(tool):
            return tool
    raise ImageBuildError(
        "neither mmdebstrap nor debootstrap is installed: cannot make the Debian base rootfs",
        hint="apt-get install mmdebstrap (or debootstrap), then run `hetero-emu image build` again",
    )


def _debootstrap(recipe: Recipe, partial: Path, mirrors: Sequence[AptSource], hint: str, task: Task) -> None:
    # debootstrap takes a single mirror: the main archive. Security updates are not applied in this
    # fallback; mmdebstrap is preferred because it takes the host's full list.
    suite = str(recipe.debian)
    main = next(m for m in mirrors if m.suite == suite)
    with tempfile.TemporaryDirectory(dir=partial.parent, prefix="debootstrap-") as tmp:
        root = Path(tmp) / "root"
        cmd = [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(recipe.packages)}",
            f"--components={','.join(main.components)}",
            suite,
            str(root),
            main.uri,
        ]
        _run_tool(cmd, what="debootstrap", hint=hint, task=task)
        (root / "etc/apt/sources.list").write_text("".join(m.line() + "\n" for m in mirrors))
        conf = root / "etc/apt/apt.conf.d/99hetero-emu"
        conf.write_text("".join(opt + ";\n" for opt in APT_OPTIONS))
        for leftover in ("var/lib/apt/lists/*", "var/cache/apt/archives/*", *ROOTFS_REMOVE):
            for path in root.glob(leftover):
                if path.is_file():
                    path.unlink()
        _run_tool(
            ["tar", "--numeric-owner", "-C", str(root), "-cf", str(partial), "."],
            what="tar of the debootstrap rootfs",
            hint=hint,
            task=task,
        )


def _import_rootfs(client: docker.DockerClient, tarball: Path, key: str, base: str) -> None:
    repository, tag = base.rsplit(":", 1)
    # An imported rootfs has no config at all; give it the PATH and shell every image expects.
    changes = [
        f"LABEL {ROOTFS_LABEL}={key}",
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        'CMD ["/bin/bash"]',
    ]

    try:
        answer = client.api.import_image_from_file(str(tarball), repository=repository, tag=tag, changes=changes)
    except docker.errors.DockerException as exc:
        raise ImageBuildError(
            f"docker import of {tarball} failed: {_one_line(exc)}",
            hint=f"delete {tarball} and run `hetero-emu image build --rebuild`",
        ) from exc
    text = answer if isinstance(answer, str) else json.dumps(answer)
    if '"error"' in text or not image_present(client, base):
        raise ImageBuildError(
            f"docker import of {tarball} failed: {text[-500:]}",
            hint=f"delete {tarball} and run `hetero-emu image build --rebuild`",
        )


# --------------------------------------------------------------------------------------------
# step 3: wheels


def _wheels_dir(recipe: Recipe, cache: Path) -> Path | None:
    return None if recipe.requirements is None else cache / "wheels" / _wheels_key(recipe)


def _step_wheels(recipe: Recipe, cache: Path, *, rebuild: bool, steps: StepReporter, log: LogFile) -> str:
    target = _wheels_dir(recipe, cache)
    if target is None:
        _skip(steps, recipe, 3, "wheels: none (the recipe names no requirements)")
        return "wheels: none"
    done = target / ".complete"
    if done.is_file() and not rebuild:
        _skip(steps, recipe, 3, f"wheels: cached {target}")
        return "wheels: cached"
    if sys.version_info[:2] != (3, 11) or sys.implementation.name != "cpython":
        raise ImageBuildError(
            f"the host Python is {sys.implementation.name} {sys.version.split()[0]}, "
            "but the image's (Debian bookworm) is CPython 3.11: its wheels would not install",
            hint="run hetero-emu with a CPython 3.11 interpreter",
        )
    python = Path(sys.executable).name
    pins = _requirement_count(_recipe_file(recipe, str(recipe.requirements)))
    title = _title(recipe, 3, f"wheels: {python} -m pip wheel -r {recipe.requirements} ({pins} requirements)")
    with steps.task(title, log=log) as task:
        _pip_wheel(recipe, target, task)
    count = len(list(target.glob("*.whl")))
    return f"wheels: built {count}"


def _requirement_count(text: bytes) -> int:
    """The requirement lines of a requirements file (not comments, blank lines or pip options)."""
    lines = (line.split(b"#", 1)[0].strip() for line in text.splitlines())
    return sum(1 for line in lines if line and not line.startswith(b"-"))


def _pip_wheel(recipe: Recipe, target: Path, task: Task) -> None:
    done = target / ".complete"
    _mkdir(target.parent)
    partial = Path(tempfile.mkdtemp(dir=target.parent, prefix=target.name + ".part-"))
    try:
        requirements = partial / "requirements.txt"
        requirements.write_bytes(_recipe_file(recipe, str(recipe.requirements)))
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--disable-pip-version-check",
            "--progress-bar",
            "off",
            "--wheel-dir",
            str(partial / "wheels"),
            *recipe.pip_wheel_args,
            "--requirement",
            str(requirements),
        ]
        _run_tool(
            cmd,
            what="pip wheel",
            hint="the host needs PyPI (or a pip index) plus gcc and the Python 3.11 headers to "
            "build sagemaker-training (apt-get install gcc python3-dev)",
            task=task,
        )
        shutil.rmtree(target, ignore_errors=True)
        (partial / "wheels").replace(target)
        done.write_text(f"{time.time()}\n")
    finally:
        shutil.rmtree(partial, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# step 4: docker build


def _step_build(
    client: docker.DockerClient, recipe: Recipe, wheels: Path | None, want: str, rebuild: bool, steps: StepReporter,
    log: LogFile,
) -> str:
    base = base_image(recipe)
    with steps.task(_title(recipe, 4, f"docker build {recipe.tag} FROM {base}"), log=log) as task:
        _docker_build(client, recipe, wheels, want, rebuild, task)
    return f"build: {recipe.tag}"


def _docker_build(
    client: docker.DockerClient, recipe: Recipe, wheels: Path | None, want: str, rebuild: bool, task: Task
) -> None:
    base = base_image(recipe)
    labels = {
        RECIPE_LABEL: want,
        VARIANT_LABEL: recipe.name,
        LAUNCHERS_LABEL: launchers_label(all_launchers(recipe)),
    }
    error: str | None = None
    with tempfile.TemporaryFile() as context:
        _write_context(context, recipe, wheels)
        context.seek(0)
        try:
            stream = client.api.build(
                fileobj=context,
                custom_context=True,
                tag=recipe.tag,
                buildargs={"BASE_IMAGE": base},
                labels=labels,
                pull=False,  # the base exists only here; no registry may be contacted
                nocache=rebuild,
                rm=True,
                forcerm=True,
                decode=True,
                timeout=None,  # a streamed build is legitimately silent for a while
            )
            for chunk in stream:
                text = chunk.get("stream") or chunk.get("status") or ""
                for line in str(text).splitlines():
                    if line.strip():
                        task.log(line)
                        if match := _DOCKERFILE_STEP.match(line):
                            task.update(int(match[1]) - 1, int(match[2]))
                if "error" in chunk:
                    error = str(chunk.get("error", "")).strip()
                    task.log(f"error: {error}")
        except docker.errors.DockerException as exc:
            error = _one_line(exc)
            task.log(f"error: {error}")
    _prune_leftovers(client)
    if error is not None or image_labels(client, recipe.tag).get(RECIPE_LABEL) != want:
        raise ImageBuildError(
            f"docker build of {recipe.tag} failed: {error or 'no image with the new label'}",
            hint=f"fix the cause above, then run `hetero-emu image build --variant {recipe.name} --rebuild`",
        )
    if task.total is not None:
        task.update(task.total)


def _write_context(fileobj: Any, recipe: Recipe, wheels: Path | None) -> None:
    # The context is the recipe folder (the Dockerfile COPYs what it needs from it) plus wheels/,
    # always present so a Dockerfile can COPY it even when the recipe has no requirements.
    with tarfile.open(fileobj=fileobj, mode="w") as tar:
        for path in recipe.files():
            name = path.relative_to(recipe.folder).as_posix()
            data = _recipe_file(recipe, name)
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
        folder = tarfile.TarInfo("wheels")
        folder.type = tarfile.DIRTYPE
        folder.mode = 0o755
        tar.addfile(folder)
        for wheel in sorted(wheels.glob("*.whl")) if wheels is not None else ():
            tar.add(wheel, arcname=f"wheels/{wheel.name}")


def _prune_leftovers(client: docker.DockerClient) -> None:
    # The first stage's image holds the wheels and a second copy of the venv and nothing refers to
    # it; the classic builder leaves it dangling. Older default and base images whose tag moved on
    # (a rebuild while a container still used them) are dangling too. The engine's prune skips
    # images a container still uses; each call ANDs its labels, hence one call per label.
    # Housekeeping, never a reason to fail a build that succeeded: a prune that deletes a
    # gigabyte layer on a loaded machine can outlast the client's timeout (seen: a ReadTimeout
    # after "Successfully tagged" under load 6.7), so it waits for the engine, and a lost
    # connection is ignored.
    for label in (f"{STAGE_LABEL}=venv", RECIPE_LABEL, ROOTFS_LABEL):
        with read_timeout(client.api, None), contextlib.suppress(docker.errors.DockerException,
                                                     requests.exceptions.RequestException):
            client.images.prune(filters={"dangling": True, "label": label})


# --------------------------------------------------------------------------------------------
# helpers


def _recipe_file(recipe: Recipe, name: str) -> bytes:
    path = recipe.folder / name
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ImageBuildError(
            f"image recipe file {path} is missing: {exc.strerror}",
            hint="reinstall hetero-emu; images/ is part of the package",
        ) from exc


def _recipe_hash(recipe: Recipe, depth: int) -> str:
    if depth > CHAIN_LIMIT:
        raise chain_error(recipe)
    digest = hashlib.sha256()
    for path in recipe.files():
        name = path.relative_to(recipe.folder).as_posix()
        digest.update(name.encode() + b"\0" + _recipe_file(recipe, name) + b"\0")
    if recipe.base_recipe is not None:
        digest.update(b"base\0" + _recipe_hash(load_recipe(recipe.base_recipe), depth + 1).encode())
    else:
        digest.update(_rootfs_recipe(recipe).encode())
    return digest.hexdigest()


def _rootfs_recipe(recipe: Recipe) -> str:
    return json.dumps(
        {
            "suite": recipe.debian,
            "variant": "minbase",
            "packages": recipe.packages,
            "dpkg": DPKG_OPTIONS,
            "apt": APT_OPTIONS,
            "remove": ROOTFS_REMOVE,
            "usr": "as the suite makes it" if recipe.debian in NO_MERGED_USR_HOOK else "merged by hook",
        },
        sort_keys=True,
    )


def _rootfs_key(recipe: Recipe) -> str:
    return hashlib.sha256(_rootfs_recipe(recipe).encode()).hexdigest()


def _wheels_key(recipe: Recipe) -> str:
    # The wheels depend on the pins, pip's options and the host interpreter's ABI, nothing else.
    digest = hashlib.sha256(_recipe_file(recipe, str(recipe.requirements)))
    digest.update(f"{sys.implementation.cache_tag}-{sys.platform}".encode())
    if recipe.pip_wheel_args:
        digest.update(json.dumps(recipe.pip_wheel_args).encode())
    return f"py{sys.version_info[0]}{sys.version_info[1]}-{digest.hexdigest()[:16]}"


def _up_to_date(client: docker.DockerClient, recipe: Recipe, want: str) -> bool:
    return image_labels(client, recipe.tag).get(RECIPE_LABEL) == want


def image_labels(client: docker.DockerClient, tag: str) -> dict[str, str]:
    try:
        image = client.images.get(tag)
    except docker.errors.ImageNotFound:
        return {}
    except docker.errors.DockerException as exc:
        raise ImageBuildError(
            f"cannot inspect image {tag}: {_one_line(exc)}", hint="is the Docker engine running?"
        ) from exc
    return dict(image.labels or {})


def image_id(client: docker.DockerClient, tag: str) -> str | None:
    try:
        return str(client.images.get(tag).id)
    except docker.errors.DockerException:
        return None


def image_size(client: docker.DockerClient, tag: str) -> int:
    try:
        return int(client.images.get(tag).attrs.get("Size", 0))
    except docker.errors.DockerException:
        return 0


def remove_quietly(client: docker.DockerClient, image_id: str | None, keep: str | None) -> None:
    # A rebuild moves the tag; the old image would linger untagged. It stays if a container or a
    # child image still uses it (removal fails), which is the engine's call to make.
    if image_id and image_id != keep:
        with read_timeout(client.api, None), contextlib.suppress(docker.errors.DockerException,
                                                     requests.exceptions.RequestException):
            client.images.remove(image_id, noprune=False)



def _mkdir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ImageBuildError(
            f"cannot create cache directory {path}: {exc.strerror}",
            hint="set XDG_CACHE_HOME to a writable directory",
        ) from exc


@contextlib.contextmanager
def _build_lock(path: Path, steps: StepReporter) -> Iterator[float | None]:
    """Hold the build lock; yields how many seconds another build held it first (None: it was free)."""
    if sys.platform == "win32":  # no flock; the builder needs a Linux host anyway
        yield None
        return
    import fcntl

    with open(path, "a") as handle:
        waited: float | None = None
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            with steps.task(f"waiting for another image build to finish (lock {path})") as task:
                task.show_success = False  # the caller says what the wait came to
                fcntl.flock(handle, fcntl.LOCK_EX)
            waited = task.seconds
        try:
            yield waited
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run_tool(cmd: Sequence[str], *, what: str, hint: str, task: Task) -> None:
    """Run a build tool, its output lines into the step's log; ImageBuildError when it fails (the
    step shows the output's last lines)."""
    try:
        proc = subprocess.Popen(
            list(cmd),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            bufsize=1,
        )
    except OSError as exc:
        raise ImageBuildError(f"{what}: cannot run {cmd[0]}: {exc.strerror}", hint=hint) from exc
    assert proc.stdout is not None
    task.log("$ " + " ".join(cmd))
    try:
        for line in proc.stdout:
            line = line.rstrip()
            if line:
                task.log(line)
        code = proc.wait()
    except BaseException:
        # Ctrl-C or a failing log: do not leave the tool running behind us.
        proc.kill()
        proc.wait()
        raise
    finally:
        proc.stdout.close()
    if code != 0:
        raise ImageBuildError(f"{what} failed with exit code {code}", hint=hint)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] or type(exc).__name__
