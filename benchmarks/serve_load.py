"""What `hetero-emu serve` itself spends per call: the server process's CPU time, operation by
operation, beside moto's server (`moto_server`) answering the same calls.

Calls per second from many boto3 threads measure the clients as much as the server: on two cores
the threads' own signing and parsing take most of the CPU. So here the figure is the server
process's own CPU time (user + system, from /proc/PID/stat: all its threads, none of its clients')
divided by the calls it answered, which no client cost enters; calls per second are printed beside
it, for THREADS client threads.

Each server is started as a user starts it (`hetero-emu serve --port 0` with its own state folder and
S3 root, as tests/support/serving.py does; `moto_server -p PORT`) and seeded through its own API with
the same things: JOBS finished training jobs of 2 hosts that printed LINES lines each (real jobs on
the local engine for hetero-emu; CreateTrainingJob with the same request and a log stream per host
with the same lines for moto), and an S3 bucket of 100 objects of 4 KiB. Then, operation by
operation, THREADS threads make CALLS calls in all (after a warm-up of 50), and the server's CPU time
is read before and after; each operation is measured REPEAT times and the median is reported.

    python benchmarks/serve_load.py [--calls 2000] [--threads 4] [--repeat 3] [--jobs 4] [--lines 200]
                                    [--state DIR] [--moto PATH-TO-moto_server] [--json]

`--state DIR` keeps the seeded server's folder: later runs reuse it without the engine (on a loaded
machine the engine may time out while the seed jobs start).

Without `--moto` (or with a path that is not there) the peer's columns are left empty and the script
says so. moto goes in a throwaway venv, never the project's:
`python -m venv /tmp/moto && /tmp/moto/bin/pip install 'moto[server]'`.
Needs the default training image (`hetero-emu image build`) and the serve extra. Figures are in
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
from serving import Server, running_server  # noqa: E402

from emulator.defaults import DEFAULT_IMAGE  # noqa: E402

ROLE = "arn:aws:iam::111122223333:role/SageMakerRole"
REGION = "us-west-2"
GROUP = "/aws/sagemaker/TrainingJobs"
BUCKET = "bench-data"
OBJECTS = 100
OBJECT_BYTES = 4096
WARM_UP = 50


@dataclass
class Target:
    """A running server: its process (whose CPU is read), its address, and what it was seeded with."""

    label: str
    pid: int
    url: str
    job: str = ""
    stream: str = ""


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of the process so far, every thread of it (proc(5): fields 14 and 15 of
    /proc/PID/stat, in clock ticks; the command name in field 2 may hold spaces, hence the rsplit)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def clients(url: str, service: str, count: int) -> list[Any]:
    """`count` clients of one service, one per thread (a boto3 session is not thread-safe)."""
    config = Config(retries={"max_attempts": 1}, max_pool_connections=4)
    return [boto3.Session(aws_access_key_id="emu", aws_secret_access_key="emu", region_name=REGION)
            .client(service, endpoint_url=url, config=config)
            for _ in range(count)]


def operations(target: Target) -> dict[str, tuple[str, Callable[[Any], Any]]]:
    """Operation name -> (service, one call on a client of it)."""
    return {
        "DescribeTrainingJob": ("sagemaker", lambda c: c.describe_training_job(TrainingJobName=target.job)),
        "ListTrainingJobs": ("sagemaker", lambda c: c.list_training_jobs(MaxResults=50)),
        "DescribeLogStreams": ("logs", lambda c: c.describe_log_streams(
            logGroupName=GROUP, logStreamNamePrefix=f"{target.job}/")),
        # As the SDKs read a stream: from its head, a page of up to 10,000 events.
        "GetLogEvents": ("logs", lambda c: c.get_log_events(
            logGroupName=GROUP, logStreamName=target.stream, startFromHead=True)),
        "GetObject": ("s3", lambda c: c.get_object(Bucket=BUCKET, Key="data/0000")["Body"].read()),
        "ListObjectsV2": ("s3", lambda c: c.list_objects_v2(Bucket=BUCKET, Prefix="data/")),
        "GetCallerIdentity": ("sts", lambda c: c.get_caller_identity()),
    }


def measure(target: Target, service: str, call: Callable[[Any], Any], calls: int, threads: int) -> dict[str, float]:
    """`calls` calls from `threads` threads: the server's CPU ms per call, and calls per second."""
    made = clients(target.url, service, threads)
    for client in made:
        for _ in range(max(1, WARM_UP // threads)):
            call(client)
    failures: list[BaseException] = []
    each = [calls // threads + (1 if i < calls % threads else 0) for i in range(threads)]

    def loop(client: Any, count: int) -> None:
        for _ in range(count):
            try:
                call(client)
            except Exception as err:  # counted and reported: a failed call spends CPU too
                failures.append(err)

    workers = [threading.Thread(target=loop, args=(c, n)) for c, n in zip(made, each, strict=True)]
    cpu0, t0 = cpu_seconds(target.pid), time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    wall, cpu = time.perf_counter() - t0, cpu_seconds(target.pid) - cpu0
    if failures:
        raise SystemExit(f"{target.label}: {len(failures)} of {calls} calls failed; the first: {failures[0]!r}")
    return {"cpu_ms": cpu * 1000 / calls, "calls_s": calls / wall}


# --------------------------------------------------------------------------------------------------
# Seeding


def job_request(name: str, bucket: str, hosts: int) -> dict[str, Any]:
    return {"TrainingJobName": name, "RoleArn": ROLE,
            "AlgorithmSpecification": {"TrainingImage": DEFAULT_IMAGE, "TrainingInputMode": "File",
                                       "ContainerEntrypoint": ["python3", "/opt/ml/input/data/code/train.py"]},
            "InputDataConfig": [{"ChannelName": "code", "DataSource": {"S3DataSource": {
                "S3DataType": "S3Prefix", "S3Uri": f"s3://{bucket}/code",
                "S3DataDistributionType": "FullyReplicated"}}}],
            "OutputDataConfig": {"S3OutputPath": f"s3://{bucket}/output"},
            "ResourceConfig": {"InstanceType": "ml.c5.xlarge", "InstanceCount": hosts, "VolumeSizeInGB": 30},
            "StoppingCondition": {"MaxRuntimeInSeconds": 900}}


def seed_s3(url: str) -> None:
    (s3,) = clients(url, "s3", 1)
    s3.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
    for i in range(OBJECTS):
        s3.put_object(Bucket=BUCKET, Key=f"data/{i:04d}", Body=os.urandom(OBJECT_BYTES))


def seed_served(target: Target, jobs: int, lines: int) -> None:
    """Real jobs: created through the server, run on the local engine, waited for."""
    seed_s3(target.url)
    (s3,) = clients(target.url, "s3", 1)
    (sagemaker,) = clients(target.url, "sagemaker", 1)
    script = f"for i in range({lines}):\n    print('step', i, 'loss', 1.0 / (i + 1), flush=True)\n"
    s3.put_object(Bucket=BUCKET, Key="code/train.py", Body=script.encode())
    names = [f"bench-{i}-{int(time.time())}" for i in range(jobs)]
    for name in names:
        sagemaker.create_training_job(**job_request(name, BUCKET, 2))
    deadline = time.monotonic() + 900
    described: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        described = [sagemaker.describe_training_job(TrainingJobName=n) for n in names]
        if all(d["TrainingJobStatus"] != "InProgress" for d in described):
            break
        time.sleep(2)
    failed = {d["TrainingJobName"]: d.get("FailureReason", d["TrainingJobStatus"]) for d in described
              if d["TrainingJobStatus"] != "Completed"}
    if failed:
        raise SystemExit(f"the seed jobs did not complete: {failed}")
    (logs,) = clients(target.url, "logs", 1)
    target.job = names[0]
    target.stream = logs.describe_log_streams(logGroupName=GROUP, logStreamNamePrefix=f"{names[0]}/")[
        "logStreams"][0]["logStreamName"]


def seed_moto(target: Target, jobs: int, lines: int) -> None:
    """The same things through moto's API: the jobs' requests, and each host's stream with its lines."""
    seed_s3(target.url)
    (sagemaker,) = clients(target.url, "sagemaker", 1)
    (logs,) = clients(target.url, "logs", 1)
    logs.create_log_group(logGroupName=GROUP)
    now = int(time.time() * 1000)
    for i in range(jobs):
        name = f"bench-{i}-{int(time.time())}"
        sagemaker.create_training_job(**job_request(name, BUCKET, 2))
        for host in ("algo-1", "algo-2"):
            stream = f"{name}/{host}-{now // 1000}"
            logs.create_log_stream(logGroupName=GROUP, logStreamName=stream)
            logs.put_log_events(logGroupName=GROUP, logStreamName=stream, logEvents=[
                {"timestamp": now, "message": f"step {n} loss {1.0 / (n + 1)}"} for n in range(lines)])
            if i == 0 and host == "algo-1":
                target.job, target.stream = name, stream


@contextmanager
def moto_server(path: str) -> Iterator[Target]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([path, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        else:
            raise SystemExit(f"{path} did not listen on port {port} within 60 s")
        yield Target("moto", process.pid, f"http://127.0.0.1:{port}")
    finally:
        # Ctrl-C, as for hetero-emu's own server (killed if it has not ended within 15 s).
        Server(f"http://127.0.0.1:{port}", REGION, Path(), Path(), process, []).stop(timeout=15)


def run_all(target: Target, args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Every operation, REPEAT times each in turn (so drift in the machine's load hits all alike)."""
    ops = operations(target)
    time.sleep(2.0)  # the first seconds after a start are not idle (imports finishing, the page's first look)
    idle0 = cpu_seconds(target.pid)
    time.sleep(3.0)
    idle = (cpu_seconds(target.pid) - idle0) * 1000 / 3.0  # what it spends answering nobody, ms/s
    samples: dict[str, list[dict[str, float]]] = {op: [] for op in ops}
    for _ in range(args.repeat):
        for op, (service, call) in ops.items():
            samples[op].append(measure(target, service, call, args.calls, args.threads))
    out: dict[str, dict[str, Any]] = {
        op: {"cpu_ms": statistics.median(s["cpu_ms"] for s in runs),
             "calls_s": statistics.median(s["calls_s"] for s in runs),
             "cpu_ms_runs": [round(s["cpu_ms"], 3) for s in runs]} for op, runs in samples.items()}
    out["_idle"] = {"cpu_ms_per_s": idle}
    return out


def table(rows: dict[str, Any]) -> str:
    served, moto = rows["hetero-emu"], rows.get("moto")
    lines = ["| operation | hetero-emu ms CPU/call | moto ms CPU/call | ratio | hetero-emu calls/s | moto calls/s |",
             "|---|---|---|---|---|---|"]
    for op, mine in served.items():
        peer = moto.get(op) if moto else None
        lines.append(f"| {op} | {mine['cpu_ms']:.2f} | " + (
            f"{peer['cpu_ms']:.2f} | {mine['cpu_ms'] / peer['cpu_ms']:.2f} | " if peer else "- | - | ")
            + f"{mine['calls_s']:.0f} | " + (f"{peer['calls_s']:.0f} |" if peer else "- |"))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per operation per measurement")
    parser.add_argument("--threads", type=int, default=4, help="client threads, each with its own clients")
    parser.add_argument("--repeat", type=int, default=3, help="measurements per operation (the median is shown)")
    parser.add_argument("--jobs", type=int, default=4, help="finished training jobs to seed")
    parser.add_argument("--lines", type=int, default=200, help="lines each job's host prints")
    parser.add_argument("--state", help="the server's folder (state and S3 root), seeded on the first run and "
                        "reused after: the engine is needed once")
    parser.add_argument("--moto", help="moto's server command (moto_server in a venv of its own)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON instead of a table")
    args = parser.parse_args()
    rows: dict[str, Any] = {}
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.state) if args.state else Path(tmp) / "served"
        seeded = folder / "seeded.json"
        with running_server(folder) as server:
            target = Target("hetero-emu", server.process.pid, server.url)
            if seeded.is_file():
                target.job, target.stream = json.loads(seeded.read_text())
            else:
                seed_served(target, args.jobs, args.lines)
                seeded.write_text(json.dumps([target.job, target.stream]))
            rows["hetero-emu"] = run_all(target, args)
    load.append(os.getloadavg()[0])
    skipped = None
    if args.moto and Path(args.moto).exists():
        with moto_server(args.moto) as peer:
            seed_moto(peer, args.jobs, args.lines)
            rows["moto"] = run_all(peer, args)
        load.append(os.getloadavg()[0])
    else:
        skipped = f"no moto_server at {args.moto}" if args.moto else "no --moto given"
    idle = {label: side.pop("_idle")["cpu_ms_per_s"] for label, side in rows.items()}
    if args.json:
        print(json.dumps({"calls": args.calls, "threads": args.threads, "repeat": args.repeat, "jobs": args.jobs,
                          "lines": args.lines, "cores": os.cpu_count(), "load_average": load,
                          "peer_skipped": skipped, "idle_cpu_ms_per_s": idle, "servers": rows}, indent=1))
        return
    print(f"{args.calls} calls per operation from {args.threads} threads, median of {args.repeat}; "
          f"{os.cpu_count()} cores, load average {' / '.join(f'{x:.1f}' for x in load)}")
    print("idle, each server spent " + ", ".join(f"{k} {v:.1f} ms of CPU per s" for k, v in idle.items()))
    if skipped:
        print(f"the peer (moto's server) is skipped: {skipped}")
    print(table(rows))


if __name__ == "__main__":
    main()
