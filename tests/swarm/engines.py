"""The engines of the contract suite (test_engine_contract.py), as its tests see them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import docker
from cluster import SwarmCluster


@dataclass
class Engine:
    """One engine of the contract suite (test_engine_contract.py), as a test sees it: its registered
    `name`, the `folder` the test keeps its code, data and job folders in (on the swarm, a folder of
    the share every node sees), and what is left of a job on it (`leftovers`)."""

    name: str
    folder: Path
    host: docker.DockerClient
    cluster: SwarmCluster | None = None

    def leftovers(self, job: str) -> list[str]:
        """Everything of `job` the engine still has: what `ps` lists, and on the swarm also each
        node's containers and networks and the manager's services carrying the job's label."""
        from emulator import api
        from emulator.plan import LABEL_JOB

        left = [f"ps: {r.kind} {r.name}" for r in api.ps(engine_name=self.name) if r.job == job]
        label = {"label": f"{LABEL_JOB}={job}"}
        if self.cluster is None:
            left += [f"container {c.name}" for c in self.host.containers.list(all=True, filters=label)]
            left += [f"network {n.name}" for n in self.host.networks.list(filters=label)]
            return left
        for node in self.cluster.nodes:
            client = self.cluster.client(node)
            left += [f"{node}: container {c.name}" for c in client.containers.list(all=True, filters=label)]
            left += [f"{node}: network {n.name}" for n in client.networks.list(filters=label)]
        left += [f"service {s.name}" for s in self.cluster.client(self.cluster.manager).services.list(filters=label)]
        return left

