"""Plan -> a docker compose project. Pure: returns data; `render` writes it as compose.yaml.

The project reproduces the plan's containers (names, hostnames, aliases, labels, mounts, env,
command) for people who prefer `docker compose up`, but not the service's lifecycle: compose cannot
fail the job on one host's non-zero exit without also stopping hosts that exit 0 early, which is why
`hetero-emu run` drives the engine itself.
"""

from __future__ import annotations

import os
from typing import Any

from emulator.plan import Mount, Plan

# File format 2.4 is the newest that both docker-compose v1 (the machine's tool) and Compose v2 read
# with `init`, `hostname`, network `name` and `internal`.
COMPOSE_VERSION = "2.4"
NETWORK_KEY = "job"


def _volume(mount: Mount, project_dir: str) -> str:
    source = mount.source
    # Paths inside the job folder are written relative to it, so a rendered folder can be moved.
    if source == project_dir or source.startswith(project_dir + os.sep):
        source = "./" + os.path.relpath(source, project_dir) if source != project_dir else "."
    return f"{source}:{mount.target}:{'ro' if mount.read_only else 'rw'}"


def compose_project(plan: Plan) -> dict[str, Any]:
    """The compose document for a plan whose job folder is the compose project's folder."""
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
            "networks": {NETWORK_KEY: {"aliases": [host.name]}},
            "command": list(plan.command),
        }
        if plan.entrypoint is not None:
            service["entrypoint"] = list(plan.entrypoint)
        services[host.name] = service
    return {
        "version": COMPOSE_VERSION,
        "services": services,
        "networks": {
            NETWORK_KEY: {
                "name": plan.network,
                "internal": plan.network_isolation,
                "labels": dict(sorted(plan.labels.items())),
            }
        },
    }
