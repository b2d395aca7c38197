"""The default training image, built offline against the real Docker engine (images/README.md).

The first `build_default_image` call may take a couple of minutes on a machine that has never built
the image (mmdebstrap + pip wheel + docker build); later calls find the image up to date.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import docker
import docker.errors
import pytest

from emulator.backend.image import (
    RECIPE_LABEL,
    BuildReport,
    build_default_image,
    debian_mirrors,
    image_present,
    parse_apt_sources,
    recipe_hash,
)
from emulator.defaults import DEFAULT_IMAGE

# Every container started here carries this label, so a crashed run's leftovers are findable.
TEST_LABEL = {"hetero-emu.test": "test_image"}


@pytest.fixture(scope="module")
def client(docker_client: object) -> docker.DockerClient:
    # conftest's docker_client skips without an engine, or fails when CI requires one.
    assert isinstance(docker_client, docker.DockerClient)
    return docker_client


@pytest.fixture(scope="module")
def report(client: docker.DockerClient) -> BuildReport:
    # Idempotent: builds on a fresh machine, returns at once when the image is up to date.
    return build_default_image(client, progress=print)


def run_in_image(client: docker.DockerClient, *command: str) -> tuple[int, str]:
    """Run `command` in the default image without network; (exit code, stdout+stderr)."""
    container = client.containers.run(
        DEFAULT_IMAGE, list(command), detach=True, network_disabled=True, labels=TEST_LABEL
    )
    try:
        code = int(container.wait(timeout=120)["StatusCode"])
        return code, container.logs().decode("utf-8", "replace")
    finally:
        container.remove(force=True)


@pytest.mark.docker
def test_image_exists_with_recipe_label(client: docker.DockerClient, report: BuildReport) -> None:
    assert report.image == DEFAULT_IMAGE
    assert image_present(client, DEFAULT_IMAGE)
    image = client.images.get(DEFAULT_IMAGE)
    assert image.labels[RECIPE_LABEL] == recipe_hash()
    assert report.size_bytes == image.attrs["Size"] > 0


@pytest.mark.docker
def test_image_config(client: docker.DockerClient, report: BuildReport) -> None:
    config = client.images.get(DEFAULT_IMAGE).attrs["Config"]
    env = dict(item.split("=", 1) for item in config["Env"])
    assert env["PYTHONUNBUFFERED"] == "1"
    assert env["PATH"].split(":")[0] == "/opt/venv/bin"
    assert config["WorkingDir"] == "/opt/ml/code"
    assert config["Cmd"] == ["train"]


@pytest.mark.docker
def test_toolkit_imports(client: docker.DockerClient, report: BuildReport) -> None:
    code, out = run_in_image(client, "python", "-c", "import sagemaker_training, numpy; print('ok')")
    assert (code, out.strip()) == (0, "ok"), out


@pytest.mark.docker
def test_train_is_on_path_from_the_venv(client: docker.DockerClient, report: BuildReport) -> None:
    code, out = run_in_image(client, "which", "train")
    assert code == 0, out
    assert out.strip().startswith("/opt/venv/bin/"), out


@pytest.mark.docker
def test_python_is_311(client: docker.DockerClient, report: BuildReport) -> None:
    code, out = run_in_image(client, "python", "-c", "import sys; print(sys.version_info[:2])")
    assert (code, out.strip()) == (0, "(3, 11)"), out


@pytest.mark.docker
def test_opt_ml_exists(client: docker.DockerClient, report: BuildReport) -> None:
    code, out = run_in_image(client, "sh", "-c", "pwd && test -d /opt/ml/input && test -d /opt/ml/model")
    assert (code, out.strip()) == (0, "/opt/ml/code"), out


# Runs inside the image. Prints a JSON list of problems (empty when the CA setup is Debian's own).
_CA_CHECK = r"""
import hashlib, json, os, re, subprocess, sys
host_hashes = set(json.loads(sys.argv[1]))
host_local_pems = set(json.loads(sys.argv[2]))
problems = []
def pems(path):
    with open(path, "rb") as f:
        text = f.read().decode("ascii", "replace")
    return set(re.findall(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", text, re.S))
# 1. Locally added CAs are what a copy of the host's trust store would bring along.
local = "/usr/local/share/ca-certificates"
if os.path.isdir(local) and os.listdir(local):
    problems.append(f"{local} is not empty: {sorted(os.listdir(local))}")
# 2. The system bundle, if any, must hold only certificates shipped by Debian's ca-certificates.
bundle = "/etc/ssl/certs/ca-certificates.crt"
if os.path.exists(bundle):
    debian = set()
    for root, _, files in os.walk("/usr/share/ca-certificates"):
        for name in files:
            debian |= pems(os.path.join(root, name))
    foreign = pems(bundle) - debian
    if foreign:
        problems.append(f"{len(foreign)} certificates in {bundle} are not from Debian's package")
    if pems(bundle) & host_local_pems:
        problems.append(f"{bundle} holds certificates the host added locally")
    # dpkg -V lists changed files; "missing" ones are docs the image leaves out on purpose.
    verify = subprocess.run(["dpkg", "-V", "ca-certificates"], capture_output=True, text=True)
    changed = [l for l in verify.stdout.splitlines() if l.strip() and not l.startswith("missing")]
    if changed or verify.stderr.strip():
        problems.append(f"dpkg -V ca-certificates: {changed or verify.stderr.strip()}")
# 3. Nothing outside Debian's paths is byte-identical to a host CA bundle.
for top in ("/opt", "/usr/local", "/root", "/tmp"):
    for root, _, files in os.walk(top):
        for name in files:
            path = os.path.join(root, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            with open(path, "rb") as f:
                if hashlib.sha256(f.read()).hexdigest() in host_hashes:
                    problems.append(f"{path} is a copy of a host CA bundle")
print(json.dumps(problems))
"""


def _host_ca_fingerprints() -> tuple[list[str], list[str]]:
    """sha256 of the host's CA bundles, and the PEM blocks of CAs added locally on the host."""
    hashes: set[str] = set()
    for bundle in (Path("/etc/ssl/certs/ca-certificates.crt"), Path("/etc/pki/tls/certs/ca-bundle.crt")):
        if bundle.is_file():
            hashes.add(hashlib.sha256(bundle.read_bytes()).hexdigest())
    local: set[str] = set()
    local_dir = Path("/usr/local/share/ca-certificates")
    if local_dir.is_dir():
        for path in local_dir.rglob("*.crt"):
            text = path.read_text(encoding="ascii", errors="replace")
            begin, end = "-----BEGIN CERTIFICATE-----", "-----END CERTIFICATE-----"
            for chunk in text.split(begin)[1:]:
                local.add(begin + chunk.split(end, 1)[0] + end)
    return sorted(hashes), sorted(local)


@pytest.mark.docker
def test_no_host_ca_certificates_in_image(client: docker.DockerClient, report: BuildReport) -> None:
    hashes, local = _host_ca_fingerprints()
    code, out = run_in_image(client, "python3", "-c", _CA_CHECK, json.dumps(hashes), json.dumps(local))
    assert code == 0, out
    assert json.loads(out.strip().splitlines()[-1]) == []


@pytest.mark.docker
def test_second_call_is_skipped_quickly(client: docker.DockerClient, report: BuildReport) -> None:
    lines: list[str] = []
    started = time.monotonic()
    again = build_default_image(client, progress=lines.append)
    elapsed = time.monotonic() - started
    assert not again.built
    assert again.steps == ()
    assert elapsed < 10, f"an up-to-date image took {elapsed:.1f}s"
    assert again.size_bytes == client.images.get(DEFAULT_IMAGE).attrs["Size"]
    assert any("up to date" in line for line in lines), lines


def test_mirror_is_read_from_deb822_sources() -> None:
    # The shape of Debian's own /etc/apt/sources.list.d/debian.sources; the host name is made up.
    text = (
        "Types: deb\n"
        "# a comment\n"
        "URIs: http://mirror.invalid/debian\n"
        "Suites: bookworm bookworm-updates bookworm-backports\n"
        "Components: main\n"
        "\n"
        "Types: deb\n"
        "URIs: http://mirror.invalid/debian-security\n"
        "Suites: bookworm-security\n"
        "Components: main\n"
        "\n"
        "Types: deb-src\n"
        "URIs: http://src.invalid/debian\n"
        "Suites: bookworm\n"
        "Components: main\n"
    )
    lines = [s.line() for s in debian_mirrors(parse_apt_sources({"debian.sources": text}))]
    assert lines == [
        "deb http://mirror.invalid/debian bookworm main",
        "deb http://mirror.invalid/debian bookworm-updates main",
        "deb http://mirror.invalid/debian-security bookworm-security main",
    ]


def test_mirror_of_another_debian_release_is_reused_for_bookworm() -> None:
    text = "deb [signed-by=/k.gpg] http://mirror.invalid/debian trixie main contrib\n"
    sources = parse_apt_sources({"sources.list": text})
    assert [s.line() for s in debian_mirrors(sources)] == ["deb http://mirror.invalid/debian bookworm main"]
    assert debian_mirrors(parse_apt_sources({"x.list": "deb http://ubuntu.invalid/ubuntu noble main"})) == []
