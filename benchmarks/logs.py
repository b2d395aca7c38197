"""Log throughput: how fast the hosts' output reaches `logs/algo-N.log`, against plain docker-py.

Two hosts each write MB megabytes of 100-byte lines to stdout as fast as they can and exit (the
script is the container's entry point, so the toolkit is not in the way). Measured in one process:

- emulator, console off (`--quiet`): the whole `run_job`, a secret in the environment so masking is on;
- emulator, console to a file, and console to /dev/null (the console may fall behind and summarise);
- baseline A: plain docker-py, the same two containers created and started concurrently, each one's
  output read with `container.logs(stream=True, follow=True)` into a file, as docker-py users do,
  with json-file logging without rotation. It may lose bytes even so (Docker 20.10's follow ends
  when the container does, before the reader has caught up): the figure printed says how many it kept;
- baseline B: plain docker-py, the same containers with no log driver, each one's output read with
  `container.attach(stream=True)` attached before the start, into a file (what the emulator does,
  without masking or a console).

Each figure is MB of host output in the files per second of wall-clock time from the first create
to the last byte written (emulator: the whole run_job, including staging and teardown). Prints the
median of REPEAT runs and the ratio to the stronger baseline. Needs the default image.

    python benchmarks/logs.py [--mb 200] [--repeat 3]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker

from emulator.defaults import DEFAULT_IMAGE
from emulator.jobspec import validate
from emulator.reports.console import ConsoleReporter
from emulator.run.runner import run_job

FLOOD = """
import os, sys
line = b"%s\\n" % (b"x" * 99)
block = line * 10_000
for _ in range(int(sys.argv[1])):
    view = memoryview(block)
    while view:
        view = view[os.write(1, view):]
"""
HOSTS = 2


def command(mb: int) -> list[str]:
    return ["python3", "-c", FLOOD, str(mb)]


def emulator_once(mb: int, workdir: Path, console: str) -> float:
    raw = {
        "job_name": f"bench-logs-{uuid.uuid4().hex[:8]}",
        "container_entry_point": command(mb),
        "environment": {"BENCH_API_KEY": "not-in-the-output-1234"},
        "instance_type": "ml.c5.xlarge",
        "instance_count": HOSTS,
        "output_path": str(workdir),
    }
    spec = validate(raw, base_dir=workdir)
    sink: Any
    if console == "off":
        sink = io.StringIO()
    elif console == "file":
        sink = open(workdir / f"console-{raw['job_name']}.txt", "w")  # noqa: SIM115
    else:
        sink = open(os.devnull, "w")  # noqa: SIM115
    with sink:
        reporter = ConsoleReporter(out=sink, err=sink, quiet=console == "off", colour=False, live=False)
        start = time.perf_counter()
        result = run_job(spec, reporter=reporter)
        elapsed = time.perf_counter() - start
    written = sum((result.job_dir / "logs" / f"algo-{i}.log").stat().st_size for i in range(1, HOSTS + 1))
    if result.status != "Completed" or written != HOSTS * mb * 1_000_000:
        raise SystemExit(f"emulator run: {result.status}, {written} bytes in the logs")
    return elapsed


def baseline_once(client: docker.DockerClient, mb: int, workdir: Path, attach: bool) -> tuple[float, int]:
    tag = uuid.uuid4().hex[:8]
    start = time.perf_counter()
    log_config = (docker.types.LogConfig(type="none") if attach else
                  docker.types.LogConfig(type="json-file", config={"max-size": "100g", "max-file": "1"}))
    containers = [client.containers.create(DEFAULT_IMAGE, command(mb), name=f"bench-logs-{tag}-{i}",
                                           log_config=log_config) for i in range(HOSTS)]
    threads = []
    try:
        for i, c in enumerate(containers):
            path = workdir / f"baseline-{tag}-{i}.log"
            stream = c.attach(stdout=True, stderr=True, stream=True) if attach else None

            def pump(c: Any = c, path: Path = path, stream: Any = stream) -> None:
                chunks = stream if stream is not None else c.logs(stream=True, follow=True)
                with open(path, "wb") as f:
                    for chunk in chunks:
                        f.write(chunk)

            threads.append(threading.Thread(target=pump))
        if attach:
            for t in threads:
                t.start()
        for c in containers:
            c.start()
        if not attach:
            for t in threads:
                t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - start
    finally:
        for c in containers:
            c.remove(force=True)
    written = sum(p.stat().st_size for p in workdir.glob(f"baseline-{tag}-*.log"))
    return elapsed, written


def median(runs: int, once: Callable[[], float]) -> float:
    return statistics.median(once() for _ in range(runs))


def median_kept(runs: int, once: Callable[[], tuple[float, int]]) -> tuple[float, int]:
    """Median seconds, and the fewest bytes any run kept."""
    results = [once() for _ in range(runs)]
    return statistics.median(r[0] for r in results), min(r[1] for r in results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=200, help="MB each host writes")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    client = docker.from_env()
    total = HOSTS * args.mb
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        kept = {
            "baseline A: docker-py logs(follow), json-file": median_kept(
                args.repeat, lambda: baseline_once(client, args.mb, workdir, attach=False)),
            "baseline B: docker-py attach, no log driver": median_kept(
                args.repeat, lambda: baseline_once(client, args.mb, workdir, attach=True)),
        }
        figures = {
            **{name: seconds for name, (seconds, _) in kept.items()},
            "emulator, console off, masking on": median(args.repeat, lambda: emulator_once(args.mb, workdir, "off")),
            "emulator, console to a file": median(args.repeat, lambda: emulator_once(args.mb, workdir, "file")),
            "emulator, console to /dev/null": median(args.repeat, lambda: emulator_once(args.mb, workdir, "null")),
        }
    # The stronger baseline is the faster of those that kept every byte.
    complete = [figures[k] for k, (_, n) in kept.items() if n == total * 1_000_000]
    best = min(complete or [figures[k] for k in kept])
    print(f"{HOSTS} hosts x {args.mb} MB of 100-byte lines, median of {args.repeat}")
    for name, seconds in figures.items():
        note = ""
        if name in kept and kept[name][1] != total * 1_000_000:
            note = f"  (lost bytes: kept {kept[name][1] / 1e6:.0f} of {total} MB in its worst run)"
        print(f"  {name:<50} {seconds:6.2f} s  {total / seconds:6.1f} MB/s  x{best / seconds:.2f} of the "
              f"stronger baseline{note}")


if __name__ == "__main__":
    main()
