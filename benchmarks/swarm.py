"""A 4- and a 16-host job on a fresh 3-node swarm and on the plain Docker engine, side by side in one run:
start and end-to-end seconds, and the seconds the image copy took on each node.

The swarm is tests/swarm/cluster.py's: three docker-in-docker containers of this machine's engine
(node-1 the manager), made afresh for the benchmark and removed at its end whatever happens, so its
nodes start without any image. The job (two instance groups, half the hosts each; every host prints
its hostname and exits 0) runs in this process through the library (`emulator.api.run`), its job
folder under the cluster's shared folder, with `engine_name="docker"` (this machine's engine) or
`"swarm"` (HETERO_EMU_SWARM_MANAGER/NODES/MTU pointing at the cluster).

In order:
1. the cluster is made: its own timings ("nodes ready", "swarm formed") are printed;
2. one 4-host swarm job pays the image copy: `prepare` saves hetero-emu/training:py311 from this
   machine's engine once and loads it into the three node engines in parallel. The seconds each
   node's load took are what `emulator.backend.image_copy.copy_image` returns; the benchmark wraps that
   function (the swarm engine imports it when it copies) to keep its result and its whole duration
   (the save included). That run's start and end-to-end are printed apart, not in the medians;
3. one unrecorded 4-host plain-engine job, so both engines have run once before measuring;
4. `--runs` rounds (default 3), each a plain and a swarm run of every host count, alternated so that
   drift in the machine's load hits both engines alike; the table shows medians (and min-max).

Per run:
- start: TrainingStartTime minus the moment the run began (JobResult.start - JobResult.began, the
  runner's own clock; `began` is the job's CreationTime here). It covers staging the hosts' folders,
  the engine's `prepare` (on the swarm: the node list, the image check on each node, and two
  throwaway global services, the ulimit probe and the check that every node sees the job folder),
  the network, and creating and starting every host. On the plain engine start() returns once every
  container has started; on the swarm once every host's service exists, whose task the swarm may
  still be scheduling and starting: that wait shows in "hosts ran" and end-to-end, not in start.
- hosts ran: JobResult.seconds, from TrainingStartTime until the last host exited and its log was read.
- end-to-end: the whole `api.run` call (time.perf_counter around it): all of the above, the
  artifacts, job.json, and the teardown of containers or services and network.
- ratio: swarm median / plain median.

A run that fails is left out (said on stderr). The machine's 1-minute load average and the number of
other swarm-test clusters running on it (other processes' tests/swarm sessions) are printed at the
start, after each round, and at the end: absolute seconds depend on them; the ratios less so.

    python benchmarks/swarm.py [--runs 3] [--json]

Builds nothing: needs hetero-emu/training:py311 (`hetero-emu image build`) and
hetero-emu/swarm-node:bookworm (`hetero-emu image build --variant swarm-node`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import docker
import docker.errors

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests" / "swarm")]

from cluster import CLIENT_TIMEOUT, LABEL, SwarmCluster  # noqa: E402 - tests/swarm is put on the path above

import emulator.backend.image_copy  # noqa: E402
from emulator import api  # noqa: E402
from emulator.backend.swarm import ENV_MANAGER, ENV_MTU, ENV_NODES  # noqa: E402
from emulator.errors import EmulatorError  # noqa: E402
from emulator.options import RunOptions  # noqa: E402
from emulator.reports.console import RecordingReporter  # noqa: E402
from emulator.result import JobResult  # noqa: E402

TRAINING_IMAGE = "hetero-emu/training:py311"
NODE_IMAGE = "hetero-emu/swarm-node:bookworm"
BUILD_HINTS = {TRAINING_IMAGE: "hetero-emu image build", NODE_IMAGE: "hetero-emu image build --variant swarm-node"}
HOST_COUNTS = (4, 16)
ENGINES = ("docker", "swarm")
SCRIPT = "import socket; print('hello from', socket.gethostname())"


class CopyRecorder:
    """Stands in for `emulator.backend.image_copy.copy_image` while the benchmark runs: calls it, and keeps
    what it returned (seconds per node's load) and how long the whole call took (save and loads)."""

    def __init__(self) -> None:
        self.original: Callable[..., dict[str, float]] = emulator.backend.image_copy.copy_image
        self.per_node: dict[str, float] = {}
        self.total = 0.0
        self.calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        began = time.perf_counter()
        seconds = self.original(*args, **kwargs)
        self.total = time.perf_counter() - began
        self.per_node = dict(seconds)
        self.calls += 1
        return seconds


def job_spec(hosts: int, shared: Path) -> Any:
    """The job of `hosts` hosts, two groups, its output folder in the folder every node sees."""
    raw = {
        "base_job_name": f"bench-swarm-{hosts}",
        "container_entry_point": ["python3", "-c", SCRIPT],
        "instance_groups": [
            {"instance_group_name": "data_group", "instance_type": "ml.c5.xlarge", "instance_count": hosts // 2},
            {"instance_group_name": "dnn_group", "instance_type": "ml.g5.xlarge", "instance_count": hosts - hosts // 2},
        ],
        "output_path": str(shared / "out"),
    }
    return api.load_mapping(raw, base_dir=shared)


def run_once(spec: Any, engine: str) -> dict[str, float] | None:
    """One job: start, hosts ran and end-to-end seconds (the module docstring defines them), or None
    (said on stderr) when it failed."""
    began = time.perf_counter()
    try:
        result: JobResult = api.run(spec, RunOptions(build_image=False), engine_name=engine,
                                    reporter=RecordingReporter())
    except EmulatorError as err:
        print(f"left out: {engine} run of {spec.base_job_name} failed: {str(err)[:600]}", file=sys.stderr)
        return None
    elapsed = time.perf_counter() - began
    if result.status != "Completed":
        print(f"left out: {engine} run {result.job_name} ended {result.status}: {result.failure_reason}",
              file=sys.stderr)
        return None
    return {"start": (result.start - (result.began or result.start)).total_seconds(),
            "ran": result.seconds, "end_to_end": elapsed}


def other_clusters(host: docker.DockerClient, mine: str) -> int:
    """How many swarm-test clusters other than `mine` have containers on this machine's engine now."""
    tokens = {c.labels.get(LABEL) for c in host.containers.list(filters={"label": LABEL})}
    return len(tokens - {mine, None})


def load_note(host: docker.DockerClient, mine: str) -> str:
    return (f"load average (1 min) {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores, "
            f"{other_clusters(host, mine)} other swarm-test cluster(s) running")


def spread_text(values: list[float]) -> str:
    return f"{min(values):.2f}-{max(values):.2f}" if values else "-"


def print_table(samples: Mapping[tuple[int, str], list[dict[str, float]]], runs: int) -> list[dict[str, Any]]:
    """The medians per host count and engine, with the swarm/plain ratio; returns the rows."""
    rows: list[dict[str, Any]] = []
    print(f"\nmedian of the runs that completed, n of {runs} (min-max)")
    print(f"{'hosts':>5}  {'engine':<6}  {'n':>2}  {'start s':>7}  {'(min-max)':>11}  {'hosts ran s':>11}  "
          f"{'end-to-end s':>12}  {'(min-max)':>11}  {'ratio start':>11}  {'ratio e2e':>9}")
    for hosts in HOST_COUNTS:
        medians: dict[str, dict[str, float]] = {}
        for engine in ENGINES:
            done = samples[(hosts, engine)]
            if not done:
                print(f"{hosts:>5}  {engine:<6}  every run failed (see above)")
                continue
            medians[engine] = {key: statistics.median(d[key] for d in done) for key in ("start", "ran", "end_to_end")}
            ratio_start = ratio_e2e = ""
            if engine == "swarm" and "docker" in medians:
                ratio_start = f"{medians['swarm']['start'] / medians['docker']['start']:.2f}"
                ratio_e2e = f"{medians['swarm']['end_to_end'] / medians['docker']['end_to_end']:.2f}"
            m = medians[engine]
            print(f"{hosts:>5}  {'plain' if engine == 'docker' else engine:<6}  {len(done):>2}  {m['start']:>7.2f}  "
                  f"{spread_text([d['start'] for d in done]):>11}  {m['ran']:>11.2f}  {m['end_to_end']:>12.2f}  "
                  f"{spread_text([d['end_to_end'] for d in done]):>11}  {ratio_start:>11}  {ratio_e2e:>9}")
            rows.append({"hosts": hosts, "engine": engine, "runs": done, "median": m,
                         "ratio_start": float(ratio_start) if ratio_start else None,
                         "ratio_end_to_end": float(ratio_e2e) if ratio_e2e else None})
    return rows


def missing_images(host: docker.DockerClient) -> list[str]:
    missing = []
    for image in (TRAINING_IMAGE, NODE_IMAGE):
        try:
            host.images.get(image)
        except docker.errors.ImageNotFound:
            missing.append(f"no image {image}: build it with `{BUILD_HINTS[image]}`")
    return missing


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each (host count, engine) for the medians")
    parser.add_argument("--json", action="store_true", help="also print every figure as JSON at the end")
    args = parser.parse_args()
    # A client that waits long enough for `docker save` of the node image on a busy engine.
    host = docker.from_env(timeout=CLIENT_TIMEOUT)
    if problems := missing_images(host):
        raise SystemExit("\n".join(problems))

    recorder = CopyRecorder()
    emulator.backend.image_copy.copy_image = recorder  # the result of every copy (the module docstring)
    samples: dict[tuple[int, str], list[dict[str, float]]] = {(h, e): [] for h in HOST_COUNTS for e in ENGINES}
    with tempfile.TemporaryDirectory(prefix="bench-swarm-state-") as state:
        # The job records go to a folder of their own, not the user's state folder.
        os.environ["HETERO_EMU_STATE_DIR"] = state
        cluster = SwarmCluster(host, NODE_IMAGE)
        try:
            print(load_note(host, cluster.token), "(start)", flush=True)
            cluster.start()
            print("cluster: " + ", ".join(f"{what} {s:.1f} s" for what, s in cluster.timings.items()), flush=True)
            # Read when the swarm engine object is made, at each api.run.
            os.environ[ENV_MANAGER] = cluster.manager_url
            os.environ[ENV_NODES] = ",".join(f"{node}={url}" for node, url in cluster.node_engines.items())
            os.environ[ENV_MTU] = str(cluster.overlay_mtu)
            specs = {hosts: job_spec(hosts, cluster.shared) for hosts in HOST_COUNTS}

            cold = run_once(specs[4], "swarm")
            if cold is None:
                raise SystemExit("the first swarm run failed (above): nothing to compare")
            if recorder.calls != 1:
                raise SystemExit(f"the first swarm run copied the image {recorder.calls} times, not once: "
                                 "did the nodes start with it?")
            print(f"image copy ({TRAINING_IMAGE}, save and loads {recorder.total:.1f} s): "
                  + ", ".join(f"{node} {s:.1f} s" for node, s in sorted(recorder.per_node.items())), flush=True)
            print(f"first swarm run, 4 hosts (pays the copy): start {cold['start']:.2f} s, "
                  f"end-to-end {cold['end_to_end']:.2f} s", flush=True)
            run_once(specs[4], "docker")  # warm-up: both engines have run once before measuring

            for i in range(args.runs):
                for hosts in HOST_COUNTS:
                    for engine in ENGINES:
                        if (done := run_once(specs[hosts], engine)) is not None:
                            samples[(hosts, engine)].append(done)
                print(f"round {i + 1}/{args.runs} done: {load_note(host, cluster.token)}", flush=True)
            rows = print_table(samples, args.runs)
            print(load_note(host, cluster.token), "(end)")
        finally:
            cluster.close()
            emulator.backend.image_copy.copy_image = recorder.original
    if args.json:
        print(json.dumps({"cluster": cluster.timings, "copy_seconds": recorder.per_node,
                          "copy_total_seconds": recorder.total, "first_swarm_run": cold, "rows": rows,
                          "load_average": os.getloadavg()[0], "cores": os.cpu_count()}, indent=1))


if __name__ == "__main__":
    main()
