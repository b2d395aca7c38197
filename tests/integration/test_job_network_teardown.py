"""A many-host job network on the real engine (docs/failures.md, Networks the engine will not remove,
and Job networks and their subnets): the Docker engine gives it a /24 of 172.16.0.0/16 instead of
one of the engine's default /16s, and tears 16 running hosts down (each endpoint disconnected one at
a time, then the containers removed at once) leaving nothing, no stuck network and no mark."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

import pytest
from testkit import unique

from emulator.backend.docker import DockerBackend
from emulator.backend.engine_memory import EngineMemory
from emulator.backend.networks import StuckNetworks
from emulator.jobspec import validate
from emulator.planning.plan import LABEL_DRIVER, LABEL_JOB, make_plan

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("no_leftovers")]

HOSTS = 16


def test_a_16_host_job_network_gets_a_24_and_its_running_hosts_are_torn_down_without_a_trace(
        tmp_path: Path, docker_client: Any, training_image: str) -> None:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "t.py").write_text("")
    spec = validate({"entry_point": "t.py", "source_dir": "code", "image_uri": training_image,
                     "instance_groups": [{"instance_group_name": "g", "instance_type": "ml.c5.xlarge",
                                          "instance_count": HOSTS}], "output_path": "out"}, base_dir=tmp_path)
    job = unique("net-teardown")
    plan = make_plan(spec, job, job_dir=tmp_path / job)
    backend = DockerBackend(client=docker_client, memory=EngineMemory(tmp_path / "state"))
    api = docker_client.api
    with backend.guard(plan):
        try:
            backend.create_network(plan)
            subnet = api.inspect_network(plan.network)["IPAM"]["Config"][0]["Subnet"]
            assert ipaddress.ip_network(subnet).prefixlen == 24
            assert ipaddress.ip_network(subnet).subnet_of(ipaddress.ip_network("172.16.0.0/16"))
            ids = []
            for host in plan.hosts:
                # The driver's label, as the backend's own containers carry it: without it another
                # worker's `no_leftovers` takes these live hosts for a gone driver's leftovers.
                labels = {**plan.labels, LABEL_DRIVER: backend._driver}
                made = api.create_container(training_image, entrypoint=["sleep", "300"], name=host.container.name,
                                            labels=labels, host_config=api.create_host_config(
                                                network_mode=plan.network, init=True))
                backend._track(plan, "container", made["Id"])
                ids.append(made["Id"])
            for ident in ids:
                api.start(ident)
            assert len(api.inspect_network(plan.network)["Containers"]) == HOSTS  # every endpoint live
        finally:
            backend.remove(plan)

    assert api.containers(all=True, filters={"label": f"{LABEL_JOB}={job}"}) == []
    assert api.networks(names=[plan.network]) == []
    assert StuckNetworks(api).ids() == set()
