#!/usr/bin/env python3
"""Data table for the framework images: what SageMaker SDK v2 lists, what PyPI can install.

For every PyTorch (>= 1.8) and TensorFlow (>= 2.4) *training* version in the SageMaker Python SDK v2's
image config (``sagemaker/image_uri_config/{pytorch,tensorflow}.json``), this script records:

* the SDK's ``py_versions`` for it;
* which of CPython 3.9 / 3.11 / 3.13 (the Debian bullseye / bookworm / trixie Pythons) have a manylinux
  x86_64 wheel of the framework on PyPI;
* PyTorch: the torchvision / torchaudio release built for it (its wheel pins ``torch==V``) and the Pythons
  that all three have wheels for;
* TensorFlow: its numpy / protobuf / keras requirements and the horovod release to build against it;
* per Python, a set of SageMaker toolkit pins (``sagemaker-training`` + ``sagemaker-pytorch-training`` or
  ``sagemaker-tensorflow-training``) whose requirements agree with each other and with the framework.

The ``toolkits`` section lists the toolkit releases with their requirements, and numpy / mpi4py wheels.

Network: one JSON request per PyPI project (``/pypi/<name>/json``, which lists every release's files), then
the metadata of one file per release looked at: a wheel's ``METADATA`` is read with HTTP range requests
(the zip's central directory and that one member, never the whole wheel); an sdist (the toolkits are
sdists, a few KiB) is downloaded and its ``PKG-INFO`` / ``requires.txt`` read.

Usage: ``python3 scripts/framework_table.py [OUT.json]`` (stdout without OUT). Stdlib only, Python 3.11.

What AWS's training image of each version installs besides (scipy, pandas, opencv, the SageMaker SDK,
tf-models-official, ...) is added to ``emulator/data/frameworks.json`` by ``scripts/aws_image_packages.py``
(``aws_image``, ``aws_packages``): it reads AWS's Dockerfiles (``scripts/aws_dlc_installs.json``) and asks pip's
resolver on each image's Python, against the pins this table chose.
The SDK's json files are looked for in ``$SAGEMAKER_IMAGE_URI_CONFIG``, then in this checkout's
``.venv``, then through an importable ``sagemaker`` package.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import re
import struct
import sys
import tarfile
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from email.parser import HeaderParser
from functools import cache
from pathlib import Path
from typing import Any

PYPI = "https://pypi.org"
PYTHONS: tuple[str, ...] = ("3.9", "3.11", "3.13")
MIN_VERSION = {"pytorch": (1, 8), "tensorflow": (2, 4)}
TIMEOUT = 120
USER_AGENT = "hetero-emu-framework-table/1 (urllib)"

# The official torch -> (torchvision, torchaudio) pairing (pytorch/vision and pytorch/audio README tables).
# Each pair is checked against the torchvision / torchaudio wheel's own ``Requires-Dist: torch==V``; a torch
# version missing here is looked up through the same pin on nearby releases.
KNOWN_COMPANIONS: dict[str, tuple[str, str]] = {
    "1.8.0": ("0.9.0", "0.8.0"),
    "1.8.1": ("0.9.1", "0.8.1"),
    "1.9.0": ("0.10.0", "0.9.0"),
    "1.9.1": ("0.10.1", "0.9.1"),
    "1.10.0": ("0.11.1", "0.10.0"),
    "1.10.2": ("0.11.3", "0.10.2"),
    "1.11.0": ("0.12.0", "0.11.0"),
    "1.12.0": ("0.13.0", "0.12.0"),
    "1.12.1": ("0.13.1", "0.12.1"),
    "1.13.1": ("0.14.1", "0.13.1"),
    "2.0.0": ("0.15.1", "2.0.1"),
    "2.0.1": ("0.15.2", "2.0.2"),
    "2.1.0": ("0.16.0", "2.1.0"),
    "2.2.0": ("0.17.0", "2.2.0"),
    "2.3.0": ("0.18.0", "2.3.0"),
    "2.4.0": ("0.19.0", "2.4.0"),
    "2.5.1": ("0.20.1", "2.5.1"),
    "2.6.0": ("0.21.0", "2.6.0"),
    "2.7.1": ("0.22.1", "2.7.1"),
    "2.8.0": ("0.23.0", "2.8.0"),
}

# torch wheels built against the numpy 1.x C ABI (they declare no numpy requirement): importing them next to
# numpy 2 fails ("A module that was compiled using NumPy 1.x cannot be run in NumPy 2"). torch 2.4 is the
# first release built for numpy 2.
TORCH_NUMPY2_FROM = (2, 4)

# Toolkit releases whose metadata is read (older ones predate every framework version here).
TOOLKIT_MIN = {
    "sagemaker-training": (4, 4),
    "sagemaker-pytorch-training": (2, 4),
    "sagemaker-tensorflow-training": (20, 3),
}
FRAMEWORK_TOOLKIT = {"pytorch": "sagemaker-pytorch-training", "tensorflow": "sagemaker-tensorflow-training"}


# --------------------------------------------------------------------------------------------------
# Versions and specifiers (a small PEP 440 subset: release segments, pre-releases, .postN)
# --------------------------------------------------------------------------------------------------

_VERSION_RE = re.compile(r"^v?(\d+(?:\.\d+)*)(?:[.-]?(a|b|rc)(\d*))?(?:[.-]?post(\d*))?(?:[.-]?dev(\d*))?$", re.I)
_PRE_RANK = {"a": 0, "b": 1, "rc": 2}


@dataclass(frozen=True, order=True)
class Version:
    """A comparable release version: ``(release, pre, post)``; final releases sort after pre-releases."""

    release: tuple[int, ...]
    pre: tuple[int, int]
    post: int
    text: str

    @property
    def is_prerelease(self) -> bool:
        return self.pre != (9, 0)

    def padded(self, n: int) -> tuple[int, ...]:
        return self.release + (0,) * max(0, n - len(self.release))


def parse_version(text: str) -> Version | None:
    m = _VERSION_RE.match(text.strip())
    if m is None:
        return None
    release = tuple(int(p) for p in m.group(1).split("."))
    pre = (_PRE_RANK[m.group(2).lower()], int(m.group(3) or 0)) if m.group(2) else (9, 0)
    if m.group(5) is not None and m.group(2) is None:
        pre = (-1, int(m.group(5) or 0))  # .devN sorts before everything else of that release
    post = int(m.group(4) or 0) if m.group(4) is not None else -1
    return Version(release, pre, post, text.strip())


def _release_cmp(a: Version, b: Version) -> int:
    n = max(len(a.release), len(b.release))
    x, y = a.padded(n), b.padded(n)
    return (x > y) - (x < y)


def _cmp(a: Version, b: Version) -> int:
    r = _release_cmp(a, b)
    if r:
        return r
    ka, kb = (a.pre, a.post), (b.pre, b.post)
    return (ka > kb) - (ka < kb)


_SPEC_RE = re.compile(r"^\s*(===|~=|==|!=|<=|>=|<|>)\s*([^\s,;]+)\s*$")


def parse_specifiers(text: str) -> list[tuple[str, str]]:
    """``">=1.2,<2"`` -> ``[(">=", "1.2"), ("<", "2")]``; tolerates the old ``(>=1.2)`` form."""
    text = text.strip().strip("()")
    out: list[tuple[str, str]] = []
    for part in text.split(","):
        if not part.strip():
            continue
        m = _SPEC_RE.match(part)
        if m is None:
            raise ValueError(f"unparsed version specifier {part!r} in {text!r}")
        out.append((m.group(1), m.group(2)))
    return out


def _match_one(v: Version, op: str, target: str) -> bool:
    if target.endswith(".*"):
        prefix = tuple(int(p) for p in target[:-2].split("."))
        hit = v.padded(len(prefix))[: len(prefix)] == prefix
        return hit if op == "==" else not hit if op == "!=" else False
    t = parse_version(target)
    if t is None:
        return v.text == target
    c = _cmp(v, t)
    if op in ("==", "==="):
        return c == 0  # "==2.0" matches 2.0.0
    if op == "!=":
        return c != 0
    if op == ">=":
        return c >= 0
    if op == "<=":
        return c <= 0
    if op == ">":
        return c > 0 and not (_release_cmp(v, t) == 0 and v.post >= 0 and t.post < 0)
    if op == "<":
        # "<2" excludes 2.0rc1 (PEP 440: a pre-release of the bound itself is not "less")
        return c < 0 and not (_release_cmp(v, t) == 0 and v.is_prerelease and not t.is_prerelease)
    if op == "~=":
        prefix = t.release[:-1]
        return c >= 0 and v.padded(len(prefix))[: len(prefix)] == prefix
    raise ValueError(op)


def satisfies(version: str | Version, specs: Iterable[tuple[str, str]]) -> bool:
    v = parse_version(version) if isinstance(version, str) else version
    return v is not None and all(_match_one(v, op, t) for op, t in specs)


def python_allows(requires_python: str | None, python: str) -> bool:
    if not requires_python:
        return True
    try:
        return satisfies(python + ".0", parse_specifiers(requires_python))
    except ValueError:
        return True


def vkey(text: str) -> Version:
    v = parse_version(text)
    return v if v is not None else Version((0,), (-2, 0), -1, text)


def at_least(text: str, minimum: tuple[int, ...]) -> bool:
    v = parse_version(text)
    return v is not None and v.padded(len(minimum))[: len(minimum)] >= minimum


# --------------------------------------------------------------------------------------------------
# Requirements (Requires-Dist strings)
# --------------------------------------------------------------------------------------------------

_REQ_RE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(\(?[^;]*\)?)?\s*(?:;\s*(.*))?$")


@dataclass(frozen=True)
class Requirement:
    name: str
    specs: tuple[tuple[str, str], ...]
    marker: str
    raw: str


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_requirement(raw: str) -> Requirement | None:
    m = _REQ_RE.match(raw)
    if m is None:
        return None
    spec_text = (m.group(3) or "").strip()
    try:
        specs = tuple(parse_specifiers(spec_text)) if spec_text else ()
    except ValueError:
        specs = ()
    return Requirement(canonical(m.group(1)), specs, (m.group(4) or "").strip(), raw.strip())


def base_requirements(requires_dist: Sequence[str], python: str | None = None) -> list[Requirement]:
    """The requirements that apply without extras (``extra == ...`` markers dropped), for ``python``."""
    out: list[Requirement] = []
    for raw in requires_dist:
        req = parse_requirement(raw)
        if req is None or "extra" in req.marker:
            continue
        if req.marker and python is not None and not _marker_python_ok(req.marker, python):
            continue
        out.append(req)
    return out


_MARKER_PY_RE = re.compile(r"python_(?:full_)?version\s*(<=|>=|==|!=|<|>)\s*['\"]([^'\"]+)['\"]")


def _marker_python_ok(marker: str, python: str) -> bool:
    """Evaluate the python_version clauses of an ``and``-only marker; other clauses count as true."""
    if " or " in marker:
        return True
    for op, target in _MARKER_PY_RE.findall(marker):
        if not satisfies(python + ".0" if op in ("<", "<=", ">", ">=") else python, [(op, target)]):
            return False
    return True


def requirement_of(requires_dist: Sequence[str], name: str, python: str | None = None) -> list[Requirement]:
    want = canonical(name)
    return [r for r in base_requirements(requires_dist, python) if r.name == want]


def spec_text(reqs: Sequence[Requirement]) -> str | None:
    if not reqs:
        return None
    parts = [f"{op}{t}" for r in reqs for op, t in r.specs]
    return ",".join(parts) if parts else ""


# --------------------------------------------------------------------------------------------------
# PyPI
# --------------------------------------------------------------------------------------------------


def _get(url: str, headers: Mapping[str, str] | None = None) -> tuple[int, bytes, Mapping[str, str]]:
    req = urllib.request.Request(url, headers={"User-Agent": USER_AGENT, **(headers or {})})
    with urllib.request.urlopen(req, timeout=TIMEOUT) as resp:
        return int(resp.status), resp.read(), dict(resp.headers.items())


@cache
def project(name: str) -> dict[str, Any]:
    """The project's JSON (every release with its files); one request per project."""
    url = f"{PYPI}/pypi/{name}/json"
    _status, body, _ = _get(url)
    data: dict[str, Any] = json.loads(body)
    for files in data.get("releases", {}).values():
        for f in files:
            f["url"] = urllib.parse.urljoin(url, f["url"])
    return data


def release_files(name: str, version: str) -> list[dict[str, Any]]:
    files: list[dict[str, Any]] = project(name)["releases"].get(version, [])
    return [f for f in files if not f.get("yanked")]


def releases(name: str, include_pre: bool = False) -> list[str]:
    """The project's versions with at least one non-yanked file, oldest first."""
    out = []
    for v, files in project(name)["releases"].items():
        pv = parse_version(v)
        if pv is None or not any(not f.get("yanked") for f in files):
            continue
        if pv.is_prerelease and not include_pre:
            continue
        out.append(v)
    return sorted(out, key=vkey)


_WHEEL_RE = re.compile(
    r"^(?P<name>[^-]+)-(?P<ver>[^-]+)(?:-\d[^-]*)?-(?P<py>[^-]+)-(?P<abi>[^-]+)-(?P<plat>[^-]+)\.whl$"
)


def _wheel_serves(filename: str, python: str) -> bool:
    m = _WHEEL_RE.match(filename)
    if m is None:
        return False
    plats = m.group("plat").split(".")
    if not any(("manylinux" in p and p.endswith("x86_64")) or p == "any" for p in plats):
        return False
    want = "cp" + python.replace(".", "")
    abis = m.group("abi").split(".")
    for tag in m.group("py").split("."):
        if tag == want and any(a in (want, want + "m", "abi3", "none") for a in abis):
            return True
        if tag.startswith("cp") and "abi3" in abis and tag[2:].isdigit():
            have = (int(tag[2]), int(tag[3:] or 0))
            major, minor = (int(x) for x in python.split("."))
            if have <= (major, minor) and have[0] == major:
                return True
        if tag in ("py3", "py2.py3", f"py{python.replace('.', '')}") and abis == ["none"]:
            return True
    return False


def wheel_pythons(name: str, version: str, pythons: Sequence[str] = PYTHONS, binary_only: bool = True) -> list[str]:
    """The Pythons of ``pythons`` with a manylinux x86_64 wheel (``binary_only``: not a pure ``none-any``)."""
    out = []
    for py in pythons:
        for f in release_files(name, version):
            fn = f["filename"]
            if not fn.endswith(".whl") or (binary_only and fn.endswith("-any.whl")):
                continue
            if _wheel_serves(fn, py) and python_allows(f.get("requires_python"), py):
                out.append(py)
                break
    return out


def installable_pythons(name: str, version: str, pythons: Sequence[str] = PYTHONS) -> list[str]:
    """The Pythons that can install the release from a wheel (binary or pure), without building."""
    return wheel_pythons(name, version, pythons, binary_only=False)


def _range(url: str, start: int, length: int) -> bytes:
    status, body, _ = _get(url, {"Range": f"bytes={start}-{start + length - 1}"})
    if status != 206:
        raise OSError(f"{url}: the server ignored the Range header (status {status})")
    return body


def _wheel_metadata_remote(url: str, size: int) -> str:
    """Read ``*.dist-info/METADATA`` out of a remote wheel with range requests."""
    tail_len = min(size, 65536 + 22)
    tail = _range(url, size - tail_len, tail_len)
    eocd = tail.rfind(b"PK\x05\x06")
    if eocd < 0:
        raise OSError(f"{url}: no end of central directory in the last {tail_len} bytes")
    cd_size, cd_offset = struct.unpack("<II", tail[eocd + 12 : eocd + 20])
    if cd_offset == 0xFFFFFFFF or cd_size == 0xFFFFFFFF:  # zip64: the locator sits just before the EOCD
        loc = tail.rfind(b"PK\x06\x07", 0, eocd)
        (z64_offset,) = struct.unpack("<Q", tail[loc + 8 : loc + 16])
        z64 = _range(url, z64_offset, 56)
        cd_size, cd_offset = struct.unpack("<QQ", z64[40:56])
    start_in_tail = cd_offset - (size - tail_len)
    cd = tail[start_in_tail : start_in_tail + cd_size] if start_in_tail >= 0 else _range(url, cd_offset, cd_size)
    pos = 0
    while pos + 46 <= len(cd) and cd[pos : pos + 4] == b"PK\x01\x02":
        (method,) = struct.unpack("<H", cd[pos + 10 : pos + 12])
        csize, usize, nlen, elen, clen = struct.unpack("<IIHHH", cd[pos + 20 : pos + 34])
        (lho,) = struct.unpack("<I", cd[pos + 42 : pos + 46])
        fname = cd[pos + 46 : pos + 46 + nlen].decode("utf-8", "replace")
        extra = cd[pos + 46 + nlen : pos + 46 + nlen + elen]
        if fname.endswith(".dist-info/METADATA") and fname.count("/") == 1:
            if csize == 0xFFFFFFFF or lho == 0xFFFFFFFF:
                i = 0
                while i + 4 <= len(extra):
                    hid, hlen = struct.unpack("<HH", extra[i : i + 4])
                    if hid == 1:
                        vals = list(struct.unpack(f"<{hlen // 8}Q", extra[i + 4 : i + 4 + hlen]))
                        if usize == 0xFFFFFFFF:
                            vals.pop(0)
                        if csize == 0xFFFFFFFF:
                            csize = vals.pop(0)
                        if lho == 0xFFFFFFFF:
                            lho = vals.pop(0)
                    i += 4 + hlen
            head = _range(url, lho, 30)
            lnlen, lelen = struct.unpack("<HH", head[26:30])
            data = _range(url, lho + 30 + lnlen + lelen, csize)
            raw = zlib.decompress(data, -15) if method == 8 else data
            return raw.decode("utf-8", "replace")
        pos += 46 + nlen + elen + clen
    raise OSError(f"{url}: no .dist-info/METADATA in the central directory")


def _sdist_metadata(url: str) -> tuple[str, list[str]]:
    """PKG-INFO and the ``requires.txt`` requirements (as Requires-Dist strings) of a small sdist."""
    _status, body, _ = _get(url)
    pkg_info = ""
    requires: list[str] = []
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:*") as tar:
        for member in tar.getmembers():
            parts = member.name.split("/")
            if len(parts) == 2 and parts[1] == "PKG-INFO":
                fh = tar.extractfile(member)
                pkg_info = fh.read().decode("utf-8", "replace") if fh else ""
            elif parts[-1] == "requires.txt" and parts[-2].endswith(".egg-info") and not requires:
                fh = tar.extractfile(member)
                requires = _requires_txt(fh.read().decode("utf-8", "replace") if fh else "")
    return pkg_info, requires


def _requires_txt(text: str) -> list[str]:
    """setuptools' ``requires.txt`` (``[extra:marker]`` sections) as Requires-Dist strings."""
    out: list[str] = []
    extra, marker = "", ""
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("["):
            section = line.strip("[]")
            extra, _, marker = section.partition(":")
            continue
        conds = [f'extra == "{extra}"'] if extra else []
        if marker:
            conds.append(marker)
        out.append(line + ("; " + " and ".join(conds) if conds else ""))
    return out


@dataclass(frozen=True)
class Metadata:
    requires_dist: tuple[str, ...]
    requires_python: str | None
    classifiers_python: tuple[str, ...]
    source: str  # the file it was read from


@cache
def metadata(name: str, version: str) -> Metadata | None:
    """One release's core metadata, from one of its files: a manylinux x86_64 wheel, else any wheel, else the
    sdist."""
    files = release_files(name, version)
    wheels = [f for f in files if f["filename"].endswith(".whl")]
    wheels.sort(key=lambda f: (not ("manylinux" in f["filename"] and "x86_64" in f["filename"]), f["size"]))
    sdists = [f for f in files if f["filename"].endswith((".tar.gz", ".tgz", ".tar.bz2"))]
    text: str | None = None
    extra_reqs: list[str] = []
    source = ""
    for f in wheels[:2]:
        try:
            text, source = _wheel_metadata_remote(f["url"], int(f["size"])), f["filename"]
            break
        except (OSError, urllib.error.URLError, zlib.error, struct.error) as exc:
            print(f"warning: {f['filename']}: {exc}", file=sys.stderr)
    if text is None and sdists and int(sdists[0]["size"]) < 20 * 1024 * 1024:
        text, extra_reqs = _sdist_metadata(sdists[0]["url"])
        source = sdists[0]["filename"]
    if text is None:
        return None
    msg = HeaderParser().parsestr(text)
    reqs = list(msg.get_all("Requires-Dist") or []) or extra_reqs
    rp = msg.get("Requires-Python") or next((f.get("requires_python") for f in files if f.get("requires_python")), None)
    classifiers = msg.get_all("Classifier") or []
    pys = tuple(
        c.rsplit("::", 1)[1].strip()
        for c in classifiers
        if c.startswith("Programming Language :: Python :: 3.") and c.count("::") == 2
    )
    return Metadata(tuple(r.strip() for r in reqs), str(rp) if rp else None, pys, source)


def newest_satisfying(name: str, specs: Sequence[tuple[str, str]], python: str, need_wheel: bool = True) -> str | None:
    """The newest final release of ``name`` within ``specs`` that ``python`` can install from a wheel."""
    for v in reversed(releases(name)):
        if not satisfies(v, specs):
            continue
        if need_wheel and python not in installable_pythons(name, v, (python,)):
            continue
        return v
    return None


# --------------------------------------------------------------------------------------------------
# The SDK's image config
# --------------------------------------------------------------------------------------------------


def image_uri_config_dir() -> Path:
    env = os.environ.get("SAGEMAKER_IMAGE_URI_CONFIG")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parents[1]
    for site in sorted(here.glob(".venv/lib/python3*/site-packages")):
        cand = site / "sagemaker" / "image_uri_config"
        if (cand / "pytorch.json").is_file():
            return cand
    spec = importlib.util.find_spec("sagemaker")
    if spec is not None and spec.origin:
        cand = Path(spec.origin).parent / "image_uri_config"
        if (cand / "pytorch.json").is_file():
            return cand
    raise SystemExit("no sagemaker/image_uri_config found: set SAGEMAKER_IMAGE_URI_CONFIG")


def sdk_training_versions(framework: str, config_dir: Path) -> dict[str, dict[str, Any]]:
    """Full version -> {"sdk_py_versions", "sdk_aliases"} for the SDK's training scope, oldest first."""
    config = json.loads((config_dir / f"{framework}.json").read_text())["training"]
    aliases: dict[str, str] = config.get("version_aliases", {})
    out: dict[str, dict[str, Any]] = {}
    for full in sorted(config["versions"], key=vkey):
        if not at_least(full, MIN_VERSION[framework]):
            continue
        entry = config["versions"][full]
        out[full] = {
            "sdk_py_versions": list(entry.get("py_versions", [])),
            "sdk_aliases": sorted(a for a, target in aliases.items() if target == full),
        }
    for alias, target in aliases.items():
        if at_least(target, MIN_VERSION[framework]) and target not in out:
            raise SystemExit(f"{framework}: alias {alias} -> {target}, which the SDK does not list")
    return out


# --------------------------------------------------------------------------------------------------
# PyTorch
# --------------------------------------------------------------------------------------------------


def _pins_torch(name: str, version: str, torch: str) -> bool:
    """Whether the release's wheel requires exactly ``torch`` (``torch==V``)."""
    md = metadata(name, version)
    if md is None:
        return False
    return any(
        any(op == "==" for op, _ in r.specs) and satisfies(torch, r.specs)
        for r in requirement_of(md.requires_dist, "torch")
    )


def _companion_candidates(name: str, torch: str) -> list[str]:
    """Releases of torchvision / torchaudio that could pin ``torch``, likeliest first (no bulk look-ups)."""
    t = parse_version(torch)
    assert t is not None
    major, minor, patch = t.padded(3)[:3]
    if name == "torchvision":
        series = (0, minor + 15) if major == 2 else (0, minor + 1)
    else:
        series = (major, minor) if (major, minor) >= (2, 1) else ((2, 0) if major == 2 else (0, minor))
    same = [v for v in releases(name) if vkey(v).padded(2)[:2] == series]
    # patch releases track torch's patch (torch 2.0.1 <-> torchaudio 2.0.2): nearest first
    return sorted(same, key=lambda v: (abs(vkey(v).padded(3)[2] - patch), vkey(v).padded(3)[2]))


def find_companion(name: str, torch: str, known: str | None) -> tuple[str | None, str]:
    """(release, how it was found). ``known`` is checked first against the release's own torch pin."""
    if known is not None and known in project(name)["releases"] and _pins_torch(name, known, torch):
        return known, "known pairing, verified: its wheel requires torch==" + torch
    for cand in _companion_candidates(name, torch)[:4]:
        if cand != known and _pins_torch(name, cand, torch):
            return cand, "found: its wheel requires torch==" + torch
    if known is not None and known in project(name)["releases"]:
        return known, "known pairing; its wheel does not pin torch==" + torch
    return None, "none found"


def pytorch_entry(version: str, sdk: dict[str, Any]) -> dict[str, Any]:
    tv_known, ta_known = KNOWN_COMPANIONS.get(version, (None, None))
    tv, tv_how = find_companion("torchvision", version, tv_known)
    ta, ta_how = find_companion("torchaudio", version, ta_known)
    torch_pys = wheel_pythons("torch", version)
    tv_pys = wheel_pythons("torchvision", tv) if tv else []
    ta_pys = wheel_pythons("torchaudio", ta) if ta else []
    torch_md = metadata("torch", version)
    numpy2 = vkey(version).padded(2)[:2] >= TORCH_NUMPY2_FROM
    entry: dict[str, Any] = {
        **sdk,
        "wheel_pythons": torch_pys,
        "torchvision": tv,
        "torchvision_check": tv_how,
        "torchvision_wheel_pythons": tv_pys,
        "torchaudio": ta,
        "torchaudio_check": ta_how,
        "torchaudio_wheel_pythons": ta_pys,
        "companion_wheel_pythons": [p for p in torch_pys if p in tv_pys and p in ta_pys],
        "numpy_constraint": None if numpy2 else "<2",
        "pypi_wheel_cuda_deps": sorted(
            {r.name for r in base_requirements(torch_md.requires_dist) if r.name.startswith("nvidia-")}
        )
        if torch_md
        else None,
    }
    entry["toolkit_pins"] = {
        py: pick_toolkit("pytorch", py, {"numpy": [("<", "2")] if not numpy2 else []})
        for py in entry["companion_wheel_pythons"]
    }
    return entry


# --------------------------------------------------------------------------------------------------
# TensorFlow
# --------------------------------------------------------------------------------------------------


def tensorflow_entry(version: str, sdk: dict[str, Any], horovod: str) -> dict[str, Any]:
    md = metadata("tensorflow", version)
    reqs = md.requires_dist if md else ()
    pys = wheel_pythons("tensorflow", version)
    keras = requirement_of(reqs, "keras")
    # Keras 3 when the keras requirement has a lower bound (or pin) at 3 or above: TF 2.16 asks keras>=3.0.0
    keras3 = any(op in (">=", ">", "~=", "==") and vkey(t).release[0] >= 3 for r in keras for op, t in r.specs)
    entry: dict[str, Any] = {
        **sdk,
        "wheel_pythons": pys,
        "requires_numpy": {py: spec_text(requirement_of(reqs, "numpy", py)) for py in pys},
        "requires_protobuf": spec_text(requirement_of(reqs, "protobuf")),
        "requires_keras": spec_text(keras),
        "keras3": keras3,
        "horovod": horovod,
        "horovod_keras_ok": not keras3,
        "horovod_note": (
            "Keras 3 (TF >= 2.16): horovod.tensorflow.keras targets the Keras 2 optimizer API and breaks; "
            "the C++ ops may still build, but horovod has no release after 0.28.1 (2023-06)"
            if keras3
            else "Keras 2: horovod's TF build handles TF >= 2.10 (C++17) and 2.12 (libtensorflow_cc.so); "
            "sdist only: needs cmake, g++ and MPI or Gloo at image build time"
        ),
    }
    constraints_by_py: dict[str, dict[str, list[tuple[str, str]]]] = {}
    for py in pys:
        constraints_by_py[py] = {
            "numpy": [s for r in requirement_of(reqs, "numpy", py) for s in r.specs],
            "protobuf": [s for r in requirement_of(reqs, "protobuf", py) for s in r.specs],
        }
    entry["toolkit_pins"] = {py: pick_toolkit("tensorflow", py, constraints_by_py[py]) for py in pys}
    return entry


# --------------------------------------------------------------------------------------------------
# Toolkits
# --------------------------------------------------------------------------------------------------


def toolkit_releases(name: str) -> list[str]:
    return [v for v in releases(name) if at_least(v, TOOLKIT_MIN[name])]


def _specs(reqs: Sequence[Requirement]) -> list[tuple[str, str]]:
    return [s for r in reqs for s in r.specs]


def pick_toolkit(framework: str, python: str, framework_constraints: Mapping[str, list[tuple[str, str]]]) -> Any:
    """Newest framework toolkit, then newest sagemaker-training it allows, whose numpy / protobuf requirements
    meet the framework's and have a wheel for ``python``. A dict of pins, or {"error": ...}."""
    toolkit = FRAMEWORK_TOOLKIT[framework]
    tried: list[str] = []
    for tk in reversed(toolkit_releases(toolkit)):
        tk_md = metadata(toolkit, tk)
        if tk_md is None or not python_allows(tk_md.requires_python, python):
            continue
        tk_training = _specs(requirement_of(tk_md.requires_dist, "sagemaker-training", python))
        tk_numpy = _specs(requirement_of(tk_md.requires_dist, "numpy", python))
        for st in reversed(toolkit_releases("sagemaker-training")):
            if not satisfies(st, tk_training):
                continue
            st_md = metadata("sagemaker-training", st)
            if st_md is None or not python_allows(st_md.requires_python, python):
                continue
            pins: dict[str, Any] = {toolkit: tk, "sagemaker-training": st}
            ok = True
            for dep in ("numpy", "protobuf"):
                specs = (
                    list(framework_constraints.get(dep, []))
                    + (tk_numpy if dep == "numpy" else [])
                    + _specs(requirement_of(st_md.requires_dist, dep, python))
                )
                found = newest_satisfying(dep, specs, python)
                if found is None:
                    tried.append(
                        f"{toolkit} {tk} + sagemaker-training {st}: no {dep} wheel for {python} in "
                        + (",".join(o + t for o, t in specs) or "any")
                    )
                    ok = False
                    break
                pins[dep] = found
            if ok:
                return pins
    return {"error": "; ".join(tried[:3]) or f"no {toolkit} release for {python}"}


def toolkit_entry(name: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for v in toolkit_releases(name):
        md = metadata(name, v)
        if md is None:
            continue
        base = base_requirements(md.requires_dist)
        out[v] = {
            "requires_dist": [r.raw for r in base],
            "requires_python": md.requires_python,
            "classifier_pythons": list(md.classifiers_python),
            "upload_date": min((f["upload_time"][:10] for f in release_files(name, v)), default=None),
            "wheel": any(f["filename"].endswith(".whl") for f in release_files(name, v)),
        }
    return out


def numpy_summary() -> dict[str, Any]:
    out: dict[str, Any] = {}
    finals = releases("numpy")
    for py in PYTHONS:
        have = [v for v in finals if py in wheel_pythons("numpy", v, (py,))]
        below2 = [v for v in have if vkey(v).release[0] < 2]
        out[py] = {
            "oldest_wheel": have[0] if have else None,
            "newest_wheel": have[-1] if have else None,
            "newest_below_2": below2[-1] if below2 else None,
            "newest_below_1_24": next((v for v in reversed(have) if satisfies(v, [("<", "1.24")])), None),
        }
    return out


def mpi4py_summary() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for v in releases("mpi4py"):
        if not at_least(v, (3, 1)):
            continue
        files = release_files("mpi4py", v)
        out[v] = {
            "wheel_pythons": wheel_pythons("mpi4py", v),
            "requires_python": next((f.get("requires_python") for f in files if f.get("requires_python")), None),
            "sdist": any(f["filename"].endswith(".tar.gz") for f in files),
        }
    first = {py: next((v for v, e in out.items() if py in e["wheel_pythons"]), None) for py in PYTHONS}
    return {"releases": out, "first_wheel": first}


def horovod_summary() -> dict[str, Any]:
    latest = releases("horovod")[-1]
    files = release_files("horovod", latest)
    return {
        "latest": latest,
        "upload_date": min((f["upload_time"][:10] for f in files), default=None),
        "wheels": any(f["filename"].endswith(".whl") for f in files),
        "requires_python": next((f.get("requires_python") for f in files if f.get("requires_python")), None),
    }


# --------------------------------------------------------------------------------------------------


def build_table() -> dict[str, Any]:
    config_dir = image_uri_config_dir()
    hvd = horovod_summary()
    table: dict[str, Any] = {"pytorch": {}, "tensorflow": {}}
    for v, sdk in sdk_training_versions("pytorch", config_dir).items():
        print(f"pytorch {v}", file=sys.stderr)
        table["pytorch"][v] = pytorch_entry(v, sdk)
    for v, sdk in sdk_training_versions("tensorflow", config_dir).items():
        print(f"tensorflow {v}", file=sys.stderr)
        table["tensorflow"][v] = tensorflow_entry(v, sdk, hvd["latest"])
    print("toolkits", file=sys.stderr)
    table["toolkits"] = {
        name: {"all_versions": releases(name), "releases": toolkit_entry(name)}
        for name in ("sagemaker-training", "sagemaker-pytorch-training", "sagemaker-tensorflow-training")
    }
    table["toolkits"].update(
        {
            "horovod": hvd,
            "mpi4py": mpi4py_summary(),
            "numpy": numpy_summary(),
            "picks_by_python": picks_by_python(table),
        }
    )
    table["meta"] = {
        "pythons": list(PYTHONS),
        "sdk_image_uri_config": str(config_dir),
        "sdk_version": _sdk_version(config_dir),
        "scope": "training; pytorch >= 1.8, tensorflow >= 2.4",
        "wheel_rule": "manylinux x86_64 wheel with the cpXY tag (or abi3 / py3-none) on PyPI, not yanked",
    }
    return table


def picks_by_python(table: Mapping[str, Any]) -> dict[str, Any]:
    """Per Python and framework: the toolkit pin sets chosen, each with the framework versions it serves."""
    out: dict[str, Any] = {}
    for py in PYTHONS:
        per_fw: dict[str, Any] = {}
        for fw in ("pytorch", "tensorflow"):
            groups: dict[str, dict[str, Any]] = {}
            for v in sorted(table[fw], key=vkey):
                pins = table[fw][v]["toolkit_pins"].get(py)
                if pins is None:
                    continue
                key = json.dumps(pins, sort_keys=True)
                groups.setdefault(key, {"pins": pins, "versions": []})["versions"].append(v)
            per_fw[fw] = list(groups.values())
        out[py] = per_fw
    return out


def _sdk_version(config_dir: Path) -> str | None:
    for info in config_dir.parents[1].glob("sagemaker-*.dist-info/METADATA"):
        if info.parent.name.startswith("sagemaker-") and not info.parent.name.startswith("sagemaker_"):
            head = HeaderParser().parsestr(info.read_text(errors="replace"))
            if head.get("Name", "").lower() == "sagemaker":
                return head.get("Version")
    return None


def main(argv: Sequence[str]) -> int:
    table = build_table()
    text = json.dumps(table, indent=2, sort_keys=True) + "\n"
    if len(argv) > 1:
        Path(argv[1]).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
