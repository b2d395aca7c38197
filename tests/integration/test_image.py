"""The default training image, built offline against the real Docker engine (images/README.md).

Besides the toolkit it carries MPI as the toolkit's MPI runner uses it (Open MPI's mpirun/orted, sshd,
mpi4py); the last test runs an allreduce across two containers with a per-job key folder mounted
read-only at /root/.ssh, the contract between the image and the runtime.

The first `build_default_image` call may take a couple of minutes on a machine that has never built
the image (mmdebstrap + pip wheel + docker build); later calls find the image up to date.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import subprocess
import time
import uuid
from pathlib import Path

import docker
import docker.errors
import pytest

from emulator.backend.image_build import (
    RECIPE_LABEL,
    BuildReport,
    build_default_image,
    debian_mirrors,
    image_present,
    parse_apt_sources,
    recipe_hash,
)
from emulator.defaults import DEFAULT_IMAGE
from emulator.training_images.image_recipes import image_launchers

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
    # Named, and removed by name: a busy engine can time out the client after it made the container.
    name = f"hetero-emu-test-image-{uuid.uuid4().hex[:12]}"
    try:
        container = client.containers.run(
            DEFAULT_IMAGE, list(command), name=name, detach=True, network_disabled=True, labels=TEST_LABEL
        )
        code = int(container.wait(timeout=120)["StatusCode"])
        return code, container.logs().decode("utf-8", "replace")
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            client.api.remove_container(name, force=True)


@pytest.mark.docker
def test_image_exists_with_recipe_label(client: docker.DockerClient, report: BuildReport) -> None:
    assert report.image == DEFAULT_IMAGE
    assert image_present(client, DEFAULT_IMAGE)
    image = client.images.get(DEFAULT_IMAGE)
    assert image.labels[RECIPE_LABEL] == recipe_hash()
    assert report.size_bytes == image.attrs["Size"] > 0


@pytest.mark.docker
def test_image_lists_its_launchers(client: docker.DockerClient, report: BuildReport) -> None:
    assert image_launchers(client.images.get(DEFAULT_IMAGE).labels) == {"mpirun", "sshd"}


@pytest.mark.docker
def test_mpi_tools_are_in_the_image(client: docker.DockerClient, report: BuildReport) -> None:
    # The toolkit runs `mpirun` on the master, `/usr/sbin/sshd -D` on workers and waits for a
    # process named `orted` there (sagemaker_training/mpi.py); ranks start as `python -m mpi4py`.
    code, out = run_in_image(client, "sh", "-c", "which mpirun orted ssh && ls /usr/sbin/sshd && test -d /run/sshd")
    assert code == 0, out
    assert out.split() == ["/usr/bin/mpirun", "/usr/bin/orted", "/usr/bin/ssh", "/usr/sbin/sshd"]
    # Importing mpi4py.MPI loads libmpi: the wheel's extension works against Debian's Open MPI.
    code, out = run_in_image(client, "python", "-c", "from mpi4py import MPI; print(MPI.Get_library_version())")
    assert code == 0, out
    assert "Open MPI v4.1" in out


@pytest.mark.docker
def test_no_ssh_host_key_is_baked_into_the_image(client: docker.DockerClient, report: BuildReport) -> None:
    code, out = run_in_image(client, "find", "/", "-xdev", "-name", "ssh_host_*")
    assert (code, out.strip()) == (0, "")
    # sshd reads its host key from the job's mount; check its effective settings with a throwaway key.
    code, out = run_in_image(
        client, "sh", "-c",
        "mkdir -p /root/.ssh && ssh-keygen -q -t ed25519 -N '' -f /root/.ssh/ssh_host_ed25519_key && sshd -T",
    )
    assert code == 0, out
    settings = set(out.lower().splitlines())
    assert {"hostkey /root/.ssh/ssh_host_ed25519_key", "usepam yes", "strictmodes no",
            "permitrootlogin without-password", "passwordauthentication no"} <= settings, out
    # PAM as in AWS's images: pam_loginuid (which cannot write /proc/self/loginuid in a container) is
    # optional, and pam_env still reads /etc/environment for the ranks mpirun starts over ssh.
    code, out = run_in_image(client, "cat", "/etc/pam.d/sshd")
    pam = [line.split() for line in out.splitlines() if line.strip() and not line.startswith("#")]
    assert ["session", "optional", "pam_loginuid.so"] in pam, out
    assert any(line[:3] == ["session", "required", "pam_env.so"] for line in pam), out


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


def _job_ssh_folder(folder: Path) -> Path:
    """The folder the runtime mounts read-only at /root/.ssh (images/README.md, MPI): made per job."""
    folder.mkdir()
    for name, comment in (("id_ed25519", "job"), ("ssh_host_ed25519_key", "host")):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(folder / name)],
                       check=True)
    (folder / "authorized_keys").write_text((folder / "id_ed25519.pub").read_text())
    (folder / "config").write_text(
        "Host *\n    StrictHostKeyChecking no\n    UserKnownHostsFile /dev/null\n    LogLevel ERROR\n")
    return folder


# Every rank allreduces rank+1; rank 0 alone prints what each rank got and where it ran (ranks
# printing at once would interleave their lines).
_ALLREDUCE = (
    "from mpi4py import MPI; c = MPI.COMM_WORLD; "
    "got = c.gather((MPI.Get_processor_name(), c.allreduce(c.Get_rank() + 1)), root=0); "
    "c.Get_rank() == 0 and print('ranks', got)"
)


@pytest.mark.docker
def test_mpirun_over_ssh_between_two_hosts(client: docker.DockerClient, report: BuildReport, tmp_path: Path) -> None:
    keys = _job_ssh_folder(tmp_path / "ssh")
    suffix = uuid.uuid4().hex[:8]
    network = client.networks.create(f"hetero-emu-test-mpi-{suffix}", labels=TEST_LABEL)
    containers = []
    try:
        for host in ("algo-1", "algo-2"):
            # The alias makes algo-N resolvable on the network, as the runtime's hosts are.
            endpoint = client.api.create_endpoint_config(aliases=[host])
            containers.append(client.containers.run(
                DEFAULT_IMAGE, ["sleep", "300"], detach=True, name=f"hetero-emu-test-{host}-{suffix}",
                hostname=host, network=network.name, networking_config={network.name: endpoint},
                labels=TEST_LABEL, volumes={str(keys): {"bind": "/root/.ssh", "mode": "ro"}},
            ))
        master, worker = containers
        # What the toolkit's workers do (sagemaker_training/mpi.py: _start_sshd_daemon).
        worker.exec_run(["/usr/sbin/sshd", "-D"], detach=True)
        deadline = time.monotonic() + 30
        while True:
            code, out = master.exec_run(["ssh", "algo-2", "hostname"])
            if code == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert (code, out.decode().strip()) == (0, "algo-2"), out
        code, out = master.exec_run([
            "mpirun", "--allow-run-as-root", "-H", "algo-1:2,algo-2:2", "-np", "4", "-x", "PATH",
            "-mca", "btl_vader_single_copy_mechanism", "none", "python", "-c", _ALLREDUCE,
        ])
        text = out.decode("utf-8", "replace")
        assert code == 0, text
        expected = [("algo-1", 10), ("algo-1", 10), ("algo-2", 10), ("algo-2", 10)]
        assert f"ranks {expected}" in text.splitlines(), text
    finally:
        for container in containers:
            container.remove(force=True)
        network.remove()
