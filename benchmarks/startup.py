"""Startup overhead of `hetero-emu run` against plain docker-py, measured in one process.

For a 4-host and a 16-host job whose script exits at once, it times:
- emulator: the whole `run_job` (validate, plan, stage files, network, create, concurrent start,
  supervise, collect artifacts, job.json, teardown);
- baseline: plain docker-py doing the least a multi-host job needs: a network, then for each host
  create + start, then wait for each, then remove the containers and the network.
Both run the same image and the same command, so the ratio is the emulator's own overhead.
Prints the median of REPEAT runs for each and the ratio. Needs the default image
(`hetero-emu image build`).

    python benchmarks/startup.py [--repeat 3] [--hosts 4 16]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import docker

from emulator.console import RecordingReporter
from emulator.defaults import DEFAULT_IMAGE
from emulator.runner import run_job
from emulator.spec import validate

COMMAND = ["python3", "-c", "pass"]


def emulator_once(hosts: int, workdir: Path) -> float:
    raw = {
        "base_job_name": f"bench-{hosts}",
        "container_entry_point": COMMAND,
        "instance_groups": [
            {"instance_group_name": "data_group", "instance_type": "ml.c5.xlarge", "instance_count": hosts // 2},
            {"instance_group_name": "dnn_group", "instance_type": "ml.g5.xlarge", "instance_count": hosts - hosts // 2},
        ],
        "output_path": str(workdir),
    }
    spec = validate(raw, base_dir=workdir)
    start = time.perf_counter()
    result = run_job(spec, reporter=RecordingReporter())
    elapsed = time.perf_counter() - start
    if result.status != "Completed":
        raise SystemExit(f"emulator run failed: {result.failure_reason}")
    return elapsed


def baseline_once(client: docker.DockerClient, hosts: int, tag: str) -> float:
    start = time.perf_counter()
    network = client.networks.create(f"bench-baseline-{tag}", driver="bridge")
    containers = []
    try:
        for i in range(1, hosts + 1):
            c = client.containers.create(DEFAULT_IMAGE, COMMAND, name=f"bench-baseline-{tag}-algo-{i}",
                                         hostname=f"algo-{i}", network=network.name)
            c.start()
            containers.append(c)
        for c in containers:
            c.wait()
    finally:
        for c in containers:
            c.remove(force=True)
        network.remove()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--hosts", type=int, nargs="+", default=[4, 16])
    args = parser.parse_args()
    client = docker.from_env()
    client.images.get(DEFAULT_IMAGE)  # fail early: build it with `hetero-emu image build`
    print(f"{'hosts':>5}  {'emulator s':>10}  {'baseline s':>10}  {'ratio':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for hosts in args.hosts:
            emu = [emulator_once(hosts, Path(tmp) / f"{hosts}-{i}") for i in range(args.repeat)]
            base = [baseline_once(client, hosts, f"{hosts}-{i}") for i in range(args.repeat)]
            e, b = statistics.median(emu), statistics.median(base)
            print(f"{hosts:>5}  {e:>10.2f}  {b:>10.2f}  {e / b:>6.2f}", flush=True)


if __name__ == "__main__":
    main()
