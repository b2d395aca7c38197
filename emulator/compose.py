"""Plan -> a docker compose project. Pure: returns data; `render` writes it as compose.yaml.

The project reproduces the plan's containers (names, hostnames, aliases, labels, mounts, env,
command) for people who prefer `docker compose up`, but not the service's lifecycle: compose cannot
fail the job on one host's non-zero exit without also stopping hosts that exit 0 early, which is why
`hetero-emu run` drives the engine itself.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
from typing import Any

from emulator.plan import Mount, Plan, host_addresses

# File format 2.4 is the newest that both docker-compose v1 (the machine's tool) and Compose v2 read
# with `init`, `hostname`, network `name` and `internal`.
COMPOSE_VERSION = "2.4"
NETWORK_KEY = "job"
# Rendering needs no engine, so it cannot ask Docker for a free subnet: the job network gets a /24
# derived from the job name inside 10.200.0.0/13 (2048 subnets), a range Docker's default pools do
# not use. Fixed addresses are what keep an exited host resolvable (see plan.host_addresses).
SUBNET_POOL = ipaddress.ip_network("10.200.0.0/13")


def job_subnet(job_name: str) -> tuple[str, str]:
    """(subnet, gateway) for a job's rendered network; the same name always gives the same subnet."""
    count = 2 ** (24 - SUBNET_POOL.prefixlen)
    index = int(hashlib.sha256(job_name.encode()).hexdigest(), 16) % count
    subnet = ipaddress.ip_network((int(SUBNET_POOL.network_address) + (index << 8), 24))
    return str(subnet), str(subnet.network_address + 1)


def _volume(mount: Mount, project_dir: str) -> str:
    source = mount.source
    # Paths inside the job folder are written relative to it, so a rendered folder can be moved.
    if source == project_dir or source.startswith(project_dir + os.sep):
        source = "./" + os.path.relpath(source, project_dir) if source != project_dir else "."
    return f"{source}:{mount.target}:{'ro' if mount.read_only else 'rw'}"


def compose_project(plan: Plan) -> dict[str, Any]:
    """The compose document for a plan whose job folder is the compose project's folder."""
    subnet, gateway = job_subnet(plan.job_name)
    addresses = host_addresses(subnet, gateway, [h.name for h in plan.hosts])
    services: dict[str, Any] = {}
    for host in plan.hosts:
        service: dict[str, Any] = {
            "image": plan.image,
            "container_name": host.container_name,
            "hostname": host.name,
            "init": True,
            "labels": dict(sorted(host.labels.items())),
            "environment": dict(sorted(host.environment.items())),
            "volumes": [_volume(m, plan.job_dir) for m in host.mounts],
            "networks": {NETWORK_KEY: {"aliases": [host.name], "ipv4_address": addresses[host.name]}},
            "extra_hosts": [f"{name}:{address}" for name, address in addresses.items() if name != host.name],
            "command": list(plan.command),
        }
        if plan.entrypoint is not None:
            service["entrypoint"] = list(plan.entrypoint)
        services[host.name] = service
    document: dict[str, Any] = _escape({
        "version": COMPOSE_VERSION,
        "services": services,
        "networks": {
            NETWORK_KEY: {
                "name": plan.network,
                "internal": plan.network_isolation,
                "labels": dict(sorted(plan.labels.items())),
                "ipam": {"config": [{"subnet": subnet, "gateway": gateway}]},
            }
        },
    })
    return document


def _escape(value: Any) -> Any:
    """Compose interpolates `$VAR` in every string value; `$$` is a literal `$`. The plan's strings
    (a shell entrypoint, an environment value) are meant literally, as `docker run` takes them."""
    if isinstance(value, str):
        return value.replace("$", "$$")
    if isinstance(value, dict):
        return {k: _escape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_escape(v) for v in value]
    return value
