"""Plan -> a docker compose project. Pure: returns data; `render` writes it as compose.yaml.

The project reproduces the plan's containers (names, hostnames, aliases, labels, mounts, env,
command) for people who prefer `docker compose up`, but not the service's lifecycle: compose cannot
fail the job on one host's non-zero exit without also stopping hosts that exit 0 early, which is why
`hetero-emu run` drives the engine itself.

Secrets (see `emulator.secrets`) are not written into the file: a variable whose name marks it as a
secret, or whose value contains a secret's value, is listed by name only (`NAME: null`). Compose
then takes its value from the environment of the shell that runs `docker-compose up`, as `docker
run -e NAME` does; `compose_yaml` says so in a comment at the top of the file.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
from collections.abc import Mapping
from typing import Any

import yaml

from emulator.container import ContainerSpec, Mount
from emulator.plan import LABEL_DRIVER, Plan, host_addresses
from emulator.secrets import masked_names

# File format 2.4 is the newest that both docker-compose v1 (the machine's tool) and Compose v2 read
# with `init`, `hostname`, network `name` and `internal`.
COMPOSE_VERSION = "2.4"
NETWORK_KEY = "job"
COMPOSE_DRIVER = "docker-compose"
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
    services = {host.name: service(host.container, addresses, plan.job_dir) for host in plan.hosts}
    document: dict[str, Any] = _escape({
        "version": COMPOSE_VERSION,
        "services": services,
        "networks": {
            NETWORK_KEY: {
                "name": plan.network,
                "internal": plan.network_isolation,
                # As `run` does: an isolated bridge gets no host address (see DockerBackend.create_network).
                **({"driver_opts": {"com.docker.network.bridge.inhibit_ipv4": "true"}} if plan.network_isolation
                   else {}),
                "labels": dict(sorted({**plan.labels, LABEL_DRIVER: COMPOSE_DRIVER}.items())),
                "ipam": {"config": [{"subnet": subnet, "gateway": gateway}]},
            }
        },
    })
    return document


def service(container: ContainerSpec, addresses: Mapping[str, str], project_dir: str) -> dict[str, Any]:
    """One host's compose service: every field of its `ContainerSpec`, translated once (the Docker
    backend's `container_options` is the other translation; tests/unit/test_container.py checks both)."""
    out: dict[str, Any] = {
        "image": container.image,
        "container_name": container.name,
        "hostname": container.hostname,
        "init": container.init,
        # No driver process owns a compose project: `clean` and the leftover warning must not
        # take it for a job left behind (liveness: "cannot be told").
        "labels": dict(sorted({**container.labels, LABEL_DRIVER: COMPOSE_DRIVER}.items())),
        "environment": _environment(container.environment),
        "volumes": [_volume(m, project_dir) for m in container.mounts],
        "networks": {NETWORK_KEY: {"aliases": list(container.aliases),
                                   "ipv4_address": addresses[container.hostname]}},
        "extra_hosts": [f"{name}:{addresses[name]}" for name in container.extra_hosts],
        "command": list(container.command),
        "shm_size": container.shm_bytes,
        "ulimits": {u.name: {"soft": u.soft, "hard": u.hard} for u in container.ulimits},
    }
    if container.entrypoint is not None:
        out["entrypoint"] = list(container.entrypoint)
    if container.memory_bytes is not None:
        # As `run` does: the instance's memory, swap included (compose 2.4 takes bytes).
        out["mem_limit"] = container.memory_bytes
        out["memswap_limit"] = container.memory_bytes
    if container.devices:
        out["devices"] = [d.spec() for d in container.devices]
    if container.ports:
        out["ports"] = [p.spec() for p in container.ports]
    return out


def _environment(environment: Mapping[str, str]) -> dict[str, str | None]:
    """The service's environment: secrets by name only (None: compose reads them from the shell)."""
    bare = set(masked_names(environment))
    return {name: None if name in bare else value for name, value in sorted(environment.items())}


def secret_variables(plan: Plan) -> list[str]:
    """The variables the compose project lists by name only, sorted."""
    return sorted({name for host in plan.hosts for name in masked_names(host.container.environment)})


def compose_yaml(plan: Plan) -> str:
    """compose.yaml's text: `compose_project` as YAML, after a comment naming the variables that must
    be exported before `docker-compose up` (the values are never written)."""
    text = yaml.safe_dump(compose_project(plan), sort_keys=False)
    header = []
    names = secret_variables(plan)
    if names:
        header += [
            "# Secrets are not written here: these variables are listed without a value, and",
            "# docker-compose takes each from the environment of the shell that runs it.",
            "# Export them first, e.g.:",
            *(f"#   export {name}=..." for name in names),
        ]
    piped = sorted({name for host in plan.hosts for name in host.pipes})
    if piped:
        # The FIFOs are made and fed by `hetero-emu run` (emulator.pipes), which compose does not run.
        header += [
            f"# Pipe input mode channels ({', '.join(piped)}) are streamed by `hetero-emu run` only: under",
            "# docker-compose their FIFOs /opt/ml/input/data/<channel>_<epoch> never appear.",
        ]
    return "\n".join([*header, text]) if header else text


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
