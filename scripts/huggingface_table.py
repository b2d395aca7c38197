#!/usr/bin/env python3
"""Data table for the Hugging Face images: what SageMaker SDK v2 lists, what AWS's images install.

For every Hugging Face *training* version in the SageMaker Python SDK v2's image config
(``sagemaker/image_uri_config/huggingface.json``: a transformers version with the PyTorch and TensorFlow
versions AWS built it on), this script records, in ``emulator/data/huggingface.json``:

* the SDK's ``py_versions`` and the ECR repository (``huggingface-pytorch-training``, ...);
* what AWS's Hugging Face training image of that pair installs on top of its framework image, read from
  aws/deep-learning-containers: the buildspec that names the pair (``transformers_version``,
  ``datasets_version``; the newest commit that builds it wins, as the image one pulls today is the
  newest rebuild) and the ``pip install`` lines of the Dockerfile it builds (its ``ARG`` defaults);
* when the framework has a stand-in here (``emulator/data/frameworks.json``, via
  ``emulator.training_images.frameworks``): the Python the stand-in runs and the pins of the
  Hugging Face layer on it, as pip resolves them
  together with the framework image's own pins on that very Python. AWS's pin is kept where pip can
  install it there; otherwise pip's choice is recorded with the reason, and a package that compiles
  against CUDA is left out with the reason.

Network: PyPI, through uv's resolver (``uv pip compile``; seconds a set) when ``uv`` is on PATH, else pip's
(``pip install --dry-run --report``; minutes a set here), for the interpreter of each target Python
(``python3.9``, ``python3.11``... on PATH or pyenv's, or ``--python 3.9=/path/to/python``). Unpinned
packages are limited to what PyPI had on the day of AWS's build (the buildspec commit's date), or within
RELEASE_WINDOW days of the transformers release for pairs AWS's history lacks.

Usage: ``python3 scripts/huggingface_table.py DLC_GIT_DIR [OUT.json]`` where DLC_GIT_DIR is a clone
(bare is fine) of https://github.com/aws/deep-learning-containers with its history; stdout without OUT.
Run from the checkout's venv (it imports ``emulator.training_images.frameworks``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from emulator.training_images import frameworks  # noqa: E402  (after the sys.path line above)

#: SDK framework names in huggingface.json's keys ("pytorch2.1.0") -> the DLC folder's name.
BACKENDS = ("pytorch", "tensorflow")
#: The framework itself, which the framework image pins (tensorflow-addons is the layer's).
FRAMEWORK_PACKAGES = ("torch", "torchaudio", "torchvision", "tensorflow", "tensorflow-gpu", "tensorflow-cpu")
#: Packages of AWS's Dockerfiles that are not installed here, and why (no GPU, no CUDA toolkit).
LEFT_OUT: dict[str, str] = {
    "flash-attn": "compiles CUDA kernels at install (needs nvcc and a GPU)",
    "bitsandbytes": "CUDA kernels for quantised training on a GPU",
    "deepspeed": "compiles its CUDA ops against the CUDA toolkit",
    "transformer-engine": "NVIDIA's CUDA kernels",
    "kenlm": "a C++ build (with Boost) for CTC decoding of audio models",
    "mkl": "Intel's MKL for AWS's own CPU build of the framework; PyPI's wheels bundle what they use",
    "sagemaker": "the SageMaker Python SDK, a client of the service; training scripts do not call it",
    "pip": "the image's pip is the framework image's",
    "wheel": "the image's build tools are the framework image's",
    "setuptools": "pinned by the framework image (frameworks.json)",
    "werkzeug": "a security upgrade of a package of AWS's framework image",
    "cryptography": "a security upgrade of a package of AWS's framework image",
    "pyopenssl": "a security upgrade of a package of AWS's framework image",
}
#: Extras of transformers not installed: `audio` pulls kenlm (above) and phonemizer's espeak.
LEFT_OUT_EXTRAS: dict[str, str] = {"audio": "pulls kenlm (a C++ build) and phonemizer (espeak)",
                                   "sagemaker": "the SageMaker Python SDK, a client of the service"}
#: Packages whose resolved version is recorded besides those AWS names: what transformers needs.
CORE = ("tokenizers", "huggingface-hub", "safetensors", "sentencepiece", "accelerate", "pyarrow")
#: Caps on an image whose numpy is 1.x that the packages' metadata does not state (pip would pick a
#: release that fails at import): measured by importing each release beside numpy 1.26.4.
NUMPY_1_CAPS: dict[str, tuple[str, str]] = {
    "pyarrow": ("<26", "pyarrow 26 imports only with numpy 2 (`pyarrow requires NumPy 2.0 or newer`), which its "
                       "metadata does not require"),
}
#: How long pip's resolver may backtrack on one set of requirements.
RESOLVE_SECONDS = 600
#: Resolutions per pair: each one relaxes what pip's error names.
MAX_TRIES = 4
#: Days after a transformers release within which AWS built its image (for pairs their history lacks).
RELEASE_WINDOW = 30
WORKERS = 3
_REQ = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?:\[(?P<extras>[^\]]*)\])?(?P<spec>(?:[=<>!~]=?|===).+)?$")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def vkey(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text))


# --------------------------------------------------------------------------------------------------
# SDK v2
# --------------------------------------------------------------------------------------------------


def sdk_config() -> tuple[dict[str, Any], str]:
    from importlib.metadata import version

    import sagemaker  # the SDK whose URIs the estimator makes

    path = Path(sagemaker.__file__).parent / "image_uri_config" / "huggingface.json"
    return json.loads(path.read_text())["training"], version("sagemaker")


# --------------------------------------------------------------------------------------------------
# aws/deep-learning-containers
# --------------------------------------------------------------------------------------------------


def git(dlc: Path, *args: str) -> str:
    return subprocess.run(["git", f"--git-dir={dlc}", *args], check=True, capture_output=True, text=True).stdout


def dlc_builds(dlc: Path) -> dict[tuple[str, str, str], dict[str, Any]]:
    """(backend, framework version, transformers) -> AWS's build of it: tag, commit, Dockerfile packages.
    Commits are walked newest first; the first that builds a pair wins."""
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    specs = [f"huggingface/{b}/training/buildspec*.yml" for b in BACKENDS]
    for commit in git(dlc, "log", "--all", "--format=%H", "--", *specs).split():
        for backend in BACKENDS:
            folder = f"huggingface/{backend}/training"
            names = git(dlc, "ls-tree", "--name-only", commit, folder + "/").split()
            for path in names:
                base = path.rsplit("/", 1)[-1]
                if not re.fullmatch(r"buildspec[^/]*\.yml", base) or re.search("neuron|trcomp", base):
                    continue
                for build in _buildspec_images(git(dlc, "show", f"{commit}:{path}")):
                    key = (backend, build["version"], build["transformers"])
                    if key in out:
                        continue
                    dockerfile = f"{folder}/{build['docker_file']}"
                    text = _dockerfile(dlc, commit, dockerfile)
                    if text is None:
                        continue
                    args = {"TRANSFORMERS_VERSION": build["transformers"], "DATASETS_VERSION": build["datasets"]}
                    out[key] = {"tag": build["tag"], "commit": commit, "buildspec": path, "dockerfile": dockerfile,
                                "packages": dockerfile_packages(text, args)}
    return out


def _dockerfile(dlc: Path, commit: str, path: str) -> str | None:
    """The Dockerfile at `commit`, else as it last was before it was removed (a buildspec can outlive it)."""
    for at in (commit, *git(dlc, "log", "--all", "--format=%H", "-2", "--", path).split()):
        for rev in (at, f"{at}^"):
            try:
                return git(dlc, "show", f"{rev}:{path}")
            except subprocess.CalledProcessError:
                continue
    return None


def _buildspec_images(text: str) -> list[dict[str, str]]:
    """The GPU images of a buildspec (their anchors' values: version, python, cuda, transformers...)."""
    anchors = dict(re.findall(r"&([A-Z_]+)\s+\"?([^\s\"]+)\"?\s*$", text, re.M))
    version, short = anchors.get("VERSION"), anchors.get("SHORT_VERSION")
    if version is None:
        return []
    images = []
    for block in re.split(r"\n  Build", text)[1:]:
        values = dict(re.findall(r"&([A-Z_]+)\s+\"?([^\s\"]+)\"?\s*$", block, re.M))
        if values.get("DEVICE_TYPE") != "gpu" or "TRANSFORMERS_VERSION" not in values:
            continue
        short_version = short or ".".join(version.split(".")[:2])
        python, cuda, os_version = values["TAG_PYTHON_VERSION"], values["CUDA_VERSION"], values["OS_VERSION"]
        images.append({
            "version": version, "transformers": values["TRANSFORMERS_VERSION"],
            "datasets": values.get("DATASETS_VERSION", ""),
            "tag": f"{version}-transformers{values['TRANSFORMERS_VERSION']}-gpu-{python}-{cuda}-{os_version}",
            "docker_file": f"docker/{short_version}/{values.get('DOCKER_PYTHON_VERSION', 'py3')}/{cuda}/Dockerfile.gpu",
        })
    return images


def dockerfile_packages(text: str, args: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The requirements of a Dockerfile's `pip install` commands: name -> {"spec", "extras"}."""
    defaults = dict(re.findall(r"^ARG\s+([A-Z_]+)=(\S+)", text, re.M))
    values = {**defaults, **{k: v for k, v in args.items() if v}}
    joined = re.sub(r"\\\s*\n", " ", re.sub(r"^\s*#.*$", "", text, flags=re.M))
    # The RUN instructions that install transformers: the Hugging Face layer. Others upgrade what AWS's
    # framework image has (pip, pyarrow, awscli, certifi... for its security scans).
    runs = [run for run in re.split(r"\n(?=RUN\s)", joined) if re.search(r"\btransformers\b", run)]
    found: dict[str, dict[str, Any]] = {}
    for command in re.split(r"&&|;|\n", "\n".join(runs)):
        words = command.split()
        if "install" not in words or not any(w in ("pip", "pip3", "$PIP", "${PIP}") for w in words):
            continue
        for word in words[words.index("install") + 1:]:
            word = re.sub(r"\$\{?([A-Z_]+)\}?", lambda m: values.get(m.group(1), m.group(0)), word)
            match = _REQ.match(word)
            if word.startswith(("-", "$", "http")) or match is None or "$" in word:
                continue
            extras = [e.strip() for e in (match["extras"] or "").split(",") if e.strip()]
            found[canonical(match["name"])] = {"spec": match["spec"] or "", "extras": extras}
    return found


# --------------------------------------------------------------------------------------------------
# pip's resolver, per Python
# --------------------------------------------------------------------------------------------------


def resolve(python: str, requirements: list[str], newest: str | None = None,
            limited: Iterable[str] = ()) -> tuple[dict[str, str] | None, str]:
    """The resolver's choice for `requirements` on the interpreter `python` ({name: version}), or None
    and its error. uv's resolver (`uv pip compile`, as pip would pick on that Python and manylinux
    x86_64) when `uv` is on PATH: pip's own takes minutes per set here, where uv takes seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        reqs, out = Path(tmp) / "requirements.txt", Path(tmp) / "out.txt"
        reqs.write_text("".join(r + "\n" for r in requirements))
        uv = shutil.which("uv")
        if uv:
            command = [uv, "pip", "compile", "--quiet", "--no-header", "--no-annotate", "--python", python,
                       "--python-platform", "x86_64-manylinux_2_28", "-o", str(out), str(reqs),
                       ]
            # The date limits the layer's packages alone: the framework image's pins (and what they
            # need) are what they are today.
            for name in sorted(limited) if newest else []:
                command += ["--exclude-newer-package", f"{name}={newest}"]
        else:
            command = [sys.executable, "-m", "pip", "--python", python, "install", "--dry-run", "--ignore-installed",
                       "--quiet", "--prefer-binary", "--report", str(out), "-r", str(reqs)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=RESOLVE_SECONDS,
                                  env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
        except subprocess.TimeoutExpired:
            return None, f"the resolver found nothing in {RESOLVE_SECONDS} s (backtracking)"
        if done.returncode != 0:
            text = " ".join(done.stderr.split())
            errors = re.findall(r"ERROR: .*?(?=ERROR:|$)", text)
            return None, (errors[0].strip() if errors else text[-600:])
        if uv:
            pins = re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", out.read_text(), re.M)
            return {canonical(name): version for name, version in pins}, ""
        picked = json.loads(out.read_text())["install"]
        return {canonical(item["metadata"]["name"]): item["metadata"]["version"] for item in picked}, ""


def release_window(transformers: str) -> str:
    """The ISO date RELEASE_WINDOW days after transformers `transformers` was uploaded to PyPI."""
    files = transformers_releases()[transformers]
    uploaded = min(datetime.fromisoformat(f["upload_time_iso_8601"].replace("Z", "+00:00")) for f in files)
    return (uploaded + timedelta(days=RELEASE_WINDOW)).isoformat()


@cache
def transformers_releases() -> dict[str, list[dict[str, Any]]]:
    with urllib.request.urlopen("https://pypi.org/pypi/transformers/json", timeout=120) as answer:
        releases: dict[str, list[dict[str, Any]]] = json.load(answer)["releases"]
    return releases


def conflict_names(error: str) -> list[str]:
    """The packages a resolver's error names (pip: `Cannot install A==1, B and C because ...`; uv: `Because
    A==1 depends on B<2 and you require B==3, ...`)."""
    found = re.search(r"Cannot install (.*?) because", error)
    if found:
        text = found.group(1)
    else:
        text = " ".join(re.findall(r"(?:Because|depends on|you require|requirement|and) ([^\s,;]+)", error))
    names = []
    for item in re.split(r",\s*|\s+and\s+|\s+", text):
        match = _REQ.match(item.strip())
        if match and canonical(match["name"]) not in names:
            names.append(canonical(match["name"]))
    return names


def layer(backend: str, version: str, python: str, interpreter: str, aws: dict[str, dict[str, Any]],
          transformers: str, newest: str | None) -> dict[str, Any]:
    """The Hugging Face layer's pins on `python` for one pair: AWS's where pip installs them with the
    framework image's pins, else pip's choice; what is left out and what differs, with reasons. `newest`
    (an ISO date) keeps what was released later out, as pip on AWS's build day saw PyPI."""
    # The framework image's pins, and what AWS's image of it installs for scripts where the table has it.
    aws_packages = getattr(frameworks, "aws_packages", lambda *_: ())
    base = list(frameworks.requirements(backend, version, python)) + list(aws_packages(backend, version, python))
    pinned_names = {canonical(re.split(r"[=<>!~\[]", r, maxsplit=1)[0]) for r in base}
    left_out = {name: LEFT_OUT[name] for name in aws if name in LEFT_OUT}
    notes: dict[str, str] = {}
    wanted: dict[str, dict[str, Any]] = {}
    for name, item in aws.items():
        if name in LEFT_OUT or name in pinned_names or name in FRAMEWORK_PACKAGES:
            continue
        extras = [e for e in item["extras"] if e not in LEFT_OUT_EXTRAS]
        wanted[name] = {"spec": item["spec"], "extras": extras}
    wanted.setdefault("transformers", {"spec": f"=={transformers}", "extras": ["sklearn", "sentencepiece"]})
    numpy = next((pin.split("==")[1] for pin in base if pin.startswith("numpy==")), None)
    if numpy is not None and vkey(numpy) < (2,):
        for name, (cap, why) in NUMPY_1_CAPS.items():
            spec = wanted.get(name, {}).get("spec", "")
            wanted[name] = {"spec": f"{spec},{cap}" if spec else cap, "extras": wanted.get(name, {}).get("extras", [])}
            notes[name] = f"{cap}: {why} (the framework image has numpy {numpy})"
    dropped = [e for e in aws.get("transformers", {}).get("extras", []) if e in LEFT_OUT_EXTRAS]
    for extra in dropped:
        left_out[f"transformers[{extra}]"] = LEFT_OUT_EXTRAS[extra]

    def requirement(name: str, keep_spec: bool) -> str:
        extras = f"[{','.join(wanted[name]['extras'])}]" if wanted[name]["extras"] else ""
        return name + extras + (wanted[name]["spec"] if keep_spec else "")

    relaxed: set[str] = set()
    errors: dict[str, str] = {}

    def attempt() -> tuple[dict[str, str] | None, str]:
        return resolve(interpreter, base + [requirement(n, n not in relaxed) for n in wanted], newest, {*wanted, *CORE})

    picked, error = attempt()
    for _ in range(MAX_TRIES):
        if picked is not None:
            break
        named = conflict_names(error)
        culprits = [n for n in named if n in wanted and n not in relaxed and wanted[n]["spec"] and n != "transformers"]
        extras = wanted["transformers"]["extras"]
        if culprits:
            relaxed.update(culprits)
            errors.update({n: error for n in culprits})
        elif blamed := [e for e in extras if re.search(rf"transformers\[[^\]]*\b{re.escape(e)}\b", error)]:
            # An extra whose requirements conflict with the framework image's pins (transformers[sentencepiece]
            # caps protobuf at 3.20.2 up to 4.2x; [torch-speech]'s pyctcdecode caps numpy below 2): the
            # extra goes, sentencepiece itself stays (the extra's other half).
            for extra in blamed:
                extras.remove(extra)
                left_out[f"transformers[{extra}]"] = f"conflicts with the framework image's pins: {error}"
            if "sentencepiece" in blamed:
                wanted.setdefault("sentencepiece", {"spec": "", "extras": []})
        else:
            break
        picked, error = attempt()
    if picked is None:
        return {"error": f"pip finds no set of versions: {error}", "left_out": left_out}
    pins = {}
    for name in sorted({*wanted, *CORE}):
        if name not in picked:
            continue
        extras = wanted.get(name, {}).get("extras", [])
        pins[name + (f"[{','.join(extras)}]" if extras else "")] = picked[name]
    differs = {name: f"AWS installs {name}{wanted[name]['spec']}; with the framework image's pins on Python "
                     f"{python} pip installs {picked.get(name)} ({errors.get(name, 'conflict')})"
               for name in sorted(relaxed)}
    unpinned = sorted(n for n in wanted if not wanted[n]["spec"])
    return {"packages": pins, "differs": differs, "left_out": left_out, "unpinned_by_aws": unpinned, "capped": notes}


# --------------------------------------------------------------------------------------------------


def interpreters(given: list[str]) -> dict[str, str]:
    found = dict(item.split("=", 1) for item in given)
    for python in frameworks.DEBIAN_PYTHONS:
        if python not in found:
            path = shutil.which(f"python{python}")
            pyenv = Path.home() / ".pyenv" / "versions"
            candidates = sorted(pyenv.glob(f"{python}.*/bin/python{python}")) if pyenv.is_dir() else []
            if candidates:
                path = str(candidates[-1])
            if path:
                found[python] = path
    return found


def build_table(dlc: Path, pythons: dict[str, str]) -> dict[str, Any]:
    config, sdk_version = sdk_config()
    builds = dlc_builds(dlc)
    training: dict[str, Any] = {}
    jobs: list[tuple[dict[str, Any], str, tuple[Any, ...]]] = []
    for transformers in sorted(config["versions"], key=vkey):
        entry = config["versions"][transformers]
        for key, value in entry.items():
            if not isinstance(value, dict) or "repository" not in value:
                continue
            backend = next(b for b in BACKENDS if key.startswith(b))
            version = key[len(backend):]
            print(f"transformers {transformers} {backend} {version}", file=sys.stderr)
            row: dict[str, Any] = {"repository": value["repository"], "sdk_py_versions": value["py_versions"]}
            aws = builds.get((backend, version, transformers))
            if aws is not None:
                row["aws"] = aws
                # What pip saw on the day of AWS's last change to the build (its unpinned packages).
                row["newest"] = git(dlc, "show", "-s", "--format=%cI", aws["commit"]).strip()
            else:
                row["aws"] = None
                # What pip saw when AWS built it: within RELEASE_WINDOW of the transformers release.
                row["newest"] = release_window(transformers)
                row["aws_note"] = (f"no buildspec of aws/deep-learning-containers' history names this pair; the layer "
                                   f"is transformers[sklearn,sentencepiece] and datasets as pip picked them up to "
                                   f"{row['newest'][:10]}, {RELEASE_WINDOW} days after the transformers release")
            if version not in frameworks.runnable_versions(backend):
                row["stand_in"] = None
                training.setdefault(transformers, {}).setdefault(backend, {})[version] = row
                continue
            wheels = [p for p in frameworks.table()[backend][version]["wheel_pythons"]
                      if p in frameworks.DEBIAN_PYTHONS]
            here = {frameworks.nearest_python(py, wheels) for py in value["py_versions"]}
            row["pythons"] = {}
            packages = (aws or {}).get("packages") or {
                "transformers": {"spec": f"=={transformers}", "extras": ["sklearn", "sentencepiece"]},
                "datasets": {"spec": "", "extras": []}}
            for python in sorted(here, key=vkey):
                jobs.append((row["pythons"], python,
                             (backend, version, python, pythons[python], packages, transformers, row["newest"])))
            training.setdefault(transformers, {}).setdefault(backend, {})[version] = row
    # pip's resolver waits on PyPI more than it computes: a few at a time.
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        done = {pool.submit(layer, *args): (into, python) for into, python, args in jobs}
        for future, (into, python) in done.items():
            into[python] = future.result()
    return {
        "meta": {
            "made_by": "scripts/huggingface_table.py (SageMaker Python SDK v2's image_uri_config/huggingface.json "
                       "training versions; aws/deep-learning-containers' Hugging Face buildspecs and Dockerfiles; "
                       "pip's resolver per Python with the framework image's pins)",
            "sdk_version": sdk_version,
            "dlc_commit": git(dlc, "rev-parse", "HEAD").strip(),
        },
        "version_aliases": config.get("version_aliases", {}),
        "training": training,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dlc", type=Path, help="git dir of a clone of aws/deep-learning-containers")
    parser.add_argument("out", nargs="?", type=Path)
    parser.add_argument("--python", action="append", default=[], metavar="X.Y=PATH",
                        help="the interpreter that resolves for Python X.Y (default: pythonX.Y, pyenv's)")
    args = parser.parse_args(argv[1:])
    table = build_table(args.dlc, interpreters(args.python))
    text = json.dumps(table, indent=1, sort_keys=True) + "\n"
    if args.out:
        args.out.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
