"""How fast Pipe mode streams a local file into a container (issue 9: at least 200 MB/s on this
machine), next to the same bytes read from a read-only bind mount in a container (File mode's path).

A one-host job on the default image whose channel is one file in Pipe mode: the script reads epochs
0..R-1 of its FIFO with 1 MiB reads and prints each epoch's MB/s, timed in the container from the
moment open() returns to EOF. The baselines read the same file, in the same image, through a
read-only bind mount: with the same Python loop, and with `cat file > /dev/null`. The file is read
once beforehand so that every figure is from the page cache: what is measured is the path into the
container, not the disk.

    python benchmarks/pipe_throughput.py [--size-mb 1024] [--epochs 3] [--record-io]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from emulator.defaults import DEFAULT_IMAGE
from emulator.jobspec import validate
from emulator.options import RunOptions
from emulator.reports.console import RecordingReporter
from emulator.run.runner import run_job

PYTHON = "/opt/venv/bin/python"
# Runs in the container: read `path` to EOF (or each epoch's FIFO), print MB/s per read.
READER = """
import json, os, sys, time
def drain(path):
    for _ in range(2000):
        if os.path.exists(path):
            break
        time.sleep(0.005)
    buffer = bytearray(1 << 20)
    fd = os.open(path, os.O_RDONLY)
    began, total = time.perf_counter(), 0
    while True:
        n = os.readv(fd, [buffer])
        if not n:
            break
        total += n
    seconds = time.perf_counter() - began
    os.close(fd)
    return {"bytes": total, "seconds": seconds, "mb_s": total / seconds / 1e6}
paths = sys.argv[1:]
print("RATES " + json.dumps([drain(p) for p in paths]), flush=True)
"""


def make_file(folder: Path, size_mb: int) -> Path:
    path = folder / "data" / "blob.bin"
    path.parent.mkdir(parents=True)
    block = os.urandom(1 << 20)
    with open(path, "wb") as out:
        for _ in range(size_mb):
            out.write(block)
    with open(path, "rb") as warm:  # into the page cache
        while warm.read(1 << 24):
            pass
    return path


def pipe_rates(folder: Path, data: Path, epochs: int, record_io: bool) -> list[dict[str, float]]:
    fifos = [f"/opt/ml/input/data/train_{n}" for n in range(epochs)]
    (folder / "code").mkdir()
    (folder / "code" / "reader.py").write_text(READER)
    spec = validate({
        "job_name": f"pipe-bench-{int(time.time())}", "image_uri": DEFAULT_IMAGE, "instance_type": "ml.c5.xlarge",
        "source_dir": str(folder / "code"), "container_entry_point": [PYTHON, "/opt/ml/code/reader.py"],
        "container_arguments": fifos, "output_path": str(folder / "out"),
        "inputs": {"train": {"s3_data": str(data.parent), "input_mode": "Pipe",
                             "record_wrapping": "RecordIO" if record_io else "None"}},
    }, folder)
    reporter = RecordingReporter()
    result = run_job(spec, RunOptions(memory="none"), reporter=reporter)
    if result.status != "Completed":
        raise SystemExit(f"the pipe job failed: {result.failure_reason}")
    (line,) = [text for _, _, text in reporter.lines if text.startswith("RATES ")]
    return json.loads(line[6:])  # type: ignore[no-any-return]


def mount_rates(data: Path, repeat: int) -> tuple[list[dict[str, float]], list[float]]:
    """The Python loop and `cat` reading the file over a read-only bind mount, `repeat` times each."""
    mount = ["-v", f"{data.parent}:/data:ro"]
    out = subprocess.run(["docker", "run", "--rm", *mount, DEFAULT_IMAGE, PYTHON, "-c", READER,
                          *["/data/blob.bin"] * repeat], check=True, capture_output=True, text=True).stdout
    python = json.loads(next(line for line in out.splitlines() if line.startswith("RATES "))[6:])
    timed_cat = (f"for i in $(seq {repeat}); do s=$(date +%s.%N); cat /data/blob.bin > /dev/null; "
                 "e=$(date +%s.%N); echo $s $e; done")
    out = subprocess.run(["docker", "run", "--rm", *mount, DEFAULT_IMAGE, "sh", "-c", timed_cat],
                         check=True, capture_output=True, text=True).stdout
    size = data.stat().st_size
    cat = [size / (float(end) - float(start)) / 1e6 for start, end in (line.split() for line in out.splitlines())]
    return python, cat


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=1024, help="the file's size in MiB (default 1024)")
    parser.add_argument("--epochs", type=int, default=3, help="epochs read, and baseline repeats (default 3)")
    parser.add_argument("--record-io", action="store_true", help="wrap the file in RecordIO as it is streamed")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pipe-bench-", dir=os.environ.get("TMPDIR", "/tmp")) as tmp:
        folder = Path(tmp)
        data = make_file(folder, args.size_mb)
        piped = pipe_rates(folder, data, args.epochs, args.record_io)
        python, cat = mount_rates(data, args.epochs)
    print(f"{args.size_mb} MiB file, page cache, {args.epochs} runs each, MB/s (10^6 bytes/s), median [min-max]")
    rows = [("Pipe mode, FIFO" + (" (RecordIO)" if args.record_io else ""), [r["mb_s"] for r in piped]),
            ("bind mount, same Python reader", [r["mb_s"] for r in python]),
            ("bind mount, cat > /dev/null", cat)]
    for name, rates in rows:
        print(f"  {name:<34} {statistics.median(rates):8.0f}  [{min(rates):.0f}-{max(rates):.0f}]")
    size = args.size_mb << 20
    assert all(r["bytes"] >= size for r in piped), "an epoch came short"


if __name__ == "__main__":
    main()
