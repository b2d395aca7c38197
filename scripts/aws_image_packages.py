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
kernels, conda's own packages, C libraries), and lets pip's resolver choose versions of the rest that install
together with the image's pins on the Python the stand-in runs: a ``pip install --dry-run --report`` in a
container of the framework images' Debian base (``hetero-emu/base:framework-<suite>``, which a framework
image build makes), AWS's specifiers first; a specifier that cannot hold there (no wheel for that Python, a
conflict with the image's numpy or protobuf) is dropped and pip's reason kept; a package that cannot install
at all is left out with pip's reason.

The result goes into ``emulator/data/frameworks.json``: per version ``aws_image`` (where it came from, AWS's
specifiers, what is in the image already, what is left out and why) and ``aws_packages`` (per Python, the
pins the image's extra stage installs, with ``aws_differs``: where a pin is not what AWS's specifier asks,
and why).

Usage: ``.venv/bin/python scripts/aws_image_packages.py [--only=FRAMEWORK:VERSION ...] [--python=3.9 ...]
[--work=DIR] [--no-resolve]`` (needs the Docker engine, the base images of the Pythons asked for, and the
package index; ``--no-resolve`` records AWS's lists and keeps the pins already resolved; ``--work`` keeps the
resolver's results, so that a run cut short resumes, and a ``seed.log`` there, the log of an interrupted run,
spares asking again what it answered); then ``--markdown`` writes docs/aws-image-packages.md. Pure parts are
tested in tests/unit/test_aws_image_packages.py. Inside the container it runs itself as
``aws_image_packages.py --inner TASKS RESULTS`` (stdlib only, Python 3.9).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
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
# pip's answers (pure: parsing its output)
# --------------------------------------------------------------------------------------------------

_NOT_FOUND = re.compile(r"(?:No matching distribution found for|Could not find a version that satisfies the "
                        r"requirement)\s+([A-Za-z0-9][A-Za-z0-9._-]*)")
_REQUESTED = re.compile(r"^\s*The user requested \(?(?:constraint\)\s*)?([A-Za-z0-9][A-Za-z0-9._-]*)")
_DEPENDS = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*) [^ ]+ depends on ([A-Za-z0-9][A-Za-z0-9._-]*)")
_COLLECTING = re.compile(r"^\s*Collecting ([A-Za-z0-9][A-Za-z0-9._-]*)")
_BUILD_FAILED = ("metadata-generation-failed", "subprocess-exited-with-error", "Failed to build")


def culprits(output: str) -> list[str]:
    """The package names pip's failure names (canonical, in order): what it found no release of, what a
    conflict is caused by, or the package whose source build failed."""
    names: list[str] = []
    lines = output.splitlines()
    for line in lines:
        for pattern in (_NOT_FOUND, _REQUESTED):
            if (match := pattern.search(line)) is not None:
                names.append(match.group(1))
        if (match := _DEPENDS.match(line)) is not None:
            names.extend([match.group(1), match.group(2)])
    if not names and any(marker in output for marker in _BUILD_FAILED):
        collecting = [m.group(1) for line in lines if (m := _COLLECTING.match(line)) is not None]
        names.extend(collecting[-1:])
    out: list[str] = []
    for name in map(canonical, names):
        if name not in out:
            out.append(name)
    return out


def failure_line(output: str) -> str:
    """pip's first ERROR line (or its last line), for a reason a person can read."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    # pip's "Ignored the following versions that require a different python version" is a list, not the why.
    errors = [line for line in lines if line.startswith("ERROR:") and not line.startswith("ERROR: Ignored")]
    conflict = [line for line in lines if " depends on " in line or line.startswith("The user requested")]
    text = (errors[0] if errors else lines[-1] if lines else "pip failed")
    return text + (" (" + "; ".join(conflict[:3]) + ")" if conflict else "")


_MAJOR_CAP = re.compile(r"^<\d+$")


def relaxed_spec(spec: str) -> str:
    """What is left of AWS's specifier when it cannot hold: its caps below a major version (`<3` of
    `sagemaker>=2,<3`: SDK v3 is another API), nothing else (`numba<0.54` goes)."""
    return ",".join(part for part in spec.split(",") if _MAJOR_CAP.match(part.strip()))


def tidy(reason: str) -> str:
    """A reason kept by an older run whose first ERROR line was pip's list of releases for other Pythons."""
    if reason.startswith("ERROR: Ignored the following versions"):
        return "ERROR: No matching distribution found: no release of this version installs on this Python"
    return reason


@dataclass
class Resolution:
    """The resolver's outcome for one (version, Python): pins of what installs, specifiers dropped, packages
    left out, each with pip's reason."""

    pins: dict[str, str]
    relaxed: dict[str, str]
    dropped: dict[str, str]


def next_step(wanted: dict[str, str], pinned: Iterable[str], output: str) -> tuple[dict[str, str], dict[str, str],
                                                                                 dict[str, str]]:
    """After a failed dry run: (wanted with the named specifiers dropped, {name: why relaxed}, {name: why
    left out}). A culprit with AWS's specifier loses the specifier; one without is left out; a culprit that
    is one of the image's own pins leaves out the wanted packages that pip names beside it. Nothing to
    change: every wanted package named is left out, or, none named, the last one (so the loop ends)."""
    names = culprits(output)
    reason = failure_line(output)
    fixed = {canonical(p.split("==")[0]) for p in pinned}
    relax = [n for n in names if n in wanted and wanted[n] and relaxed_spec(wanted[n]) != wanted[n]]
    if relax:
        return ({n: (relaxed_spec(s) if n in relax else s) for n, s in wanted.items()},
                dict.fromkeys(relax, reason), {})
    drop = [n for n in names if n in wanted and n not in fixed]
    if not drop:
        drop = list(wanted)[-1:]
    return {n: s for n, s in wanted.items() if n not in drop}, {}, dict.fromkeys(drop, reason)


# --------------------------------------------------------------------------------------------------
# Inside the container (stdlib only, the image's Python)
# --------------------------------------------------------------------------------------------------

PIP_VERSION = "24.3.1"  # venv.sh's


#: The framework packages: a wanted package is checked against them only when it builds on the framework
#: (FRAMEWORK_BOUND), so that one check of, say, scipy serves every version with the same numpy and protobuf.
FRAMEWORK_PINS = frozenset({"torch", "torchvision", "torchaudio", "tensorflow"})
#: Source packages of the venv whose metadata every dry run would build again: left out of the checks alone
#: (the joint run has them).
SDIST_PINS = frozenset({"sagemaker-training", "sagemaker-pytorch-training", "sagemaker-tensorflow-training"})
FRAMEWORK_BOUND = frozenset({"torchdata", "torchtext", "torchtnt", "fastai", "accelerate", "s3torchconnector",
                             "tf-models-official", "tensorflow-text", "tensorflow-io", "tensorflow-datasets",
                             "sagemaker-tensorflow", "smdebug", "spacy", "thinc", "blis"})
TIMEOUT = 100  # seconds a dry run may take: pip backtracking through every old release is an answer too


def _dry_run(python: str, lines: Sequence[str], scratch: str) -> tuple[int, str, Any]:
    req = os.path.join(scratch, "requirements.txt")
    report = os.path.join(scratch, "report.json")
    with open(req, "w") as f:
        f.write("".join(line + "\n" for line in lines))
    if os.path.exists(report):
        os.remove(report)
    build = os.path.join(scratch, "build-constraints.txt")
    with open(build, "w") as f:
        f.write("setuptools<81\n")  # an old sdist's setup.py may import pkg_resources
    env = dict(os.environ, PIP_BUILD_CONSTRAINT=build, PIP_DISABLE_PIP_VERSION_CHECK="1")
    try:
        proc = subprocess.run([python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--prefer-binary",
                               "--progress-bar", "off", "--report", report, "-r", req],
                              capture_output=True, text=True, env=env, timeout=TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return 1, out + f"\nERROR: pip's resolver found no set within {TIMEOUT} s (it backtracks through old " \
                         f"releases)\n", None
    data = json.loads(Path(report).read_text()) if proc.returncode == 0 and os.path.exists(report) else None
    return proc.returncode, proc.stdout + proc.stderr, data


def _chosen(report: Any) -> dict[str, str]:
    return {canonical(i["metadata"]["name"]): i["metadata"]["version"] for i in report.get("install", [])}


_ALONE: dict[tuple[str, tuple[str, ...]], tuple[str | None, str]] = {}


#: Answers of an earlier, interrupted run (`--seed=LOG`, its "  REQUIREMENT: VERSION" lines): requirement ->
#: the version pip picked beside the same pins; an answer that is not there is asked again.
SEEDS: dict[str, str] = {}
SEED_LINE = re.compile(r"^  ([A-Za-z0-9][^:\s]*): (\S+)$")


def seeds_from(log: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for line in log.splitlines() if (m := SEED_LINE.match(line)) is not None}


def alone(python: str, requirement: str, base: Sequence[str], scratch: str) -> tuple[str | None, str]:
    """(the version pip picks for `requirement` beside `base`, else None; pip's output), remembered: the same
    question for the next framework version on this Python is not asked twice."""
    key = (requirement, tuple(base))
    if key not in _ALONE and requirement in SEEDS:
        name, spec = _NAME.match(requirement).groups()  # type: ignore[union-attr]
        version = SEEDS[requirement]
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from framework_table import parse_specifiers, satisfies  # noqa: PLC0415

        if not spec or satisfies(version, parse_specifiers(spec)):
            _ALONE[key] = (version, "(an earlier run's answer)")
    if key not in _ALONE:
        code, output, report = _dry_run(python, list(base) + [requirement], scratch)
        name = canonical(_NAME.match(requirement).group(1))  # type: ignore[union-attr]
        _ALONE[key] = (_chosen(report).get(name) if code == 0 and report is not None else None, output)
    return _ALONE[key]


def resolve_one(python: str, pinned: Sequence[str], wanted: Mapping[str, str], scratch: str,
                limit: int = 8) -> Resolution:
    """Each wanted package first alone beside the image's pins (AWS's specifier, else none, else left out),
    then all together at the versions found, pip's failures loosening the packages it names."""
    relaxed: dict[str, str] = {}
    dropped: dict[str, str] = {}
    chosen: dict[str, str] = {}
    core = [p for p in pinned if canonical(p.split("==")[0]) not in FRAMEWORK_PINS | SDIST_PINS]
    bound = [p for p in pinned if canonical(p.split("==")[0]) not in SDIST_PINS]
    for name, spec in wanted.items():
        base = bound if name in FRAMEWORK_BOUND else core
        version, output = alone(python, name + spec, base, scratch)
        if version is None and spec and relaxed_spec(spec) != spec:
            relaxed[name] = failure_line(output)
            version, output = alone(python, name + relaxed_spec(spec), base, scratch)
        if version is None:
            dropped[name] = failure_line(output)
            continue
        chosen[name] = version
        print(f"  {name}{spec}: {version}", flush=True)
    todo = {n: f"=={v}" for n, v in chosen.items()}

    def again(name: str) -> str:  # the specifier pip chooses again within
        return relaxed_spec(wanted[name]) if name in relaxed else wanted[name]

    for _ in range(limit):
        code, output, report = _dry_run(python, list(pinned) + [n + s for n, s in todo.items()], scratch)
        if code == 0 and report is not None:
            picked = _chosen(report)
            return Resolution({n: picked[n] for n in todo if n in picked}, relaxed, dropped)
        free = [n for n in todo if not todo[n].startswith("==")]
        if report is None and "found no set within" in output:
            # pip backtracked through the old releases of what it was to choose again: those go.
            if not free:
                break
            dropped.update(dict.fromkeys(free, failure_line(output) + " (choosing again beside the others)"))
            todo = {n: s for n, s in todo.items() if n not in free}
            continue
        # Packages that install alone but not together: pip chooses again for one of those it names at a
        # time, the others kept (the first that resolves wins), else for all of them.
        group = [n for n in culprits(output) if n in todo and todo[n].startswith("==")]
        if group:
            for name in group:
                trial = {**todo, name: again(name)}
                print(f"  together: pip chooses again for {name}", flush=True)
                code, output, report = _dry_run(python, list(pinned) + [n + s for n, s in trial.items()], scratch)
                if code == 0 and report is not None:
                    picked = _chosen(report)
                    return Resolution({n: picked[n] for n in trial if n in picked}, relaxed, dropped)
            todo.update({n: again(n) for n in group})
            print(f"  together: pip chooses again for {group}", flush=True)
            continue
        todo, more_relaxed, more_dropped = next_step(todo, pinned, output)
        relaxed.update(more_relaxed)
        dropped.update(more_dropped)
        if not todo:
            break
    return Resolution({}, relaxed, {**dropped, **dict.fromkeys(todo, "pip found no set that installs together")})


def inner(tasks_path: str, results_path: str) -> int:
    done = json.loads(Path(results_path).read_text()) if os.path.exists(results_path) else {}
    if all(task["id"] in done for task in json.loads(Path(tasks_path).read_text())):
        return 0  # every task answered by an earlier run (--work)
    scratch = tempfile.mkdtemp()
    venv = os.path.join(scratch, "venv")
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    python = os.path.join(venv, "bin", "python")
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--progress-bar", "off", f"pip=={PIP_VERSION}"],
                   check=True)
    tasks = json.loads(Path(tasks_path).read_text())
    seed = os.path.join(os.path.dirname(tasks_path), "seed.log")
    if os.path.exists(seed):
        SEEDS.update(seeds_from(Path(seed).read_text()))
    results: dict[str, Any] = {}
    if os.path.exists(results_path):
        results = json.loads(Path(results_path).read_text())
    for task in tasks:
        if task["id"] in results:
            continue
        print(f"== {task['id']}: {len(task['wanted'])} packages", flush=True)
        res = resolve_one(python, task["pinned"], dict(task["wanted"]), scratch)
        results[task["id"]] = {"pins": res.pins, "relaxed": res.relaxed, "dropped": res.dropped}
        with open(results_path + ".part", "w") as f:
            json.dump(results, f, indent=1, sort_keys=True)
        os.replace(results_path + ".part", results_path)
        print(f"   {len(res.pins)} pinned, {len(res.relaxed)} relaxed, {len(res.dropped)} left out", flush=True)
    return 0


# --------------------------------------------------------------------------------------------------
# On the host
# --------------------------------------------------------------------------------------------------


def image_pins(table: Mapping[str, Any], framework: str, version: str, python: str) -> list[str]:
    """The venv stage's pins (as emulator.frameworks.requirements gives them)."""
    entry = table[framework][version]
    pins = [f"{n}=={v}" for n, v in sorted(entry["packages"].items())]
    pins += [f"{n}=={v}" for n, v in sorted(table["toolkits"][framework][python].items())]
    pins += [f"{n}=={v}" for n, v in sorted(entry.get("python_packages", {}).get(python, {}).items())]
    return pins


def differs(wanted: Mapping[str, str], res: Resolution) -> dict[str, str]:
    """Where a pin is not what AWS's specifier asks, and why (pip's reason)."""
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
            out[name] = f"AWS: {name}{spec}; ours {pin}: " + res.relaxed.get(name, "pip chose it")
    return out


def runnable_pythons(table: Mapping[str, Any], framework: str, version: str) -> list[str]:
    return [p for p in table[framework][version].get("python_packages", {})]


SUITES = {"3.9": "bullseye", "3.11": "bookworm", "3.13": "trixie"}


def run_inner(python: str, tasks: list[dict[str, Any]], work: Path) -> dict[str, Any]:
    """Run the resolver in a container of the framework base image of `python`; its results by task id."""
    sys.path.insert(0, str(HERE.parent))
    import docker  # noqa: PLC0415

    from emulator.backend import index_container  # noqa: PLC0415
    from emulator.defaults import default_cache_dir  # noqa: PLC0415

    image = f"hetero-emu/base:framework-{SUITES[python]}"
    (work / f"tasks-{python}.json").write_text(json.dumps(tasks))
    pip_cache = default_cache_dir().expanduser() / "pip"
    binds = {str(HERE): {"bind": "/opt/aws-image/scripts", "mode": "ro"},
             str(work): {"bind": "/opt/aws-image/work", "mode": "rw"},
             str(pip_cache): {"bind": "/root/.cache/pip", "mode": "rw"}}
    outcome = index_container.run(
        docker.from_env(), image,
        [f"python{python}", "/opt/aws-image/scripts/aws_image_packages.py", "--inner",
         f"/opt/aws-image/work/tasks-{python}.json", f"/opt/aws-image/work/results-{python}.json"],
        environment={}, binds=binds, on_line=print)
    if outcome.exit_code != 0:
        raise SystemExit(f"the resolver in {image} failed (exit {outcome.exit_code})")
    results: dict[str, Any] = json.loads((work / f"results-{python}.json").read_text())
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
keeps AWS's specifiers where pip's resolver can honour them on the Python the stand-in runs, beside the
image's own pins (the framework, numpy, protobuf, the toolkits), and writes what it chose into
`emulator/data/frameworks.json`; `tests/integration/test_aws_image_packages_in_images.py` asks a built
image's pip and Python for every one of them.

What differs, and why:

- **Left out on purpose** (every version): {left_out}
- **Already in the venv stage**, at the table's pins rather than AWS's: the framework and its companions,
  the toolkits, numpy, protobuf, mpi4py, Horovod (a table column below names each of AWS's pins).
- **Pinned off AWS's specifier**: where AWS's pin has no wheel for the Python the stand-in runs (AWS's
  PyTorch 1.x images run Python 3.8 or 3.6, ours 3.9) or conflicts with the image's numpy or protobuf, pip
  chooses; the row says which and pip's reason is in the table (`aws_differs`).
- **Left out by the resolver**: a package no release of which installs beside the image's pins on that
  Python (`aws_left_out`, with pip's message).
- **Installed differently**: AWS installs many with conda, some from git tags (smdebug, the
  sagemaker-tensorflow PipeModeDataset) or its own buckets (torchdata, torchtext); ours installs the PyPI
  release.
- **Not resolved yet**: a version whose row says so has AWS's list and the left-out reasons, but no
  resolved pins: its image carries the venv's packages only (`scripts/aws_image_packages.py --only=...`
  resolves it; every run needs the Docker engine and the index).
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
    if argv[1:2] == ["--inner"]:
        return inner(argv[2], argv[3])
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
    pythons = [a.split("=", 1)[1] for a in argv[1:] if a.startswith("--python=")] or list(SUITES)
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
            results.update(run_inner(python, items, work))
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
            res = Resolution(*({SUBSTITUTES.get(n, (n, ""))[0]: (v if key == "pins" else tidy(v))
                                for n, v in res_data[key].items()} for key in ("pins", "relaxed", "dropped")))
            packages[python] = dict(sorted(res.pins.items()))
            differ[python] = differs(p.wanted, res)
            dropped[python] = res.dropped
        entry["aws_packages"], entry["aws_differs"], entry["aws_left_out"] = packages, differ, dropped
    table["meta"]["aws_image"] = (
        "aws_image / aws_packages made by scripts/aws_image_packages.py from aws/deep-learning-containers' CPU "
        "training Dockerfiles (scripts/aws_dlc_installs.json names each file and commit) and pip's resolver (a dry "
        "run on the image's Python against its pins)")
    TABLE.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    print(f"wrote {TABLE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
