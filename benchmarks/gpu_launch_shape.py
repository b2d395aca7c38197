"""The service's launch shape on a small machine: an MPI job of 4 `ml.p4d.24xlarge` hosts (8 GPUs each)
with `--gpus emulate` starts 8 ranks per host, 32 ranks, where `--gpus none` starts 1 per host. On a
2-core machine that overloads it; this measures how long it takes.

Each rank imports mpi4py, does an allreduce (mpi_job.py's script), and sleeps 5 s; then the job ends
as every MPI job does (the toolkit's workers sleep 30 s after `orted` ends). Prints, per mode, the
median of --repeat runs of: the whole run, the hosts' run (job.json `Emulator.Seconds.Training`),
the script's own span (first rank's start to last rank's end), and the ratio emulate / none of
each. Needs the default image (`hetero-emu image build`).

    python benchmarks/gpu_launch_shape.py [--repeat 1] [--hosts 4] [--type ml.p4d.24xlarge]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from mpi_job import SCRIPT as MPI_SCRIPT

from emulator.jobspec import validate
from emulator.options import RunOptions
from emulator.reports.console import RecordingReporter
from emulator.run.runner import run_job

# mpi_job.py's ranks (an allreduce, rank 0 prints the span), then past the toolkit's once-a-second
# look for orted on the workers (docs/gpus.md, the MPI worker that misses a short job): a rank that
# ends at once may leave a worker waiting 20 minutes.
SCRIPT = MPI_SCRIPT + "time.sleep(5)\n"


def once(mode: str, hosts: int, kind: str, workdir: Path) -> dict[str, float]:
    code = workdir / "code"
    code.mkdir(parents=True)
    (code / "train.py").write_text(SCRIPT)
    spec = validate({
        "base_job_name": f"bench-shape-{mode}", "entry_point": "train.py", "source_dir": "code",
        "output_path": "out", "instance_type": kind, "instance_count": hosts,
        # Every host's memory is the machine's: a p4d's 1,152 GiB limit would limit nothing anyway.
        "distribution": {"mpi": {"enabled": True}},
    }, base_dir=workdir)
    t0 = time.monotonic()
    result = run_job(spec, RunOptions(gpus=mode, memory="none"), reporter=RecordingReporter())  # type: ignore[arg-type]
    total = time.monotonic() - t0
    assert result.status == "Completed", result.failure_reason
    described = json.loads((result.job_dir / "job.json").read_text())
    span = None
    for line in (result.job_dir / "logs" / "algo-1.log").read_text(errors="replace").splitlines():
        if "SPAN_JSON " in line:
            span = json.loads(line.split("SPAN_JSON ", 1)[1])
    assert span is not None, "rank 0 printed no span"
    # The allreduce of rank + 1 over n ranks is n(n+1)/2.
    ranks = round(((8 * span["total"] + 1) ** 0.5 - 1) / 2)
    return {"total": total, "hosts": described["Emulator"]["Seconds"]["Training"],
            "script": span["end"] - span["start"], "ranks": ranks}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--type", default="ml.p4d.24xlarge")
    args = parser.parse_args()
    medians: dict[str, dict[str, float]] = {}
    for mode in ("none", "emulate"):
        runs = []
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as folder:
                runs.append(once(mode, args.hosts, args.type, Path(folder)))
        medians[mode] = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        m = medians[mode]
        print(f"--gpus {mode:<8} {int(m['ranks']):>3} ranks on {os.cpu_count()} cores: run {m['total']:.1f} s, "
              f"hosts {m['hosts']:.1f} s, script {m['script']:.1f} s")
    none, emulated = medians["none"], medians["emulate"]
    ratios = {key: emulated[key] / none[key] for key in ("total", "hosts", "script")}
    print(f"emulate / none: run {ratios['total']:.2f}x, hosts {ratios['hosts']:.2f}x, script {ratios['script']:.2f}x")


if __name__ == "__main__":
    main()
