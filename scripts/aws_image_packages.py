#!/usr/bin/env python3
"""What AWS's training image of each framework version carries for scripts, chosen for our stand-in.

AWS's CPU training images (aws/deep-learning-containers, ``{pytorch,tensorflow}/training/docker/<X.Y>/py3/
Dockerfile.cpu`` and the ``Dockerfile.{e3,sagemaker}.cpu`` of older series) install, besides the framework
and its toolkit, packages that training scripts import: scipy, pandas, scikit-learn, opencv, Pillow, seaborn,
shap, the SageMaker SDK, smdebug, TensorFlow's tf-models-official and tensorflow-text... What each series
installs is transcribed in ``scripts/aws_dlc_installs.json`` (file paths and commits of the copies read).

This script merges each framework version's installs (the last install of a name wins, as ``pip install -U``
does), sorts out what the stand-in already has (the framework, its toolkit, numpy, protobuf: pinned by
``scripts/framework_table.py``) and what it leaves out and why (AWS-internal wheels, Studio's notebook
kernels, conda's own packages, C libraries), and lets a resolver choose versions of the rest that install
together with the image's exact pins on the Python and platform the stand-in runs: ``uv pip compile
--python-version X --python-platform x86_64-manylinux_2_NN`` (the glibc of the stand-in's Debian suite),
AWS's specifiers first. Each failure loosens one package it names (AWS's specifier goes, its cap below a
major version stays) or, nothing left to loosen, leaves it out, with the resolver's reason kept. uv answers a
version in seconds to a minute; pip's own resolver, tried first, backtracked for 15 minutes a version and
timed out on sagemaker, shap and numba.

The result goes into ``emulator/data/frameworks.json``: per version ``aws_image`` (where it came from, AWS's
specifiers, what is in the image already, what is left out and why) and ``aws_packages`` (per Python, the
pins the image's extra stage installs, with ``aws_differs``: where a pin is not what AWS's specifier asks,
and why).

Usage: ``.venv/bin/python scripts/aws_image_packages.py [--only=FRAMEWORK:VERSION ...] [--python=3.9 ...]
[--work=DIR] [--no-resolve]`` (needs uv, ``.venv/bin/pip install uv``, and the package index; no Docker;
``--no-resolve`` records AWS's lists and keeps the pins already resolved; ``--work`` keeps the resolver's
results, so that a run cut short resumes); then ``--markdown`` writes docs/aws-image-packages.md. Pure parts
are tested in tests/unit/test_aws_image_packages.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
INSTALLS = HERE / "aws_dlc_installs.json"
TABLE = HERE.parent / "emulator" / "data" / "frameworks.json"

#: What the stand-in's venv stage already installs and pins (frameworks.requirements and venv.sh): AWS's
#: specifier is recorded beside ours, nothing is installed again.
IN_IMAGE: frozenset[str] = frozenset({
    "torch", "torchvision", "torchaudio", "tensorflow", "tensorflow-cpu", "numpy", "protobuf", "mpi4py",
    "horovod", "sagemaker-training", "sagemaker-pytorch-training", "sagemaker-tensorflow-training",
    "setuptools", "pip", "wheel", "debugpy",
})

_STUDIO = ("SageMaker Studio's Spark/EMR notebook tooling (Kerberos, SASL, Jupyter kernels), not imported by "
           "training scripts; it brings Jupyter, and sasl has no wheel (it compiles against libsasl2)")
#: What a CPU stand-in leaves out, and why (canonical names).
LEFT_OUT: dict[str, str] = {
    "awsio": "AWS's S3 plugin for PyTorch: a wheel in an AWS bucket, not on PyPI (s3torchconnector is its "
             "public successor)",
    **{name: _STUDIO for name in ("sparkmagic", "sagemaker-studio-sparkmagic-lib",
                                  "sagemaker-studio-analytics-extension", "pyhive", "sasl", "thrift-sasl", "y-py")},
    "ipykernel": "a Jupyter kernel for SageMaker Studio notebooks, not imported by training scripts",
    "mkl": "Intel's MKL libraries (hundreds of MB); PyPI's torch and tensorflow wheels bring their own math "
           "libraries and never load these",
    "mkl-include": "MKL's C headers, for compiling against conda's MKL; nothing here links it",
    "conda": "conda's own package: the stand-in has a venv, no conda",
    "conda-content-trust": "conda's own package: the stand-in has a venv, no conda",
    "ruamel-yaml": "conda's own dependency (pinned for conda 4.10): the stand-in has no conda",
    "curl": "a C library from conda-forge, not a Python package (Debian's libcurl serves the image)",
    "libcurl": "a C library from conda-forge, not a Python package (Debian's libcurl serves the image)",
    "typing": "the PyPI backport of a standard-library module (Python >= 3.5); installed, it shadows the "
              "standard one",
    "cmake": "a build tool: Debian's cmake is in the image (images/framework/packages.txt)",
    "dgl": "DGL from the dglteam conda channel, built against AWS's own torch build; PyPI's dgl wheels are built "
           "for other torch releases and load only beside those",
}
#: What the stand-in installs instead, and why: name -> (the other name, same version, why).
SUBSTITUTES: dict[str, tuple[str, str]] = {
    "opencv-python": ("opencv-python-headless", "opencv-python's cv2 loads libGL.so.1, which AWS's images get from "
                      "apt (libgl1-mesa-glx) and the stand-in's rootfs has not: ours installs "
                      "opencv-python-headless, the same cv2 at the same version without the GUI"),
}
#: conda package names that are another name on PyPI.
CONDA_NAMES: dict[str, str] = {"opencv": "opencv-python", "pytorch": "torch"}

_SPEC_GLUED = re.compile(r"^([<>=!~]=?[^<>=!~,]+)([<>]=?.+)$")
_NAME = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(.*)$")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Install:
    """One install of one package in AWS's Dockerfile: `pip:Pillow>=9.0.0<9.1.0`."""

    tool: str  # pip | conda | source | url
    name: str  # canonical PyPI name
    spec: str  # PEP 440 specifier set, "" for none (commas restored where AWS's line lacks them)
    raw: str  # as AWS's Dockerfile writes it

    @property
    def requirement(self) -> str:
        return self.name + self.spec


def fix_spec(spec: str) -> str:
    """AWS writes `>=9.0.0<9.1.0` (no comma; old pip read it as one legacy specifier): `>=9.0.0,<9.1.0`."""
    parts: list[str] = []
    for part in (p.strip() for p in spec.split(",")):
        match = _SPEC_GLUED.match(part)
        parts.extend([match.group(1), match.group(2)] if match else [part] if part else [])
    return ",".join(parts)


def parse_install(entry: str) -> Install:
    """`pip:Pillow>=9.0.0<9.1.0` -> Install("pip", "pillow", ">=9.0.0,<9.1.0", ...). ValueError for a bad entry."""
    tool, sep, rest = entry.partition(":")
    match = _NAME.match(rest.strip())
    if not sep or tool not in ("pip", "conda", "source", "url") or match is None:
        raise ValueError(f"unparsed install {entry!r}: want TOOL:REQUIREMENT, TOOL one of pip, conda, source, url")
    name = canonical(match.group(1))
    if tool == "conda":
        name = CONDA_NAMES.get(name, name)
    return Install(tool, name, fix_spec(match.group(2).replace(" ", "")), rest.strip())


def merged(installs: Iterable[str]) -> dict[str, Install]:
    """The installs of a series by name, the last of a name winning (a later `pip install -U` replaces an
    earlier one); names keep the order of their first install."""
    out: dict[str, Install] = {}
    for entry in installs:
        item = parse_install(entry)
        out[item.name] = item
    return out


def series(version: str) -> str:
    """`2.9.2` -> `2.9`: AWS's Dockerfiles are per major.minor."""
    return ".".join(version.split(".")[:2])


def source_note(item: Install) -> str | None:
    """What an install that is not a plain `pip install NAME` from PyPI means for ours."""
    if item.tool == "source":
        return f"AWS builds {item.name} from its git tag; ours installs the PyPI release"
    if item.tool == "url":
        return f"AWS installs its own {item.name} wheel from a bucket or the PyTorch index; ours the PyPI release"
    if item.tool == "conda":
        return f"AWS installs {item.raw} with conda; ours the PyPI package"
    return None


def wanted_spec(framework: str, version: str, item: Install) -> str:
    """The specifier the resolver starts from: AWS's; sagemaker-tensorflow (PipeModeDataset) built from a
    git tag is looked for among the PyPI releases for this TensorFlow series (named `2.10.0.1.16.0`)."""
    if item.name == "sagemaker-tensorflow" and framework == "tensorflow" and item.tool == "source":
        major, minor = (int(p) for p in series(version).split("."))
        return f">={major}.{minor},<{major}.{minor + 1}"
    return item.spec


@dataclass(frozen=True)
class Plan:
    """What one framework version's stand-in does with AWS's installs (pure)."""

    aws: dict[str, str]  # name -> AWS's requirement as written
    in_image: dict[str, str]  # name -> AWS's requirement, for what the venv stage has
    left_out: dict[str, str]  # name -> why
    wanted: dict[str, str]  # name -> the specifier the resolver starts from
    notes: dict[str, str]  # name -> how AWS installs it, when not from PyPI with pip


def plan(framework: str, version: str, installs: Iterable[str]) -> Plan:
    items = merged(installs)
    aws = {name: item.raw for name, item in items.items()}
    in_image = {name: item.raw for name, item in items.items() if name in IN_IMAGE}
    left_out = {name: LEFT_OUT[name] for name in items if name in LEFT_OUT}
    wanted = {SUBSTITUTES.get(name, (name, ""))[0]: wanted_spec(framework, version, item)
              for name, item in items.items() if name not in IN_IMAGE and name not in LEFT_OUT}
    notes = {name: note for name, item in items.items() if (note := source_note(item)) is not None}
    notes.update({name: SUBSTITUTES[name][1] for name in items if name in SUBSTITUTES})
    return Plan(aws, in_image, left_out, wanted, notes)


# --------------------------------------------------------------------------------------------------
# The resolver's answers (pure: parsing its output, choosing the next step)
# --------------------------------------------------------------------------------------------------

_UV_CAUSE = re.compile(r"(?:×|error:|cause:|hint:)\s*", re.MULTILINE)


def culprits(output: str, wanted: Iterable[str]) -> list[str]:
    """The wanted packages uv's failure names (canonical), in the order it first names them: what has no
    release that fits, what a conflict runs through, what failed to build."""
    text = output.lower()
    found: list[tuple[int, str]] = []
    for name in wanted:
        match = re.search(r"(?<![\w.-])" + re.escape(name) + r"(?![\w-])", text)
        if match is not None:
            found.append((match.start(), name))
    return [name for _, name in sorted(found)]


def failure_line(output: str) -> str:
    """uv's failure in one line a person can read (its `cause:` sentences, joined), at most 400 characters."""
    text = output.split("No solution found when resolving dependencies", 1)[-1]
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("warning:")]
    reason = " ".join(_UV_CAUSE.sub("", line) for line in lines).strip(" :") or "the resolver failed"
    return reason if len(reason) <= 400 else reason[:399] + "…"


_MAJOR_CAP = re.compile(r"^<\d+$")


def relaxed_spec(spec: str) -> str:
    """What is left of AWS's specifier when it cannot hold: its caps below a major version (`<3` of
    `sagemaker>=2,<3`: SDK v3 is another API), nothing else (`numba<0.54` goes)."""
    return ",".join(part for part in spec.split(",") if _MAJOR_CAP.match(part.strip()))


@dataclass(frozen=True)
class Resolution:
    """The resolver's outcome for one (version, Python): pins of what installs, specifiers dropped, packages
    left out, each with the resolver's reason."""

    pins: dict[str, str]
    relaxed: dict[str, str]
    dropped: dict[str, str]


def next_step(wanted: dict[str, str], output: str) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """After a failed resolution: (wanted, {name: why relaxed}, {name: why left out}). The first package the
    failure names whose AWS specifier can loosen (`relaxed_spec`) loosens; none: the last one it names is
    left out (the image's own pins never move); none named (a failure beside every package): the last
    wanted one, so that the loop ends."""
    names = culprits(output, wanted)
    reason = failure_line(output)
    relax = next((n for n in names if wanted[n] and relaxed_spec(wanted[n]) != wanted[n]), None)
    if relax is not None:
        return {**wanted, relax: relaxed_spec(wanted[relax])}, {relax: reason}, {}
    drop = (names or list(wanted))[-1:]
    return {n: s for n, s in wanted.items() if n not in drop}, {}, dict.fromkeys(drop, reason)


#: Compiles requirement lines for one Python: (exit code, the resolver's messages, {name: version} chosen).
Compile = Callable[[Sequence[str]], tuple[int, str, dict[str, str]]]


def runtime_floors(pinned: Sequence[str]) -> dict[str, str]:
    """Lower bounds the packages' metadata does not state but their import needs, given the image's pins.
    numba before 0.56 declares no numpy cap, yet supports numpy up to 1.20 only: beside the image's newer
    numpy (1.26 on our PyTorch 1.x images, where AWS's had 1.2x) `import numba` fails with "SystemError:
    initialization of _internal failed" (found by tests/integration/test_aws_image_packages_in_images.py).
    From 0.56 on numba states its numpy range, so the resolver then picks one that fits."""
    numpy = next((p.split("==", 1)[1] for p in pinned if canonical(p.split("==")[0]) == "numpy"), None)
    if numpy is not None and tuple(int(x) for x in re.findall(r"\d+", numpy)[:2]) > (1, 20):
        return {"numba": ">=0.56"}
    return {}


#: Packages taken from wheels only from the start, and why. uv reads an old release's metadata without
#: building it, so it may choose a source-only release that then fails to build in the image, where the
#: resolver never sees it fail (the `--only-binary` step of `resolve` catches only builds uv itself tries).
WHEELS_ONLY: dict[str, str] = {
    "scipy": "scipy's releases before 1.9 build from source with numpy.distutils, which fails beside the image's "
             "numpy 1.26 and setuptools 75 (ModuleNotFoundError: No module named 'distutils.msvccompiler'): "
             "AWS's scipy==1.2.2 of PyTorch 1.8 has no wheel for Python 3.9, and its image did not build",
}

_BUILD_FAILED = re.compile(r"Failed to build `([A-Za-z0-9][A-Za-z0-9._-]*)==")


def resolve(pinned: Sequence[str], wanted: Mapping[str, str], compile_: Compile) -> Resolution:
    """All of `wanted` resolved together beside the image's exact pins, AWS's specifiers first; each failure
    loosens or leaves out one package it names (`next_step`) until a set resolves. A source package that
    fails to build (an old release the resolver backtracked to) is not a verdict: that package is then taken
    from wheels only (`--only-binary`), and the resolver says what really conflicts. `WHEELS_ONLY` are taken
    from wheels from the first step."""
    todo, relaxed, dropped = dict(wanted), {}, {}
    wheels_only: list[str] = [name for name in WHEELS_ONLY if name in wanted]
    floors = runtime_floors(pinned)
    for _ in range(3 * len(wanted) + 1):  # each step loosens, leaves out or holds to wheels one: this ends
        options = [f"--only-binary {name}" for name in wheels_only]
        held = [n + f for n, f in floors.items() if n in todo]
        code, output, chosen = compile_(options + list(pinned) + [n + s for n, s in todo.items()] + held)
        if code == 0:
            return Resolution({n: chosen[n] for n in todo if n in chosen}, relaxed, dropped)
        built = _BUILD_FAILED.search(output)
        if built is not None and canonical(built[1]) not in wheels_only:
            wheels_only.append(canonical(built[1]))
            print(f"  {canonical(built[1])}: wheels only ({failure_line(output)[:120]})", flush=True)
            continue
        todo, more_relaxed, more_dropped = next_step(todo, output)
        print(f"  {' '.join(f'{n}: relaxed' for n in more_relaxed)}{' '.join(f'{n}: left out' for n in more_dropped)}"
              f" ({failure_line(output)[:160]})", flush=True)
        relaxed.update(more_relaxed)
        dropped.update(more_dropped)
    return Resolution({}, relaxed, {**dropped, **dict.fromkeys(todo, "no set resolves together")})



# --------------------------------------------------------------------------------------------------
# On the host
# --------------------------------------------------------------------------------------------------


def image_pins(table: Mapping[str, Any], framework: str, version: str, python: str) -> list[str]:
    """The venv stage's pins (as emulator.training_images.frameworks.requirements gives them)."""
    entry = table[framework][version]
    pins = [f"{n}=={v}" for n, v in sorted(entry["packages"].items())]
    pins += [f"{n}=={v}" for n, v in sorted(table["toolkits"][framework][python].items())]
    pins += [f"{n}=={v}" for n, v in sorted(entry.get("python_packages", {}).get(python, {}).items())]
    return pins


def differs(wanted: Mapping[str, str], res: Resolution) -> dict[str, str]:
    """Where a pin is not what AWS's specifier asks, and why (the resolver's reason)."""
    sys.path.insert(0, str(HERE))
    from framework_table import parse_specifiers, satisfies  # noqa: PLC0415 (host only; stdlib)

    out: dict[str, str] = {}
    for name, pin in res.pins.items():
        spec = wanted.get(name, "")
        try:
            ok = not spec or satisfies(pin, parse_specifiers(spec))
        except ValueError:
            ok = False
        if not ok:
            out[name] = f"AWS: {name}{spec}; ours {pin}: " + res.relaxed.get(name, "the resolver chose it")
    return out


def runnable_pythons(table: Mapping[str, Any], framework: str, version: str) -> list[str]:
    return [p for p in table[framework][version].get("python_packages", {})]


#: The platform each Python's stand-in runs on: its Debian suite's glibc (bullseye 2.31, bookworm 2.36, trixie
#: 2.41, of which uv knows up to 2.40), so that only wheels that load there are chosen.
PLATFORMS = {"3.9": "x86_64-manylinux_2_31", "3.11": "x86_64-manylinux_2_36", "3.13": "x86_64-manylinux_2_40"}
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", re.MULTILINE)


def uv_binary() -> str:
    """uv's executable: the `uv` package's, else one on PATH."""
    try:
        import uv  # noqa: PLC0415

        return str(uv.find_uv_bin())
    except ImportError:
        found = shutil.which("uv")
        if found is None:
            raise SystemExit("this script resolves with uv: `.venv/bin/pip install uv` first") from None
        return found


def uv_compile(python: str, scratch: Path) -> Compile:
    """A `Compile` for `python`'s stand-in: `uv pip compile` for that Python and platform. uv's resolver
    answers in seconds where pip's backtracked for minutes, and keeps its cache (~/.cache/uv) between runs."""
    uv = uv_binary()
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}

    def compile_(lines: Sequence[str]) -> tuple[int, str, dict[str, str]]:
        (scratch / "requirements.in").write_text("".join(line + "\n" for line in lines))
        proc = subprocess.run([uv, "pip", "compile", "--quiet", "--no-header", "--no-annotate",
                               "--python-version", python, "--python-platform", PLATFORMS[python],
                               str(scratch / "requirements.in")], capture_output=True, text=True, env=env)
        return proc.returncode, proc.stderr, {canonical(m[1]): m[2] for m in _PIN.finditer(proc.stdout)}
    return compile_


def run_uv(python: str, tasks: list[dict[str, Any]], work: Path) -> dict[str, Any]:
    """Resolve each task for `python`; its results by task id, kept in `work` as they come (a run cut
    short resumes there)."""
    done_file = work / f"results-{python}.json"
    results: dict[str, Any] = json.loads(done_file.read_text()) if done_file.exists() else {}
    compile_ = uv_compile(python, work)
    for task in tasks:
        if task["id"] in results:
            continue
        print(f"== {task['id']}: {len(task['wanted'])} packages", flush=True)
        res = resolve(task["pinned"], dict(task["wanted"]), compile_)
        results[task["id"]] = {"pins": res.pins, "relaxed": res.relaxed, "dropped": res.dropped}
        done_file.write_text(json.dumps(results, indent=1, sort_keys=True))
        print(f"   {len(res.pins)} pinned, {len(res.relaxed)} relaxed, {len(res.dropped)} left out", flush=True)
    return results


GITHUB = "https://github.com/aws/deep-learning-containers/blob/{commit}/{path}"
DOCS = HERE.parent / "docs" / "aws-image-packages.md"
DOCS_HEAD = """# What AWS's training images carry, and ours

<!-- Made by `python scripts/aws_image_packages.py --markdown` from emulator/data/frameworks.json; edit the
script, not this page. -->

AWS's PyTorch and TensorFlow training images install, besides the framework and its SageMaker toolkit,
packages that training scripts import: scipy, pandas, scikit-learn, opencv, Pillow, seaborn, shap, the
SageMaker SDK, smdebug, and for TensorFlow from 2.10 tf-models-official (with tensorflow-addons) and
tensorflow-text. A [framework image](images.md#framework-images) installs the same, in a stage of its own
after the venv's (`images/framework/aws_packages.sh`), so a script that imports them runs here as there.

Where each list comes from: the CPU training Dockerfile of the version's series in
[aws/deep-learning-containers](https://github.com/aws/deep-learning-containers) (each row links the file
at the commit read; `scripts/aws_dlc_installs.json` holds what it installs). `scripts/aws_image_packages.py`
keeps AWS's specifiers where a resolver (uv's) can honour them on the Python the stand-in runs, beside the
image's own pins (the framework, numpy, protobuf, the toolkits), and writes what it chose into
`emulator/data/frameworks.json`; `tests/integration/test_aws_image_packages_in_images.py` asks a built
image's pip and Python for every one of them.

What differs, and why:

- **Left out on purpose** (every version): {left_out}
- **Already in the venv stage**, at the table's pins rather than AWS's: the framework and its companions,
  the toolkits, numpy, protobuf, mpi4py, Horovod (a table column below names each of AWS's pins).
- **Pinned off AWS's specifier**: where AWS's pin has no wheel for the Python the stand-in runs (AWS's
  PyTorch 1.x images run Python 3.8 or 3.6, ours 3.9) or conflicts with the image's numpy or protobuf, the
  resolver chooses; the row says which and the resolver's reason is in the table (`aws_differs`).
- **Left out by the resolver**: a package no release of which installs beside the image's pins on that
  Python (`aws_left_out`, with the resolver's message).
- **Installed differently**: AWS installs many with conda, some from git tags (smdebug, the
  sagemaker-tensorflow PipeModeDataset) or its own buckets (torchdata, torchtext); ours installs the PyPI
  release.
- **Not resolved yet**: a version whose row says so has AWS's list and the left-out reasons, but no
  resolved pins: its image carries the venv's packages only (`scripts/aws_image_packages.py --only=...`
  resolves it; a run needs uv and the package index).
"""


def markdown(table: Mapping[str, Any]) -> str:
    """The docs page: per framework version, what AWS's image installs vs what ours does."""
    reasons: dict[str, list[str]] = {}
    for name, why in LEFT_OUT.items():
        reasons.setdefault(why, []).append(name)
    left = "; ".join(f"{', '.join(sorted(names))}: {why}" for why, names in reasons.items())
    out = [DOCS_HEAD.format(left_out=left)]
    for framework, title in (("pytorch", "PyTorch"), ("tensorflow", "TensorFlow")):
        out += [f"\n## {title}\n", "| version | AWS's Dockerfile (Python) | in the venv stage: AWS's / ours "
                "| ours installs (Python: pins) | pinned off AWS's specifier | left out by the resolver |",
                "| --- | --- | --- | --- | --- | --- |"]
        for version in sorted(table[framework], key=lambda v: tuple(int(x) for x in v.split("."))):
            entry = table[framework][version]
            info = entry.get("aws_image")
            if info is None:
                continue
            files = "<br>".join(f"[{f['path'].rsplit('/', 1)[1]}]({GITHUB.format(**f)})" for f in info["files"])
            venv = ", ".join(f"{v['aws']} / {v['ours'] or '-'}" for _, v in sorted(info["in_image"].items()))
            pins = entry.get("aws_packages", {})
            ours = "<br>".join(f"{py}: " + ", ".join(f"{n}=={v}" for n, v in sorted(p.items()))
                               for py, p in sorted(pins.items())) or "not resolved yet"
            differ = "<br>".join(f"{py}: " + ", ".join(f"{info['aws'][n].split(':')[-1]} → {pins[py][n]}"
                                                      for n in sorted(d))
                                 for py, d in sorted(entry.get("aws_differs", {}).items()) if d) or "-"
            dropped = "<br>".join(f"{py}: " + ", ".join(sorted(d)) for py, d in
                                  sorted(entry.get("aws_left_out", {}).items()) if d) or "-"
            out.append(f"| {version} | {files} ({info['aws_python']}) | {venv or '-'} | {ours} | {differ} | "
                       f"{dropped} |")
    return "\n".join(out) + "\n"


def main(argv: Sequence[str]) -> int:
    if argv[1:2] == ["--markdown"]:
        DOCS.write_text(markdown(json.loads(TABLE.read_text())))
        print(f"wrote {DOCS}")
        return 0
    if {"-h", "--help"} & set(argv[1:]):
        print(__doc__.split("Usage: ", 1)[1].split(" Pure parts", 1)[0])
        return 0
    unknown = [a for a in argv[1:] if a != "--no-resolve" and not a.startswith(("--only=", "--python=", "--work="))]
    if unknown:  # a mistyped option would otherwise start resolving every version (an hour and more)
        print(f"unknown argument(s): {' '.join(unknown)}; see --help", file=sys.stderr)
        return 2
    only = [a.split("=", 1)[1] for a in argv[1:] if a.startswith("--only=")]
    pythons = [a.split("=", 1)[1] for a in argv[1:] if a.startswith("--python=")] or list(PLATFORMS)
    work_arg = [a.split("=", 1)[1] for a in argv[1:] if a.startswith("--work=")]
    work = Path(work_arg[0] if work_arg else tempfile.mkdtemp(prefix="aws-image-"))
    work.mkdir(parents=True, exist_ok=True)
    sources = json.loads(INSTALLS.read_text())
    table = json.loads(TABLE.read_text())
    plans: dict[tuple[str, str], Plan] = {}
    tasks: dict[str, list[dict[str, Any]]] = {p: [] for p in pythons}
    for framework in ("pytorch", "tensorflow"):
        for version in table[framework]:
            src = sources[framework].get(series(version))
            if src is None:
                continue
            plans[(framework, version)] = p = plan(framework, version, src["installs"])
            if (only and f"{framework}:{version}" not in only) or "--no-resolve" in argv:
                continue  # recorded (AWS's list, what is left out), resolved pins kept as they are
            for python in runnable_pythons(table, framework, version):
                if python in tasks:
                    tasks[python].append({"id": f"{framework}:{version}:{python}",
                                          "pinned": image_pins(table, framework, version, python),
                                          "wanted": list(p.wanted.items())})
    results: dict[str, Any] = {}
    for python, items in tasks.items():
        if items:
            results.update(run_uv(python, items, work))
    for (framework, version), p in plans.items():
        src = sources[framework][series(version)]
        entry = table[framework][version]
        ours = {**{canonical(n): v for n, v in entry["packages"].items()},
                **{n: v for py in entry.get("python_packages", {})
                   for n, v in table["toolkits"][framework][py].items()},
                **{n: v for py in entry.get("python_packages", {}).values() for n, v in py.items()}}
        if entry.get("horovod"):
            ours["horovod"] = entry["horovod"]
        entry["aws_image"] = {
            "series": series(version), "files": src["files"], "aws_python": src["python"],
            "notes": src.get("notes", []) + [f"{n}: {t}" for n, t in sorted(p.notes.items())],
            "aws": p.aws,
            "in_image": {n: {"aws": raw, "ours": ours.get(n)} for n, raw in p.in_image.items()},
            "left_out": p.left_out,
        }
        packages, differ, dropped = {}, {}, {}
        for python in runnable_pythons(table, framework, version):
            res_data = results.get(f"{framework}:{version}:{python}")
            if res_data is None:
                old = entry.get("aws_packages", {}).get(python)
                if old is not None:  # not asked this time: kept
                    packages[python] = old
                    differ[python] = entry.get("aws_differs", {}).get(python, {})
                    dropped[python] = entry.get("aws_left_out", {}).get(python, {})
                continue
            # A result from before a substitution names the package AWS installs: the same version of ours.
            res = Resolution(res_data["pins"], res_data["relaxed"], res_data["dropped"])
            packages[python] = dict(sorted(res.pins.items()))
            differ[python] = differs(p.wanted, res)
            dropped[python] = res.dropped
        entry["aws_packages"], entry["aws_differs"], entry["aws_left_out"] = packages, differ, dropped
    table["meta"]["aws_image"] = (
        "aws_image / aws_packages made by scripts/aws_image_packages.py from aws/deep-learning-containers' CPU "
        "training Dockerfiles (scripts/aws_dlc_installs.json names each file and commit) and uv's resolver (for "
        "the image's Python and platform, beside its exact pins)")
    TABLE.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    print(f"wrote {TABLE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
