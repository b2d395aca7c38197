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
        from emulator.planning.plan import LABEL_JOB

        left = [f"ps: {r.kind} {r.name}" for r in api.ps(engine_name=self.name) if r.job == job]
        label = {"label": f"{LABEL_JOB}={job}"}
        # The low-level lists: docker-py's `containers.list` inspects each container it listed, and
        # one removed in between (by the watcher this is waiting for) failed the call with a 404.
        engines = [("", self.host)] if self.cluster is None else [
            (f"{node}: ", self.cluster.client(node)) for node in self.cluster.nodes]
        for where, client in engines:
            left += [f"{where}container {c['Names'][0]}" for c in client.api.containers(all=True, filters=label)]
            left += [f"{where}network {n['Name']}" for n in client.api.networks(filters=label)]
        if self.cluster is not None:
            manager = self.cluster.client(self.cluster.manager).api
            left += [f"service {s['Spec']['Name']}" for s in manager.services(filters=label)]
        return left

