"""AWS inside a job, the plan's part (emulator/run/job_aws.py): the gateway's container, every host pointed
at it, nothing for an isolated job, the files staged for both, and the credential process as botocore
runs it."""

from __future__ import annotations

import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from botocore.credentials import ProcessProvider
from cryptography import x509

from emulator.backend.docker import container_options
from emulator.jobspec import JobSpec
from emulator.planning import hooks
from emulator.planning.hardware import Hardware
from emulator.planning.plan import LABEL_HOST, host_addresses, make_plan, network_members
from emulator.run import job_aws

Load = Callable[[dict[str, Any]], JobSpec]


@pytest.fixture
def plan(load: Load, valid_raw: dict[str, Any], tmp_path: Path) -> Any:
    return make_plan(load({**valid_raw, "environment": {"AWS_CONFIG_FILE": "/mine/config"}}), "aws-job",
                     job_dir=tmp_path / "aws-job")


def test_every_host_is_pointed_at_the_gateway_which_runs_the_jobs_image(plan: Any) -> None:
    aws = job_aws.with_aws(plan)
    gateway = aws.aws.gateway.container
    assert gateway.image == plan.image
    assert gateway.entrypoint == ("python3", f"{job_aws.GATEWAY_TARGET}/{job_aws.PROGRAM}")
    assert LABEL_HOST not in gateway.labels and gateway.labels[job_aws.LABEL_ROLE] == job_aws.GATEWAY_HOST
    assert {(m.target, m.read_only) for m in gateway.mounts} == {(job_aws.GATEWAY_TARGET, True),
                                                                 (job_aws.SOCKET_TARGET, False)}
    assert [h.name for h in aws.hosts] == [h.name for h in plan.hosts]
    for host in aws.hosts:
        container = host.container
        assert container.dns == (job_aws.GATEWAY_HOST,)
        assert container.environment["AWS_CA_BUNDLE"] == f"{job_aws.HOSTS_TARGET}/{job_aws.CA_FILE}"
        assert container.environment["AWS_CONFIG_FILE"] == "/mine/config"  # the job's own value stays
        for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
            assert container.environment[name] == f"{job_aws.HOSTS_TARGET}/{job_aws.BUNDLE_FILE}"
        added = [m for m in container.mounts if m.target == job_aws.HOSTS_TARGET]
        assert len(added) == 1 and added[0].read_only
        assert not any(m.source.endswith(job_aws.GATEWAY_FOLDER) for m in container.mounts)  # not its key
        # The start-up hook that holds the host's first process until the gateway answers.
        assert container.environment[job_aws.GATEWAY_VARIABLE] == job_aws.GATEWAY_HOST
        assert container.environment["PYTHONPATH"].split(":")[0] == hooks.TARGET
        assert [m.source for m in container.mounts if m.target == hooks.TARGET] == [aws.hook_dir]


def test_an_isolated_job_gets_no_aws(load: Load, valid_raw: dict[str, Any], tmp_path: Path) -> None:
    plan = make_plan(load({**valid_raw, "enable_network_isolation": True}), "iso", job_dir=tmp_path / "iso")
    assert job_aws.with_aws(plan) == plan and job_aws.with_aws(plan).aws is None


def test_without_aws_gives_the_plan_back(plan: Any, load: Load, valid_raw: dict[str, Any], tmp_path: Path) -> None:
    assert plan.hook_dir is None  # the hook mounted for AWS alone goes with it
    assert job_aws.without_aws(job_aws.with_aws(plan)) == plan
    hooked = make_plan(load({**valid_raw, "environment": {"PYTHONPATH": "/mine"}}), "hooked",
                       job_dir=tmp_path / "hooked", hardware=Hardware(cpus="instance"))
    assert hooked.hook_dir is not None  # the vCPU count's hook, which stays
    aws = job_aws.with_aws(hooked)
    assert aws.hosts[0].container.environment["PYTHONPATH"] == f"{hooks.TARGET}:/mine"
    assert job_aws.without_aws(aws) == hooked


def test_the_gateway_has_an_address_and_each_hosts_dns_is_it(plan: Any) -> None:
    aws = job_aws.with_aws(plan)
    members = [h.name for h in network_members(aws)]
    assert members == [*(h.name for h in plan.hosts), job_aws.GATEWAY_HOST]
    addresses = host_addresses("172.16.5.0/24", "172.16.5.1", members)
    options = container_options(aws.hosts[0].container, "net", addresses, "driver")
    assert options.host_config["dns"] == [addresses[job_aws.GATEWAY_HOST]]
    # In /etc/hosts as well: before it runs, Docker's resolver would ask the gateway for its own name.
    assert options.host_config["extra_hosts"][job_aws.GATEWAY_HOST] == addresses[job_aws.GATEWAY_HOST]
    gateway = container_options(aws.aws.gateway.container, "net", addresses, "driver")
    assert gateway.endpoint["ipv4_address"] == addresses[job_aws.GATEWAY_HOST]
    assert gateway.host_config["dns"] is None


def test_the_socket_folder_is_short_enough_for_a_socket_and_one_per_job(tmp_path: Path) -> None:
    deep = str(tmp_path / ("x" * 200) / "job")
    assert len(job_aws.socket_dir(deep) + "/" + job_aws.SOCKET_NAME) < 107
    assert job_aws.socket_dir(deep) != job_aws.socket_dir(deep + "2")


def test_staged_files_the_certificate_names_and_the_key_kept_private(plan: Any) -> None:
    aws = job_aws.with_aws(plan)
    job_aws.stage(aws)
    files = Path(aws.aws.files_dir)
    hosts, gateway = files / job_aws.HOSTS_FOLDER, files / job_aws.GATEWAY_FOLDER
    assert sorted(p.name for p in hosts.iterdir()) == sorted([job_aws.BUNDLE_FILE, job_aws.CA_FILE, job_aws.CONFIG_FILE,
                                                              job_aws.PROGRAM])
    # The bundle that SSL_CERT_FILE & co name: every public authority this machine trusts, then the job's.
    bundle = (hosts / job_aws.BUNDLE_FILE).read_bytes()
    assert bundle.startswith(job_aws.public_authorities().rstrip(b"\n"))
    assert bundle.endswith((hosts / job_aws.CA_FILE).read_bytes())
    assert stat.S_IMODE((gateway / job_aws.KEY_FILE).stat().st_mode) == 0o600
    cert = x509.load_pem_x509_certificate((gateway / job_aws.CERT_FILE).read_bytes())
    ca = x509.load_pem_x509_certificate((hosts / job_aws.CA_FILE).read_bytes())
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName)
    region = plan.spec.region
    for wanted in (f"*.{region}.amazonaws.com", f"*.s3.{region}.amazonaws.com", "*.amazonaws.com",
                   "*.s3.amazonaws.com", "*.us-east-1.amazonaws.com"):
        assert wanted in names
    job_aws.unstage(aws)
    assert not hosts.exists() and not gateway.exists()


def test_the_credential_process_as_botocore_runs_it(plan: Any) -> None:
    """botocore's own ProcessProvider runs the staged program (with this Python for `python3`) and
    gets refreshable temporary credentials."""
    aws = job_aws.with_aws(plan)
    job_aws.stage(aws)
    program = Path(aws.aws.files_dir) / job_aws.HOSTS_FOLDER / job_aws.PROGRAM
    config = job_aws.config_text()
    assert f"credential_process = python3 {job_aws.HOSTS_TARGET}/{job_aws.PROGRAM} --credential-process" in config
    command = f"{sys.executable} {program} --credential-process"
    provider = ProcessProvider("default", lambda: {"profiles": {"default": {"credential_process": command}}})
    found = provider.load()
    assert found is not None and found.method == "custom-process"
    first = found.get_frozen_credentials()
    assert first.access_key.startswith("ASIA") and first.token
    assert found.refresh_needed() is False  # an hour to go: refreshed only near its expiry


def test_a_killed_drivers_socket_folder_is_stale_and_a_served_one_is_not(tmp_path: Path) -> None:
    """`clean` removes the socket folders nothing listens on (a driver killed before its endpoint
    block ended); a job's that is running is left alone, and so is a link."""
    import socket

    served, dead, empty = (tmp_path / f"hetero-emu-aws-{n}" for n in ("served", "dead", "empty"))
    for folder in (served, dead, empty):
        folder.mkdir()
    listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listening.bind(str(served / job_aws.SOCKET_NAME))
    listening.listen(1)
    gone = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    gone.bind(str(dead / job_aws.SOCKET_NAME))
    gone.close()  # the file stays, nothing behind it: as a SIGKILLed driver leaves it
    (tmp_path / "hetero-emu-aws-link").symlink_to(dead)
    try:
        assert job_aws.stale_socket_dirs(tmp_path) == [dead, empty]
    finally:
        listening.close()


def test_on_an_engine_whose_gateway_may_run_elsewhere_the_socket_is_in_the_job_folder(plan: Any) -> None:
    # A swarm's gateway runs on any node, and every node sees the job folder (not this machine's /tmp).
    aws = job_aws.with_aws(plan, socket_in_job_folder=True)
    assert aws.aws is not None
    assert Path(aws.aws.socket_dir) == Path(plan.job_dir) / job_aws.FOLDER / job_aws.SOCKET_FOLDER
    mounts = {m.target: m.source for m in aws.aws.gateway.container.mounts}
    assert mounts[job_aws.SOCKET_TARGET] == aws.aws.socket_dir
    # On one machine's engine it stays in the temporary folder, short whatever the job folder's depth.
    assert job_aws.with_aws(plan).aws.socket_dir == job_aws.socket_dir(plan.job_dir)  # type: ignore[union-attr]
