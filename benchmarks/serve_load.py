"""`hetero-emu serve` under load, against the in-process session doing the same, in one process.

While JOBS jobs of HOSTS hosts each run (their hosts print a line a second), CLIENTS threads each
with its own boto3 clients call DescribeTrainingJob, ListTrainingJobs and GetLogEvents in turn for
SECONDS, and one more thread uploads UPLOAD_MIB through S3 in parallel parts (boto3's upload_file,
8 MiB parts, 8 at a time). The same calls are then made through the in-process session (botocore
answered inside the process, `emulator.aws.stub`), the strongest baseline: the same operations with
no HTTP at all. Printed: requests per second, p50/p99 latency per operation, S3 MB/s, the ratio of
each to the baseline, failed requests (must be 0), and the jobs' final statuses (must be
Completed). The server is stopped with SIGINT at the end and the script checks nothing of it is left.
"GetLogEvents" is a DescribeLogStreams then a GetLogEvents (two requests, counted as one call), as the
SDKs read a job's log.

    python benchmarks/serve_load.py [--clients 50] [--seconds 30] [--jobs 4] [--hosts 4] [--upload-mib 1024]

Needs the default training image (`hetero-emu image build`) and the serve extra.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "unit"))
from serving import running_server  # noqa: E402

from emulator.sagemaker.local import local_aws  # noqa: E402

ROLE = "arn:aws:iam::111122223333:role/SageMakerRole"
SCRIPT = b"import time\nfor i in range(40):\n    print('step', i, flush=True)\n    time.sleep(1)\n"
MIB = 1024 * 1024


def start_jobs(make: Callable[[str], Any], prefix: str, jobs: int, hosts: int) -> list[str]:
    s3, sagemaker = make("s3"), make("sagemaker")
    bucket = f"{prefix}-load"
    s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    s3.put_object(Bucket=bucket, Key="code/train.py", Body=SCRIPT)
    names = []
    for i in range(jobs):
        name = f"{prefix}-load-{i}-{int(time.time())}"
        sagemaker.create_training_job(
            TrainingJobName=name, RoleArn=ROLE,
            AlgorithmSpecification={"TrainingImage": "hetero-emu/training:py311", "TrainingInputMode": "File",
                                    "ContainerEntrypoint": ["python3", "/opt/ml/input/data/code/train.py"]},
            InputDataConfig=[{"ChannelName": "code", "DataSource": {"S3DataSource": {
                "S3DataType": "S3Prefix", "S3Uri": f"s3://{bucket}/code",
                "S3DataDistributionType": "FullyReplicated"}}}],
            OutputDataConfig={"S3OutputPath": f"s3://{bucket}/output"},
            ResourceConfig={"InstanceType": "ml.c5.xlarge", "InstanceCount": hosts, "VolumeSizeInGB": 30},
            StoppingCondition={"MaxRuntimeInSeconds": 900})
        names.append(name)
    return names


def load(make: Callable[[str], Any], names: list[str], clients: int, seconds: float, upload: Path,
         bucket: str) -> dict[str, Any]:
    latencies: dict[str, list[float]] = defaultdict(list)
    failures: list[str] = []
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def client_loop(n: int) -> None:
        sagemaker, logs = make("sagemaker"), make("logs")
        name = names[n % len(names)]
        calls: list[tuple[str, Callable[[], Any]]] = [
            ("DescribeTrainingJob", lambda: sagemaker.describe_training_job(TrainingJobName=name)),
            ("ListTrainingJobs", lambda: sagemaker.list_training_jobs(MaxResults=50)),
            ("GetLogEvents", lambda: read_log(logs, name)),
        ]
        i = 0
        while time.monotonic() < stop_at:
            op, call = calls[i % len(calls)]
            i += 1
            t0 = time.perf_counter()
            try:
                call()
            except Exception as err:
                with lock:
                    failures.append(f"{op}: {err}")
                continue
            with lock:
                latencies[op].append(time.perf_counter() - t0)

    upload_seconds: list[float] = []

    def uploader() -> None:
        s3 = make("s3")
        t0 = time.perf_counter()
        try:
            s3.upload_file(str(upload), bucket, "big/upload.bin", Config=TransferConfig(
                multipart_threshold=8 * MIB, multipart_chunksize=8 * MIB, max_concurrency=8))
        except Exception as err:
            with lock:
                failures.append(f"upload: {err}")
            return
        upload_seconds.append(time.perf_counter() - t0)

    threads = [threading.Thread(target=client_loop, args=(n,)) for n in range(clients)]
    threads.append(threading.Thread(target=uploader))
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    count = sum(len(v) for v in latencies.values())
    return {"rps": count / seconds, "latencies": latencies, "failures": failures, "elapsed": elapsed,
            "upload_mb_s": upload.stat().st_size / MIB / upload_seconds[0] if upload_seconds else 0.0}


def read_log(logs: Any, job: str) -> Any:
    """GetLogEvents on the job's first host stream; DescribeLogStreams until there is one (a job still
    staging has none yet, as on the service)."""
    found = logs.describe_log_streams(logGroupName="/aws/sagemaker/TrainingJobs",
                                      logStreamNamePrefix=f"{job}/")["logStreams"]
    if not found:
        return None
    return logs.get_log_events(logGroupName="/aws/sagemaker/TrainingJobs",
                               logStreamName=found[0]["logStreamName"], limit=100)


def wait_all(make: Callable[[str], Any], names: list[str]) -> dict[str, str]:
    sagemaker = make("sagemaker")
    statuses: dict[str, str] = {}
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        statuses = {n: sagemaker.describe_training_job(TrainingJobName=n)["TrainingJobStatus"] for n in names}
        if all(s != "InProgress" for s in statuses.values()):
            break
        time.sleep(2)
    return statuses


def report(label: str, result: dict[str, Any], base: dict[str, Any] | None) -> None:
    print(f"\n{label}: {result['rps']:.0f} calls/s, S3 upload {result['upload_mb_s']:.0f} MB/s, "
          f"{len(result['failures'])} failed" + (f" (first: {result['failures'][0]})" if result["failures"] else ""))
    for op, values in sorted(result["latencies"].items()):
        values = sorted(values)
        p50 = statistics.median(values) * 1000
        p99 = values[min(len(values) - 1, int(len(values) * 0.99))] * 1000
        line = f"  {op:<20} {len(values):>7} calls  p50 {p50:7.1f} ms  p99 {p99:7.1f} ms"
        if base is not None and base["latencies"].get(op):
            b = sorted(base["latencies"][op])
            b50 = statistics.median(b) * 1000
            line += f"  (in-process p50 {b50:.1f} ms: x{p50 / b50:.1f})"
        print(line)
    if base is not None:
        print(f"  calls/s vs in-process: {result['rps'] / base['rps']:.2f}; S3 upload vs in-process: "
              f"{result['upload_mb_s'] / max(base['upload_mb_s'], 1e-9):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--upload-mib", type=int, default=1024)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_text:
        tmp = Path(tmp_text)
        upload = tmp / "upload.bin"
        with upload.open("wb") as f:
            for _ in range(args.upload_mib):
                f.write(os.urandom(MIB))
        os.environ["HETERO_EMU_STATE_DIR"] = str(tmp / "state")
        pool = {"max_pool_connections": 64, "retries": {"max_attempts": 1}}

        # The baseline: the in-process session, the same calls answered inside botocore.
        (tmp / "s3-in-process").mkdir()
        aws = local_aws(s3_root=tmp / "s3-in-process", images=None, region="us-west-2", engine="docker",
                        origin="benchmark")
        local_lock = threading.Lock()

        def make_local(service: str) -> Any:
            with local_lock:  # boto3 sessions are not thread-safe while they make clients
                return aws.boto_session.client(service, config=Config(**pool))  # type: ignore[arg-type]

        names = start_jobs(make_local, "local", args.jobs, args.hosts)
        base = load(make_local, names, args.clients, args.seconds, upload, "local-load")
        base_statuses = wait_all(make_local, names)

        with running_server(tmp / "server") as server:
            session = boto3.Session(aws_access_key_id="emu", aws_secret_access_key="emu", region_name=server.region)
            served_lock = threading.Lock()

            def make_served(service: str) -> Any:
                with served_lock:
                    return session.client(service, endpoint_url=server.url,  # type: ignore[call-overload]
                                          config=Config(**pool))

            served_names = start_jobs(make_served, "served", args.jobs, args.hosts)
            served = load(make_served, served_names, args.clients, args.seconds, upload, "served-load")
            served_statuses = wait_all(make_served, served_names)
            code, _ = server.stop()
        print(f"{args.clients} clients for {args.seconds:.0f} s while {args.jobs} jobs of {args.hosts} hosts ran; "
              f"{args.upload_mib} MiB uploaded in 8 MiB parts")
        report("in-process session", base, None)
        report("hetero-emu serve", served, base)
        print(f"\njobs: in-process {sorted(set(base_statuses.values()))}, "
              f"served {sorted(set(served_statuses.values()))}; server exit code {code}")
        leftovers = os.popen("docker ps -aq --filter label=io.hetero-emu.managed").read().split()
        print(f"containers left: {len(leftovers)}")


if __name__ == "__main__":
    main()
