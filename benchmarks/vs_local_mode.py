"""The same SageMaker SDK v2 job three ways: the SDK's own local mode, `EmulatorSession`, `hetero-emu run`.

A homogeneous job of HOSTS hosts (default 4 and 16) on `hetero-emu/training:py311` whose `train.py`
prints "ok" and exits, measured in one process:

- local mode: `Estimator(instance_type="local", instance_count=N, entry_point=..., source_dir=...)`
  with a `LocalSession` (placeholder credentials, `local_code` so the code is mounted and nothing goes
  to S3, `file://` output, telemetry off): `fit()` runs `docker-compose up --abort-on-container-exit`.
  Timed: `fit()` with its default logs=True (local mode's create_training_job returns when the job
  has ended; with logs=False the SDK's wait_for_job would then sleep its 5 s poll before asking).
  The containers and the `sagemaker-local` network it leaves behind are removed afterwards, timed
  apart ("cleanup"). Local mode ends the job when the FIRST host exits and stops the others: `train`
  runs as PID 1 without an init, where SIGTERM does nothing, so the stop waits out compose's 10 s and
  kills them. "hosts ok" is how many hosts exited 0. "local+init" is the same run with `init: true`
  in each service (the SDK's `local.container_config`): no 10 s, but the other hosts die at once;
- session: the same `Estimator` with `instance_type="ml.m5.large"` and `sagemaker_session=EmulatorSession`,
  `fit(logs=False)`. Timed: `fit()` (the SDK packs and "uploads" the code, the job's driver process
  runs it, the session polls for its end);
- cli: `hetero-emu run -q --json SPEC` of the same job as a subprocess. Timed: the whole process.

For the session and the CLI it also prints the job's own `Emulator.Seconds.Total` (stage, network,
hosts, artifacts, teardown), so what is left is the SDK's / the process's share. Prints the median of
REPEAT runs per way and host count, the ratios local/session and session/cli, and a summary line.
Everything it makes goes under one temporary folder (job records, S3 root, outputs) and is removed;
the containers and networks it made are checked for at the end. Needs the default image
(`hetero-emu image build`) and docker-compose (or `docker compose`) for local mode.

    python benchmarks/vs_local_mode.py [--repeat 3] [--hosts 4 16] [--no-local-init] [--no-warmup]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import yaml

from emulator.defaults import DEFAULT_IMAGE

ROLE = "arn:aws:iam::000000000000:role/x"
INSTANCE_TYPE = "ml.m5.large"
LOCAL_NETWORK = "sagemaker-local"  # the network every local-mode job's compose file names
NO_TELEMETRY = {"SchemaVersion": "1.0", "SageMaker": {"PythonSDK": {"Modules": {"TelemetryOptOut": True}}}}


@dataclass
class Run:
    """One timed run: wall seconds, and what else the way tells about it."""

    seconds: float
    job_total: float | None = None  # the emulator's own Emulator.Seconds.Total
    cleanup: float | None = None  # local mode: removing what it left behind
    hosts_ok: int | None = None  # local mode: hosts that exited 0


@dataclass
class Bench:
    """Paths, names and what was made, for one benchmark process."""

    root: Path
    prefix: str
    client: docker.DockerClient
    keep_local_network: bool  # someone else's local mode made it: not ours to remove
    local_containers: set[str] = field(default_factory=set)
    runs: int = 0

    @property
    def code(self) -> Path:
        return self.root / "code"

    def folder(self, what: str) -> Path:
        self.runs += 1
        path = self.root / f"{what}-{self.runs}"
        path.mkdir(parents=True)
        return path


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """The SDK's and compose's output (local mode streams every host's log to stdout even with
    logs=False; the SDK logs at INFO and warns about v2) kept in a buffer, shown only on failure."""
    buffer = io.StringIO()
    logging.disable(logging.INFO)
    try:
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
            yield
    except BaseException:
        sys.stderr.write(buffer.getvalue()[-4000:])
        raise
    finally:
        logging.disable(logging.NOTSET)


def estimator(bench: Bench, session: Any, instance_type: str, hosts: int, **extra: Any) -> Any:
    from sagemaker.estimator import Estimator

    return Estimator(image_uri=DEFAULT_IMAGE, instance_type=instance_type, instance_count=hosts,
                     entry_point="train.py", source_dir=str(bench.code), role=ROLE, sagemaker_session=session,
                     base_job_name=bench.prefix, **extra)


def local_once(bench: Bench, hosts: int, init: bool) -> Run:
    import boto3
    from sagemaker.local import LocalSession

    folder = bench.folder("local")
    boto = boto3.Session(aws_access_key_id="placeholder", aws_secret_access_key="placeholder",
                         region_name="us-west-2")
    session = LocalSession(boto_session=boto, sagemaker_config=NO_TELEMETRY)
    # Set after construction: LocalSession loads ~/.sagemaker/config.yaml into .config itself.
    local: dict[str, Any] = {"local_code": True, "container_root": str(folder / "root")}
    if init:
        local["container_config"] = {"init": True}
    (folder / "root").mkdir()
    session.config = {"local": local}
    job = estimator(bench, session, "local", hosts, output_path=f"file://{folder / 'output'}")
    start = time.perf_counter()
    try:
        job.fit(logs=True)  # not False: see the module's docstring (a 5 s sleep after the job)
    finally:
        elapsed = time.perf_counter() - start
        ok, cleanup = local_cleanup(bench, folder / "root")
    return Run(elapsed, cleanup=cleanup, hosts_ok=ok)


def local_cleanup(bench: Bench, container_root: Path) -> tuple[int, float]:
    """Hosts that exited 0, and the seconds to remove the job's containers and the local-mode network
    (what `docker-compose down` would do; local mode leaves them)."""
    names = []
    for compose_file in container_root.glob("*/docker-compose.yaml"):
        services = yaml.safe_load(compose_file.read_text())["services"]
        names += [service["container_name"] for service in services.values()]
    bench.local_containers.update(names)
    start = time.perf_counter()
    ok = 0
    for name in names:
        with contextlib.suppress(docker.errors.NotFound):
            container = bench.client.containers.get(name)
            ok += container.attrs["State"]["ExitCode"] == 0
            container.remove(force=True)
    if not bench.keep_local_network:
        for network in bench.client.networks.list(names=[LOCAL_NETWORK]):
            with contextlib.suppress(docker.errors.NotFound):
                network.remove()
    return ok, time.perf_counter() - start


def session_once(bench: Bench, hosts: int) -> Run:
    from emulator.sagemaker import EmulatorSession

    session = EmulatorSession(s3_root=bench.folder("s3"))
    job = estimator(bench, session, INSTANCE_TYPE, hosts)
    start = time.perf_counter()
    job.fit(logs=False)
    elapsed = time.perf_counter() - start
    # The emulator's own figures are in job.json: DescribeTrainingJob answers in the service's shape only.
    described = json.loads((session.training.found(job.latest_training_job.name).job_dir / "job.json").read_text())
    return Run(elapsed, job_total=described["Emulator"]["Seconds"]["Total"])


def cli_once(bench: Bench, hosts: int) -> Run:
    folder = bench.folder("cli")
    spec = folder / "job.yaml"
    spec.write_text(yaml.safe_dump({
        "base_job_name": f"{bench.prefix}-cli", "image_uri": DEFAULT_IMAGE,
        "entry_point": "train.py", "source_dir": str(bench.code),
        "instance_type": INSTANCE_TYPE, "instance_count": hosts, "output_path": str(folder / "output"),
    }))
    script = Path(sys.executable).with_name("hetero-emu")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "emulator"]
    start = time.perf_counter()
    done = subprocess.run([*command, "run", "-q", "--json", str(spec)], capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"hetero-emu run failed ({done.returncode}): {done.stderr[-2000:]}")
    return Run(elapsed, job_total=json.loads(done.stdout)["Emulator"]["Seconds"]["Total"])


def median(runs: list[Run], attr: str = "seconds") -> float | None:
    values = [getattr(r, attr) for r in runs if getattr(r, attr) is not None]
    return statistics.median(values) if values else None


def fmt(value: float | None, width: int, digits: int = 2) -> str:
    return f"{value:>{width}.{digits}f}" if value is not None else f"{'-':>{width}}"


def leftovers(bench: Bench) -> list[str]:
    """Containers and networks this process made that are still there (removed, and named)."""
    left = []
    for container in bench.client.containers.list(all=True):
        if container.name.startswith(bench.prefix) or container.name in bench.local_containers:
            left.append(f"container {container.name}")
            container.remove(force=True)
    for network in bench.client.networks.list():
        mine = bench.prefix in network.name or (network.name == LOCAL_NETWORK and not bench.keep_local_network)
        if mine:
            left.append(f"network {network.name}")
            network.remove()
    return left


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--hosts", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--local-init", action=argparse.BooleanOptionalAction, default=True,
                        help="also time local mode with init: true in each service")
    parser.add_argument("--warmup", action=argparse.BooleanOptionalAction, default=True,
                        help="one untimed 1-host run of each way first (imports, compose, page cache)")
    args = parser.parse_args()

    client = docker.from_env()
    client.images.get(DEFAULT_IMAGE)  # fail early: build it with `hetero-emu image build`
    root = Path(tempfile.mkdtemp(prefix="hetero-emu-vs-local-"))
    # Job records, drivers' logs and the default S3 root go to the temp folder, not the user's home.
    os.environ["HETERO_EMU_STATE_DIR"] = str(root / "state")
    os.environ["XDG_DATA_HOME"] = str(root / "data")
    os.environ["XDG_STATE_HOME"] = str(root / "state-home")
    bench = Bench(root=root, prefix=f"vslocal-{os.getpid()}", client=client,
                  keep_local_network=bool(client.networks.list(names=[LOCAL_NETWORK])))
    bench.code.mkdir()
    (bench.code / "train.py").write_text('print("ok")\n')

    ways = ["local", *(["local+init"] if args.local_init else []), "session", "cli"]
    local_problem: dict[int, str] = {}

    def once(way: str, hosts: int) -> Run | None:
        if way.startswith("local"):
            if hosts in local_problem:
                return None
            try:
                with quiet():
                    return local_once(bench, hosts, init=way == "local+init")
            except Exception as e:  # local mode may not run here at all: say why, time the others
                local_problem[hosts] = f"{way}: {type(e).__name__}: {e}"
                return None
        with quiet():
            return session_once(bench, hosts) if way == "session" else cli_once(bench, hosts)

    try:
        if args.warmup:
            for way in ways:
                once(way, 1)
            local_problem.clear()
        results: dict[int, dict[str, list[Run]]] = {}
        for hosts in args.hosts:
            results[hosts] = {way: [] for way in ways}
            # Interleaved so that a busy moment on a shared engine weighs on every way alike.
            for _ in range(args.repeat):
                for way in ways:
                    run = once(way, hosts)
                    if run is not None:
                        results[hosts][way].append(run)
        report(args.hosts, ways, results, local_problem, args.repeat)
    finally:
        left = leftovers(bench)
        stuck: list[str] = []
        shutil.rmtree(root, onerror=lambda _f, path, _e: stuck.append(path))
        print(f"left behind: {', '.join(left) if left else 'no container or network'}; "
              f"{'temp folder removed' if not stuck else f'could not remove {len(stuck)} paths under {root}'}")


def report(host_counts: list[int], ways: list[str], results: dict[int, dict[str, list[Run]]],
           local_problem: dict[int, str], repeat: int) -> None:
    print(f"median wall seconds of {repeat} runs; local = SDK local mode fit(), session = EmulatorSession "
          "fit(), cli = `hetero-emu run` process")
    header = f"{'hosts':>5}" + "".join(f"  {w + ' s':>12}" for w in ways)
    header += f"  {'local/session':>13}  {'session/cli':>11}"
    print(header)
    for hosts in host_counts:
        row = results[hosts]
        line = f"{hosts:>5}" + "".join(f"  {fmt(median(row[w]), 12)}" for w in ways)
        local, session, cli = median(row["local"]), median(row["session"]), median(row["cli"])
        line += f"  {fmt(local / session if local and session else None, 13)}"
        line += f"  {fmt(session / cli if session and cli else None, 11)}"
        print(line)
    print()
    print(f"{'hosts':>5}  {'way':<10}  {'hosts ok':>8}  {'cleanup s':>9}  {'job Total s':>11}  {'rest s':>6}")
    for hosts in host_counts:
        for way in ways:
            runs = results[hosts][way]
            ok = median(runs, "hosts_ok")
            total, wall = median(runs, "job_total"), median(runs)
            rest = wall - total if wall is not None and total is not None else None
            print(f"{hosts:>5}  {way:<10}  {fmt(ok, 8, 0) if ok is not None else f'{hosts:>8}'}  "
                  f"{fmt(median(runs, 'cleanup'), 9)}  {fmt(total, 11)}  {fmt(rest, 6)}")
    for hosts, why in local_problem.items():
        print(f"local mode did not run with {hosts} hosts: {why}")
    print("(hosts ok: hosts that exited 0; local mode stops the others once the first one exits. "
          "job Total: the emulator's own Emulator.Seconds.Total; rest: wall minus it)")
    big = max(host_counts)
    medians = {w: median(results[big][w]) for w in ways}
    local, session, cli = medians["local"], medians["session"], medians["cli"]
    if session is None or cli is None:
        return
    tail = f"the session adds {session - cli:+.1f} s ({session / cli:.2f}x) over `hetero-emu run` ({cli:.1f} s)"
    if local is not None:
        ok = median(results[big]["local"], "hosts_ok")
        print(f"summary: {big} hosts, SDK local mode {local:.1f} s ({ok:.0f} of {big} hosts ran to the end) vs "
              f"EmulatorSession {session:.1f} s ({local / session:.1f}x); {tail}")
    else:
        print(f"summary: {big} hosts, SDK local mode did not run; EmulatorSession {session:.1f} s; {tail}")


if __name__ == "__main__":
    main()
