"""Where the time of an MPI job goes: the emulator's part against the toolkit's and the script's.

Runs a 3-host job whose one instance group runs MPI (1 process per host, the real toolkit's `train`
in the default image): an allreduce, then exit. Splits the end-to-end time (the whole `run_job`)
into:
- ours: everything but the hosts' run (validate, plan, keys, stage, network, create and start,
  collect, job.json, teardown): total minus `Emulator.Seconds.Training` of job.json;
- the toolkit's: the hosts' run minus the script's own span (sshd start and the wait for the
  workers, mpirun's launch over ssh, and the ~30 s every MPI worker sleeps after `orted` ends:
  sagemaker_training/mpi.py WorkerRunner.run);
- the script's: from the first rank's start to the last rank's end, as the ranks print them.
Prints the median of --repeat runs. Needs the default image (`hetero-emu image build`).

    python benchmarks/mpi_job.py [--repeat 3] [--hosts 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from emulator.jobspec import validate
from emulator.reports.console import RecordingReporter
from emulator.run.runner import run_job

SCRIPT = '''\
import json, time
t0 = time.time()
from mpi4py import MPI
comm = MPI.COMM_WORLD
total = comm.allreduce(comm.Get_rank() + 1)
spans = comm.gather((t0, time.time()))
if comm.Get_rank() == 0:
    print("SPAN_JSON " + json.dumps({"start": min(s for s, _ in spans), "end": max(e for _, e in spans),
                                    "total": total}), flush=True)
'''


def once(hosts: int, workdir: Path) -> dict[str, float]:
    code = workdir / "code"
    code.mkdir(parents=True)
    (code / "train.py").write_text(SCRIPT)
    spec = validate({
        "base_job_name": "bench-mpi", "entry_point": "train.py", "source_dir": "code", "output_path": "out",
        "instance_type": "ml.c5.xlarge", "instance_count": hosts,
        "distribution": {"mpi": {"enabled": True, "processes_per_host": 1}},
    }, base_dir=workdir)
    reporter = RecordingReporter()
    start = time.perf_counter()
    result = run_job(spec, reporter=reporter)
    total = time.perf_counter() - start
    if result.status != "Completed":
        raise SystemExit(f"the MPI job failed: {result.failure_reason}")
    span = next(json.loads(line[line.index("SPAN_JSON ") + 10:]) for _host, _group, line in reporter.lines
                if "SPAN_JSON " in line)
    if span["total"] != hosts * (hosts + 1) // 2:
        raise SystemExit(f"wrong allreduce: {span}")
    training = json.loads((result.job_dir / "job.json").read_text())["Emulator"]["Seconds"]["Training"]
    script = span["end"] - span["start"]
    return {"total": total, "ours": total - training, "toolkit": training - script, "script": script}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--hosts", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runs = [once(args.hosts, Path(tmp) / str(i)) for i in range(args.repeat)]
    print(f"{args.hosts}-host MPI job, median of {args.repeat}:")
    for key in ("total", "ours", "toolkit", "script"):
        print(f"  {key:>8}: {statistics.median(r[key] for r in runs):7.2f} s")


if __name__ == "__main__":
    main()
