"""Startup overhead of `hetero-emu run`, whole process, against plain docker-py doing the same concurrently.

For jobs of 4, 16 and 64 hosts whose script exits at once (`python3 -c pass`), it times two
subprocesses of this interpreter, run alternately (emulator, baseline, emulator, baseline, ...) so
that drift in the machine's load hits both:
- emulator: `python -m emulator run SPEC --quiet`, the whole process (imports, validation, plan,
  staging, the watcher, network, create, concurrent start, supervise, artifacts, job.json, teardown);
- baseline: a short script that imports docker-py, creates a bridge network, then with a pool of
  16 threads (the emulator's START_WORKERS) creates and starts every container, waits for every
  one, removes them, and removes the network, as concurrently as docker-py allows. Its containers
  are the emulator's very ones (`--baseline same`, the default: see `baseline_job`) or the least a
  multi-host job needs (`--baseline minimal`: image, command, hostname, network).
The ratio (emulator median / baseline median) is the emulator's own overhead; absolute seconds
depend on the machine and on whatever else it runs (the 1-minute load average is printed with the
table). An earlier version timed `run_job` in-process against a sequential baseline; it left out the
imports and the interpreter start that a user waits for, and a sequential baseline flattered the
emulator, so it is gone.

    python benchmarks/startup.py [--pairs 5] [--hosts 4 16 64] [--baseline same|minimal] [--json]

Needs the default image (`hetero-emu image build`). Latest figures are in docs/benchmarks.md.
Phases can be told apart by wrapping DockerBackend's methods with timers around `emulator.cli.main()`
in one process; `python -X importtime -m emulator --help` shows the imports.

Each run creates a network: on a busy Docker 20.10 engine a removed container's endpoint sometimes
stays behind, and its network ("has active endpoints") cannot be removed until the daemon restarts
while it holds an address pool. The baseline retries for 5 s, then fails that run (left out).
"""

from __future__ import annotations

import argparse
import compileall
import ipaddress
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
IMAGE = "hetero-emu/training:py311"  # emulator.defaults.DEFAULT_IMAGE, not imported: the driver pays its imports
COMMAND = ["python3", "-c", "pass"]
WORKERS = 16

BASELINE = """
import pickle
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import docker

with open(sys.argv[1], "rb") as f:
    job = pickle.load(f)
api = docker.APIClient(version="auto")
ipam = None
if job["subnet"]:
    ipam = docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(subnet=job["subnet"],
                                                                       gateway=job["gateway"])])
network = api.create_network(job["network"], driver="bridge", ipam=ipam)["Id"]
created = []
try:
    def launch(options):
        create, host_config, endpoint = options
        networking = api.create_networking_config({job["network"]: api.create_endpoint_config(**endpoint)})
        ident = api.create_container(**create, host_config=api.create_host_config(**host_config),
                                     networking_config=networking)["Id"]
        created.append(ident)
        api.start(ident)
        return ident

    with ThreadPoolExecutor(max_workers=min(job["workers"], len(job["hosts"]))) as pool:
        idents = list(pool.map(launch, job["hosts"]))
    with ThreadPoolExecutor(max_workers=len(idents)) as pool:
        codes = list(pool.map(lambda ident: api.wait(ident)["StatusCode"], idents))
    assert codes == [0] * len(idents), codes
finally:
    with ThreadPoolExecutor(max_workers=min(job["workers"], max(1, len(created)))) as pool:
        list(pool.map(lambda ident: api.remove_container(ident, force=True), created))
    # A busy engine may still hold an endpoint of a container it just removed ("has active endpoints").
    for attempt in range(50):
        try:
            api.remove_network(network)
            break
        except docker.errors.APIError:
            if attempt == 49:
                raise
            time.sleep(0.1)
"""

# The "same" baseline's network is given a subnet (the emulator's containers have fixed addresses,
# which need one given at create), a /24 of its own per run in a private range Docker's default
# pools do not hand out: a network the engine fails to remove (see the module's docstring) keeps its
# subnet, and must not fail every later run.
BASELINE_RANGE = ipaddress.IPv4Network("10.213.0.0/16")


def baseline_subnet(run: int) -> tuple[str, str]:
    subnet = list(BASELINE_RANGE.subnets(new_prefix=24))[run % 256]
    return str(subnet), str(subnet.network_address + 1)


def baseline_job(kind: str, hosts: int, spec: Path, folder: Path, tag: str, run: int) -> Path:
    """The baseline's containers as docker-py arguments, pickled for its process.

    same: the emulator's own containers for this job (every host's mounts, init, memory and shm
    limits, ulimits, fixed address, /etc/hosts entries), translated by the Docker backend's pure
    `container_options` from a plan whose /opt/ml folders `api.render` staged beforehand (staging
    is the emulator's work, so the baseline does not pay it). minimal: only image, command, hostname
    and network, the least a multi-host job needs; the gap between the two baselines is what the
    per-host configuration costs the engine.
    """
    from emulator import api  # imported here: the parent process pays it, never a timed process
    from emulator.backend.docker import container_options
    from emulator.planning.plan import host_addresses

    options: list[tuple[dict[str, object], dict[str, object], dict[str, object]]] = []
    subnet: str | None = None
    gateway: str | None = None
    if kind == "same":
        plan = api.render(api.load(spec, job_name=tag), folder / tag, engine_name="docker", progress=lambda _: None)
        subnet, gateway = baseline_subnet(run)
        addresses = host_addresses(subnet, gateway, [h.name for h in plan.hosts])
        for host in plan.hosts:
            translated = container_options(host.container, tag, addresses, "benchmark")
            create = {**translated.create, "name": f"{tag}-{host.name}", "labels": {"hetero-emu.benchmark": tag}}
            options.append((create, translated.host_config, translated.endpoint))
    else:
        for i in range(1, hosts + 1):
            options.append(({"image": IMAGE, "command": COMMAND, "name": f"{tag}-algo-{i}", "hostname": f"algo-{i}",
                             "labels": {"hetero-emu.benchmark": tag}}, {"network_mode": tag}, {}))
    path = folder / f"{tag}.pickle"
    with path.open("wb") as f:
        pickle.dump({"network": tag, "subnet": subnet, "gateway": gateway, "workers": WORKERS, "hosts": options}, f)
    return path


def spec_file(hosts: int, folder: Path) -> Path:
    spec = {
        "base_job_name": f"bench-{hosts}",
        "container_entry_point": COMMAND,
        "instance_groups": [
            {"instance_group_name": "data_group", "instance_type": "ml.c5.xlarge", "instance_count": hosts // 2},
            {"instance_group_name": "dnn_group", "instance_type": "ml.g5.xlarge", "instance_count": hosts - hosts // 2},
        ],
        "output_path": str(folder / "out"),
    }
    path = folder / f"bench-{hosts}.yaml"
    path.write_text(json.dumps(spec))  # JSON is YAML
    return path


def timed(argv: list[str], env: dict[str, str]) -> float | None:
    """Seconds the command took, or None (said on stderr) if it failed: a run cut short by an engine
    that stopped answering for a while on a busy machine is left out rather than ending the benchmark."""
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        print(f"left out: {' '.join(argv[1:4])} ... exited with {done.returncode}: "
              f"{done.stdout.decode(errors='replace')[-600:]}", file=sys.stderr)
        return None
    return elapsed


def measure(hosts: int, pairs: int, folder: Path, env: dict[str, str], kind: str) -> dict[str, object]:
    spec = spec_file(hosts, folder)
    emulator: list[float] = []
    baseline: list[float] = []
    for i in range(pairs):
        if (e := timed([sys.executable, "-m", "emulator", "run", str(spec), "--quiet"], env)) is not None:
            emulator.append(e)
        job = baseline_job(kind, hosts, spec, folder, f"bench-baseline-{os.getpid()}-{hosts}-{i}",
                           os.getpid() + 8 * hosts + i)
        if (b := timed([sys.executable, "-c", BASELINE, str(job)], env)) is not None:
            baseline.append(b)
    if not emulator or not baseline:
        raise SystemExit(f"{hosts} hosts: every run of one side failed (see above)")
    e, b = statistics.median(emulator), statistics.median(baseline)
    return {"hosts": hosts, "pairs": pairs, "baseline": kind, "emulator_s": emulator, "baseline_s": baseline,
            "emulator_median_s": e, "baseline_median_s": b, "ratio": e / b}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5, help="(emulator, baseline) runs per host count")
    parser.add_argument("--hosts", type=int, nargs="+", default=[4, 16, 64])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON instead of a table")
    parser.add_argument("--baseline", choices=["same", "minimal"], default="same",
                        help="same: docker-py creates the emulator's very containers (mounts, limits, fixed "
                        "addresses); minimal: image, command, hostname and network only")
    args = parser.parse_args()
    if subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True, check=False).returncode != 0:
        raise SystemExit(f"no image {IMAGE}: build it with `hetero-emu image build`")
    # A user's install has the package's bytecode (pip compiles it at install; a checkout's first run
    # writes it). Where PYTHONDONTWRITEBYTECODE is set (CI, some sandboxes) nothing is ever cached and
    # every timed process would compile the emulator from source (~40 ms here), which docker-py in
    # site-packages never pays: compile it once, as an install would.
    compileall.compile_dir(str(REPO / "emulator"), quiet=1)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        # The job records go to a folder of their own, not the user's state folder.
        env = {**os.environ, "HETERO_EMU_STATE_DIR": str(Path(tmp) / "state"),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        if not args.json:
            print(f"load average (1 min) at start: {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores; "
                  f"baseline: {args.baseline} containers")
            print(f"{'hosts':>5}  {'emulator s':>10}  {'(min-max)':>11}  {'baseline s':>10}  {'(min-max)':>11}  "
                  f"{'ratio':>5}")
        for hosts in args.hosts:
            row = measure(hosts, args.pairs, Path(tmp), env, args.baseline)
            rows.append(row)
            if not args.json:
                emu, base = row["emulator_s"], row["baseline_s"]
                assert isinstance(emu, list) and isinstance(base, list)
                print(f"{hosts:>5}  {row['emulator_median_s']:>10.2f}  {min(emu):>5.2f}-{max(emu):<5.2f}  "
                      f"{row['baseline_median_s']:>10.2f}  {min(base):>5.2f}-{max(base):<5.2f}  "
                      f"{row['ratio']:>5.2f}", flush=True)
    if args.json:
        print(json.dumps({"load_average": os.getloadavg()[0], "cores": os.cpu_count(), "rows": rows}, indent=1))
    else:
        print(f"load average (1 min) at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
