"""How often a job network is left stuck (moby#42119: "has active endpoints" with no container), and
whether the Docker engine's teardown avoids it (docs/failures.md, Networks the engine will not remove).

Each trial is one job's network: a bridge with a /24 of its own, HOSTS containers with fixed
addresses started on it, then torn down one of two ways:

- `concurrent`: every container force-removed at once (16 at a time, as teardown did before), then
  the network removed;
- `teardown`: the Docker engine's own removal (`DockerBackend.remove_resources`: each endpoint
  disconnected one at a time, then the containers removed at once, then the network, a stuck one
  told within seconds);
- `stop`: every host stopped at once first (as a failing host's peers, `max_run` or Ctrl-C stop
  them; the engine deletes each endpoint as its container exits), then the engine's own removal.

JOBS such jobs run side by side (each in a thread of its own, as jobs of several drivers would), with
BURNERS busy processes beside them, for SECONDS. A network still refused after 5 s with no container
attached counts as stuck; it stays until the engine restarts, so the trials use their own labelled
networks in 10.213.0.0/16 (`docker network ls --filter label=hetero-emu.benchmark=stuck-networks`).

    .venv/bin/python benchmarks/stuck_networks.py --image IMAGE --way concurrent --seconds 180

IMAGE must keep running with its default command (e.g. a `docker import` of a static binary that
pauses); no registry is needed.
"""

from __future__ import annotations

import argparse
import ipaddress
import itertools
import json
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import docker
import docker.errors

from emulator.backend import Resource
from emulator.backend.docker import DockerBackend
from emulator.backend.networks import NetworkStuck

LABELS = {"hetero-emu.benchmark": "stuck-networks"}


def one_job(api: Any, image: str, hosts: int, subnet: ipaddress.IPv4Network, way: str) -> str:
    """One trial: 'removed', 'stuck' or 'error: ...'."""
    name = f"stuck-bench-{str(subnet.network_address).replace('.', '-')}"
    pool = docker.types.IPAMPool(subnet=str(subnet), gateway=str(subnet[1]))
    net = api.create_network(name, driver="bridge", labels=LABELS, ipam=docker.types.IPAMConfig(pool_configs=[pool]))

    def create(i: int) -> str:
        endpoint = api.create_endpoint_config(aliases=[f"algo-{i}"], ipv4_address=str(subnet[10 + i]))
        made = api.create_container(image, name=f"{name}-algo-{i}", labels=LABELS,
                                    host_config=api.create_host_config(network_mode=name, init=True),
                                    networking_config=api.create_networking_config({name: endpoint}))
        api.start(made["Id"])
        return str(made["Id"])

    with ThreadPoolExecutor(16) as threads:
        ids = list(threads.map(create, range(1, hosts + 1)))
    if way == "stop":
        with ThreadPoolExecutor(16) as threads:
            list(threads.map(lambda i: api.stop(i, timeout=1), ids))
    if way in ("teardown", "stop"):
        resources = [Resource("container", i, name, {}) for i in ids] + [Resource("network", net["Id"], name, {})]
        try:
            DockerBackend(client=docker.from_env(timeout=120)).remove_resources(resources)
        except NetworkStuck:
            return "stuck"
        return "removed"
    with ThreadPoolExecutor(16) as threads:
        list(threads.map(lambda i: api.remove_container(i, force=True, v=True), ids))
    deadline = time.monotonic() + 5
    while True:
        try:
            api.remove_network(net["Id"])
            return "removed"
        except docker.errors.APIError as err:
            if "has active endpoints" not in str(err) or api.inspect_network(net["Id"]).get("Containers"):
                return f"error: {err}"
            if time.monotonic() > deadline:
                return "stuck"
            time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--image", required=True)
    parser.add_argument("--way", choices=["concurrent", "teardown", "stop"], required=True)
    parser.add_argument("--hosts", type=int, default=32)
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--burners", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=180)
    parser.add_argument("--first-block", type=int, default=0, help="the third octet of the first 10.213.x.0/24")
    args = parser.parse_args()

    api = docker.from_env(timeout=120).api
    blocks = (ipaddress.ip_network(f"10.213.{n}.0/24") for n in itertools.count(args.first_block))
    lock = threading.Lock()
    outcomes: list[str] = []
    end = time.monotonic() + args.seconds
    burners = [subprocess.Popen(["timeout", str(int(args.seconds) + 30), "sh", "-c", "while :; do :; done"])
               for _ in range(args.burners)]

    def worker() -> None:
        while time.monotonic() < end:
            with lock:
                subnet = next(blocks)
            outcome = one_job(api, args.image, args.hosts, subnet, args.way)
            with lock:
                outcomes.append(outcome)
            print(f"{subnet}: {outcome}", flush=True)

    try:
        workers = [threading.Thread(target=worker) for _ in range(args.jobs)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        for b in burners:
            b.terminate()
    print(json.dumps({"way": args.way, "hosts": args.hosts, "jobs": args.jobs, "burners": args.burners,
                      "trials": len(outcomes), "stuck": outcomes.count("stuck"),
                      "errors": sum(o.startswith("error") for o in outcomes)}))


if __name__ == "__main__":
    main()
