"""Startup overhead of `hetero-emu run`, whole process, against plain docker-py doing the same concurrently.

For jobs of 4, 16 and 64 hosts whose script exits at once (`python3 -c pass`), it times two
subprocesses of this interpreter, run alternately (emulator, baseline, emulator, baseline, ...) so
that drift in the machine's load hits both:
- emulator: `python -m emulator run SPEC --quiet`, the whole process (imports, validation, plan,
  staging, the watcher, network, create, concurrent start, supervise, artifacts, job.json, teardown);
- baseline: a short script that imports docker-py, creates a bridge network, then with a pool of
  16 threads (the emulator's START_WORKERS) creates and starts every container, waits for every
  host, removes them, and removes the network, as concurrently as docker-py allows. Its containers
  are the emulator's very ones (`--baseline same`, the default: see `baseline_job`), the job's AWS
  gateway among them, or the least a multi-host job needs (`--baseline minimal`: image, command,
  hostname, network). With `same` a third process runs in each round, the emulator's hosts alone
  (`hosts`: no gateway, as a job without AWS inside), and both ratios are printed.
The ratio (emulator median / baseline median) is the emulator's own overhead; absolute seconds
depend on the machine and on whatever else it runs (the 1-minute load average is printed with the
table). An earlier version timed `run_job` in-process against a sequential baseline; it left out the
imports and the interpreter start that a user waits for, and a sequential baseline flattered the
emulator, so it is gone.

    python benchmarks/startup.py [--pairs 5] [--hosts 4 16 64] [--baseline same|minimal] [--json]

(`--pairs` counts rounds: emulator and baseline, and with `same` the hosts-only baseline too.)

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
import os
import pickle
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import docker

with open(sys.argv[1], "rb") as f:
    job = pickle.load(f)
endpoint = None
if job["socket"]:
    # The job's AWS endpoint's socket, which the gateway checks before it says it is ready: listened
    # on (no one answers a connection, none is made), as the emulator's driver serves it.
    os.makedirs(os.path.dirname(job["socket"]), exist_ok=True)
    endpoint = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    endpoint.bind(job["socket"])
    endpoint.listen()
api = docker.APIClient(version="auto")
ipam = None
if job["subnet"]:
    ipam = docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(subnet=job["subnet"],
                                                                       gateway=job["gateway"])])
network = api.create_network(job["network"], driver="bridge", ipam=ipam)["Id"]
created = []
try:
    def launch(options):
        create, host_config, address = options
        networking = api.create_networking_config({job["network"]: api.create_endpoint_config(**address)})
        ident = api.create_container(**create, host_config=api.create_host_config(**host_config),
                                     networking_config=networking)["Id"]
        created.append(ident)
        api.start(ident)
        return ident

    containers = job["others"] + job["hosts"]  # the gateway first, as the emulator starts it at once
    with ThreadPoolExecutor(max_workers=min(job["workers"], len(containers))) as pool:
        idents = list(pool.map(launch, containers))[len(job["others"]):]
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
    if endpoint is not None:
        endpoint.close()
        os.unlink(job["socket"])
        os.rmdir(os.path.dirname(job["socket"]))
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
    limits, ulimits, fixed address, /etc/hosts entries, the job's AWS gateway as its DNS server and
    the start-up hook that waits for it; and the gateway's container), translated by the Docker
    backend's pure `container_options` from a plan whose /opt/ml folders and AWS files were staged
    beforehand (staging is the emulator's work, so the baseline does not pay it). hosts: the same
    hosts without AWS inside, and no gateway. minimal: only image, command, hostname and network,
    the least a multi-host job needs; the gap between these baselines is what the per-host
    configuration and the gateway cost the engine.
    """
    from emulator import api  # imported here: the parent process pays it, never a timed process
    from emulator.backend.docker import container_options
    from emulator.planning import hooks
    from emulator.planning.plan import host_addresses, network_members
    from emulator.run import job_aws

    Options = tuple[dict[str, object], dict[str, object], dict[str, object]]
    options: list[Options] = []
    others: list[Options] = []  # created and started with the hosts, not waited for: the gateway
    subnet: str | None = None
    gateway: str | None = None
    endpoint: str | None = None
    if kind in ("same", "hosts"):
        plan = api.render(api.load(spec, job_name=tag), folder / tag, engine_name="docker", progress=lambda _: None)
        if kind == "same":
            plan = job_aws.with_aws(plan)
            job_aws.stage(plan)
            if plan.hook_dir is not None:
                hooks.stage(Path(plan.hook_dir))
            assert plan.aws is not None
            endpoint = str(Path(plan.aws.socket_dir) / job_aws.SOCKET_NAME)
        subnet, gateway = baseline_subnet(run)
        addresses = host_addresses(subnet, gateway, [h.name for h in network_members(plan)])
        for host in network_members(plan):
            translated = container_options(host.container, tag, addresses, "benchmark")
            create = {**translated.create, "name": f"{tag}-{host.name}", "labels": {"hetero-emu.benchmark": tag}}
            (options if host in plan.hosts else others).append((create, translated.host_config, translated.endpoint))
    else:
        for i in range(1, hosts + 1):
            options.append(({"image": IMAGE, "command": COMMAND, "name": f"{tag}-algo-{i}", "hostname": f"algo-{i}",
                             "labels": {"hetero-emu.benchmark": tag}}, {"network_mode": tag}, {}))
    path = folder / f"{tag}.pickle"
    with path.open("wb") as f:
        pickle.dump({"network": tag, "subnet": subnet, "gateway": gateway, "workers": WORKERS, "hosts": options,
                     "others": others, "socket": endpoint}, f)
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
    """`pairs` rounds of the emulator, then each baseline (`same` brings `hosts`, the hosts alone, too)."""
    spec = spec_file(hosts, folder)
    kinds = [kind, "hosts"] if kind == "same" else [kind]
    emulator: list[float] = []
    baselines: dict[str, list[float]] = {k: [] for k in kinds}
    for i in range(pairs):
        if (e := timed([sys.executable, "-m", "emulator", "run", str(spec), "--quiet"], env)) is not None:
            emulator.append(e)
        for n, which in enumerate(kinds):
            job = baseline_job(which, hosts, spec, folder, f"bench-{which}-{os.getpid()}-{hosts}-{i}",
                               2 * (os.getpid() + 8 * hosts + i) + n)
            if (b := timed([sys.executable, "-c", BASELINE, str(job)], env)) is not None:
                baselines[which].append(b)
    if not emulator or not all(baselines.values()):
        raise SystemExit(f"{hosts} hosts: every run of one side failed (see above)")
    e = statistics.median(emulator)
    row: dict[str, object] = {"hosts": hosts, "pairs": pairs, "baseline": kind, "emulator_s": emulator,
                              "emulator_median_s": e, "load_average": os.getloadavg()[0]}
    for which, times in baselines.items():
        prefix = "baseline" if which == kind else "hosts_only"
        row.update({f"{prefix}_s": times, f"{prefix}_median_s": statistics.median(times),
                    f"{prefix}_ratio" if prefix != "baseline" else "ratio": e / statistics.median(times)})
    return row


def spread(row: dict[str, object], prefix: str) -> str:
    """`median  min-max` of one side's seconds in a row."""
    times = row[f"{prefix}_s"]
    assert isinstance(times, list)
    return f"{row[f'{prefix}_median_s']:>10.2f}  {min(times):>5.2f}-{max(times):<5.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5, help="rounds (emulator, baseline[, hosts only]) per host count")
    parser.add_argument("--hosts", type=int, nargs="+", default=[4, 16, 64])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON instead of a table")
    parser.add_argument("--baseline", choices=["same", "minimal"], default="same",
                        help="same: docker-py creates the emulator's very containers (mounts, limits, fixed "
                        "addresses, the AWS gateway), and in each round the hosts alone too; minimal: image, "
                        "command, hostname and network only")
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
            hosts_only = (f"  {'hosts s':>10}  {'(min-max)':>11}  {'ratio':>5}  (the hosts alone, no gateway)"
                          if args.baseline == "same" else "")
            print(f"{'hosts':>5}  {'emulator s':>10}  {'(min-max)':>11}  {'baseline s':>10}  {'(min-max)':>11}  "
                  f"{'ratio':>5}{hosts_only}")
        for hosts in args.hosts:
            row = measure(hosts, args.pairs, Path(tmp), env, args.baseline)
            rows.append(row)
            if not args.json:
                alone = (f"  {spread(row, 'hosts_only')}  {row['hosts_only_ratio']:>5.2f}"
                         if args.baseline == "same" else "")
                print(f"{hosts:>5}  {spread(row, 'emulator')}  {spread(row, 'baseline')}  {row['ratio']:>5.2f}{alone}",
                      flush=True)
    if args.json:
        print(json.dumps({"load_average": os.getloadavg()[0], "cores": os.cpu_count(), "rows": rows}, indent=1))
    else:
        print(f"load average (1 min) at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
