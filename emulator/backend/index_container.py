"""A short-lived container that reaches the package index: where pip decides what an image needs.

A job's hosts never reach a network beyond the job's own, but two things must ask PyPI as the image
itself would: building a framework image (pip installs the framework into the image's own Python)
and building a job's requirements.txt wheelhouse (pip resolves the file against what the job's image
already has, for its Python and ABI). Both run pip in a container of the image on the engine's default
bridge network, which reaches whatever the host reaches.

The host may reach the index through a TLS-inspecting proxy whose CA only the host trusts: the host's
CA bundle (what its pip uses) is mounted read-only for that container alone and named in PIP_CERT, so
nothing of the host's trust ends up in an image (a bind mount is not part of a commit). pip's other
settings of the host that say where the index is (an index URL, a proxy, a timeout) are passed on.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import docker
import docker.errors

from emulator.backend import pip_output
from emulator.backend.calls import first_line
from emulator.backend.docker_http import read_timeout
from emulator.errors import EnvironmentProblem

#: Where the host's CA bundle is mounted in an index container.
CA_PATH = "/etc/hetero-emu/index-ca.pem"
#: The host's variables that say how to reach the index, passed on as they are.
PASSED_ON = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST", "PIP_DEFAULT_TIMEOUT", "PIP_RETRIES",
             "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")
#: The name of every index container starts so (it carries no label: a commit would copy it into the image).
NAME_PREFIX = "hetero-emu-index-"


@dataclass(frozen=True)
class Outcome:
    """How an index container ended: its exit code and its last output lines."""

    exit_code: int
    tail: tuple[str, ...] = field(default_factory=tuple)


def host_ca_bundle(environ: Mapping[str, str] | None = None) -> Path | None:
    """The CA bundle the host's pip verifies the index with: PIP_CERT, else SSL_CERT_FILE or
    REQUESTS_CA_BUNDLE, else OpenSSL's default file; None when none exists."""
    env = os.environ if environ is None else environ
    candidates = [env.get(name) for name in ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")]
    candidates.append(ssl.get_default_verify_paths().cafile)
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


def index_settings(environ: Mapping[str, str] | None = None) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """The environment and the bind mounts an index container gets so that its pip reaches the index
    as the host's does."""
    env = os.environ if environ is None else environ
    variables = {name: env[name] for name in PASSED_ON if env.get(name)}
    binds: dict[str, dict[str, str]] = {}
    bundle = host_ca_bundle(env)
    if bundle is not None:
        binds[str(bundle.resolve())] = {"bind": CA_PATH, "mode": "ro"}
        variables["PIP_CERT"] = CA_PATH
    variables["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    variables["PIP_NO_INPUT"] = "1"
    return variables, binds


def run(client: docker.DockerClient, image: str, command: Sequence[str], *, environment: Mapping[str, str],
        binds: Mapping[str, Mapping[str, str]], on_line: Callable[[str], None], tail_lines: int = 40,
        commit: Callable[[docker.models.containers.Container], None] | None = None,
        working_dir: str | None = None) -> Outcome:
    """Run `command` in a new container of `image` that reaches the index, each output line to `on_line`;
    `commit` (called only when the command exited 0) may commit the container before it is removed,
    which it always is. EnvironmentProblem when the engine refuses the container.

    The container's own configuration stays the image's: a commit merges it into the new image, so
    the variables are given on `env`'s command line, the folders as mounts (not volumes), and no label."""
    with read_timeout(client.api, None):
        return _run(client, image, command, environment=environment, binds=binds, on_line=on_line,
                    tail_lines=tail_lines, commit=commit, working_dir=working_dir)


def _run(client: docker.DockerClient, image: str, command: Sequence[str], *, environment: Mapping[str, str],
         binds: Mapping[str, Mapping[str, str]], on_line: Callable[[str], None], tail_lines: int,
         commit: Callable[[docker.models.containers.Container], None] | None, working_dir: str | None) -> Outcome:
    settings, index_binds = index_settings()
    mounts = [docker.types.Mount(target=spec["bind"], source=source, type="bind", read_only=spec.get("mode") == "ro")
              for source, spec in {**index_binds, **binds}.items()]
    variables = [f"{name}={value}" for name, value in sorted({**settings, **environment}.items())]
    try:
        container = client.containers.create(
            image, ["env", *variables, *command], mounts=mounts, name=NAME_PREFIX + uuid.uuid4().hex[:12],
            working_dir=working_dir, network_mode="bridge", detach=True)
    except docker.errors.DockerException as exc:
        raise EnvironmentProblem(f"cannot create a container of {image} to run pip in: {first_line(exc)}",
                                 hint="is the Docker engine running, and the image built?") from exc
    tail: deque[str] = deque(maxlen=tail_lines)
    try:
        container.start()
        pending = ""
        for chunk in container.logs(stream=True, follow=True):
            pending += chunk.decode("utf-8", errors="replace")
            *lines, pending = pending.split("\n")
            for line in lines:
                if line := line.rstrip("\r").rstrip():
                    tail.append(line)
                    on_line(line)
        if pending.strip():
            tail.append(pending.strip())
            on_line(pending.strip())
        code = int(container.wait().get("StatusCode", 1))
        if code == 0 and commit is not None:
            commit(container)
        return Outcome(code, tuple(tail))
    except BaseException:
        # Ctrl-C or a lost engine: pip must not go on in a container nobody watches.
        with contextlib.suppress(docker.errors.DockerException):
            container.kill()
        raise
    finally:
        with contextlib.suppress(docker.errors.DockerException):
            container.remove(force=True)


# Run by the image's own Python (the interpreter of its `train`, which runs the toolkit's pip): what
# `pip install -r requirements.txt` would install there, then exactly those, as wheels. Asked (a
# .as-for.json in `out`, emulator.run.wheelhouse) to resolve as for another Python, it first lets pip
# choose for that one (`--python-version` needs `--only-binary=:all:`) with the framework pins kept
# (a Hugging Face layer's too, unless the file needs them to move),
# then resolves on this Python with those choices as constraints; a choice that does not install
# here is dropped, and said, and pip chooses it for this Python.
_RESOLVE = r'''
import json, os, re, subprocess, sys, tempfile
out, package = sys.argv[1], sys.argv[2] == "1"
print("PYTHON %d.%d" % sys.version_info[:2], flush=True)
pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
scratch = tempfile.mkdtemp()
# An old source package's build may import pkg_resources, which setuptools 81 dropped.
BUILD = ["setuptools<81"]

def constraints(lines):
    path = os.path.join(scratch, "constraints-%d.txt" % len(os.listdir(scratch)))
    with open(path, "w") as f:
        f.write("".join(line + "\n" for line in lines))
    return path

def environment(pins=()):
    return dict(os.environ, PIP_CONSTRAINT=constraints(BUILD + list(pins)), PIP_BUILD_CONSTRAINT=constraints(BUILD))

def resolve(options, pins=()):
    # (pip's exit code, what it would install or None)
    report = os.path.join(scratch, "report.json")
    if os.path.exists(report):
        os.remove(report)
    code = subprocess.call(pip + ["install", "--dry-run", "--report", report] + options + ["-r", "requirements.txt"],
                           env=environment(pins))
    return code, (json.load(open(report)).get("install", []) if code == 0 else None)

def pin(item):
    return "%s==%s" % (item["metadata"]["name"], item["metadata"]["version"])

def key(name):
    return re.sub(r"[-_.]+", "-", name).lower()

def fetch(items, pins):
    chosen = {key(p) for p in pins}
    wanted = []
    for item in items:
        url = item.get("download_info", {}).get("url", "")
        wanted.append(url if item.get("is_direct") else pin(item))
        if not url.endswith(".whl"):
            print("SDIST %s%s" % (pin(item), " as-for" if key(pin(item)) in chosen else ""), flush=True)
    print("FETCH %d" % len(wanted), flush=True)
    if not wanted:
        return 0
    return subprocess.call(pip + ["wheel", "--no-deps", "--prefer-binary", "-w", out] + wanted, env=environment(pins))

request = os.path.join(out, ".as-for.json")
asked = json.load(open(request)) if os.path.exists(request) else None
pins, items = [], None
if asked:
    keep = asked["keep"]
    print("ASFOR %s %s" % (asked["python"], " ".join(keep)), flush=True)
    code, found = resolve(["--python-version", asked["python"], "--only-binary=:all:"], keep)
    core = asked.get("core")
    if found is None and core and core != keep:
        # pip on the service upgrades what the image has where the file asks for another version (a
        # Hugging Face image's datasets, its hub): only the framework's own pins stay fixed then.
        print("ASFOR_LAYER_MOVES %s" % " ".join(p for p in keep if p not in core), flush=True)
        keep = core
        code, found = resolve(["--python-version", asked["python"], "--only-binary=:all:"], keep)
    if found is None:
        print("ASFOR_NONE", flush=True)
    else:
        pins = [pin(i) for i in found if not i.get("is_direct")]
        print("ASFOR_CHOSEN " + " ".join(pins), flush=True)
        code, items = resolve(["--prefer-binary"], keep + pins)
        if items is None and pins:
            # Which choices do not install on this Python at all (no release file for it, or a
            # Requires-Python it fails): pip chooses those for this Python instead.
            bad = [p for p in pins if subprocess.call(pip + ["install", "--dry-run", "--quiet", "--no-deps",
                                                             "--ignore-installed", "--prefer-binary", p],
                                                      env=environment())]
            if bad:
                pins = [p for p in pins if p not in bad]
                code, items = resolve(["--prefer-binary"], keep + pins)
            if items is not None:
                here = {key(i["metadata"]["name"]): i["metadata"]["version"] for i in items}
                for p in bad:
                    print("ASFOR_NOT_HERE %s %s" % (p, here.get(key(p.split("==")[0]), "-")), flush=True)
        if items is None:
            print("ASFOR_CONFLICT", flush=True)
            pins = []
# The constraints the hosts' pip honours: those of the resolution as for the named Python, if it held.
honoured = keep + pins if asked and items is not None else []
fetched = False
if items is not None:
    code = fetch(items, pins)
    if code and not pins:
        sys.exit(code)
    if code:
        # A version chosen for the named Python that pip could not build here: this Python's choices.
        print("ASFOR_BUILD_FAILED", flush=True)
        for name in os.listdir(out):
            if name.endswith(".whl"):
                os.remove(os.path.join(out, name))
        pins, items, honoured = [], None, []
    fetched = items is not None
if items is None:
    print("RESOLVE", flush=True)
    code, items = resolve(["--prefer-binary"])
    if items is None:
        # "Not found" is also what pip says when it reached no index at all: ask the index itself.
        import ssl, urllib.request
        index = os.environ.get("PIP_INDEX_URL") or "https://pypi.org/simple/"
        try:
            context = ssl.create_default_context(cafile=os.environ.get("PIP_CERT") or None)
            urllib.request.urlopen(index.rstrip("/") + "/pip/", timeout=20, context=context).read(1)
        except Exception as err:
            print("INDEX_UNREACHABLE %s (%s)" % (index, err), flush=True)
        sys.exit(code)
if not fetched:
    code = fetch(items, [])
    if code:
        sys.exit(code)
if asked:
    # What the hosts' pip honours (PIP_CONSTRAINT): the framework pins and the versions chosen.
    with open(os.path.join(out, "constraints.txt"), "w") as f:
        f.write("# requirements.txt resolved as for Python %s\n" % asked["python"])
        f.write("".join(line + "\n" for line in honoured))
if package:
    # `pip install . -r requirements.txt` builds "." in isolation: its setuptools comes from here too.
    sys.exit(subprocess.call(pip + ["download", "--no-deps", "--only-binary=:all:", "-d", out,
                                    "setuptools<81", "wheel"], env=environment()))
'''
# The toolkit's pip is the one of the interpreter that runs `train`; python3 where there is none.
_WRAPPER = ('py=$(sed -n "1s/^#!//p" "$(command -v train 2>/dev/null)" 2>/dev/null); '
            '[ -x "${py%% *}" ] || py=python3; exec $py -c "$0" "$@"')
OUT = "/opt/hetero-emu/wheelhouse-out"


def build_wheelhouse(client: docker.DockerClient, image: str, code: Path, out: Path,
                     progress: Callable[[str], None], shown: str) -> None:
    """Resolve the requirements.txt in `code` in a container of `image` (which reaches the index) and
    put the wheels of what the image lacks into `out`. WheelhouseError naming the requirement, the
    image's Python and why (emulator.backend.pip_output.pip_failure)."""
    said = pip_output.ResolveLines(image, progress)
    package = (code / "setup.py").is_file()
    outcome = run(client, image, ["sh", "-c", _WRAPPER, _RESOLVE, OUT, "1" if package else "0"],
                  environment={}, binds={str(code): {"bind": "/opt/ml/code", "mode": "ro"},
                                         str(out): {"bind": OUT, "mode": "rw"}},
                  on_line=said, tail_lines=1, working_dir="/opt/ml/code")
    if outcome.exit_code != 0:
        raise pip_output.failure(shown, said.lines, said.python, outcome.exit_code)
