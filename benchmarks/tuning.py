"""What running trials as a tuning job costs over running the same training jobs yourself.

Two ways, in one process, on `hetero-emu/training:py311`, TRIALS one-host trials of a script that
prints its objective EPOCHS times and exits, at most PARALLEL at once:

- tuning: CreateHyperParameterTuningJob (Random, MaxNumberOfTrainingJobs=TRIALS,
  MaxParallelTrainingJobs=PARALLEL) through the tuning layer's service; timed from the create to the
  tuning job's end as its record says it (the loop's process, its trials' drivers and containers, the
  objective read, tuning.svg written);
- jobs: the same TRIALS CreateTrainingJob requests (the same hyperparameter values, drawn once)
  through the jobs layer's service, at most PARALLEL at once, started by this process as soon as one
  ends (it looks at the records every 20 ms, as `TrainingJobs.wait` does); timed from the first
  create to the last job's end: the strongest baseline, the same containers with no tuning loop.

Prints the median of REPEAT runs of each, their ratio and the overhead per trial. Everything it makes
goes under one temporary folder (state, S3 root, outputs) and is removed.

    python benchmarks/tuning.py [--trials 6] [--parallel 2] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

SCRIPT = """
import sys, time
args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
for epoch in range(int(args.get("--epochs", 3))):
    print(f"epoch {epoch}: val_loss={float(args['--xval']) + 1 / (epoch + 1):.4f}", flush=True)
"""


def request(name: str, trials: int, parallel: int, image: str) -> dict[str, Any]:
    return {
        "HyperParameterTuningJobName": name,
        "HyperParameterTuningJobConfig": {
            "Strategy": "Random", "RandomSeed": 1,
            "HyperParameterTuningJobObjective": {"Type": "Minimize", "MetricName": "val_loss"},
            "ResourceLimits": {"MaxNumberOfTrainingJobs": trials, "MaxParallelTrainingJobs": parallel},
            "ParameterRanges": {"ContinuousParameterRanges": [{"Name": "xval", "MinValue": "0", "MaxValue": "1"}]}},
        "TrainingJobDefinition": {
            "AlgorithmSpecification": {"TrainingImage": image, "TrainingInputMode": "File",
                                       "MetricDefinitions": [{"Name": "val_loss", "Regex": "val_loss=([0-9.]+)"}]},
            "StaticHyperParameters": {"sagemaker_program": '"train.py"', "sagemaker_submit_directory": '"code"',
                                      "epochs": "3"},
            "RoleArn": "arn:aws:iam::111122223333:role/bench", "OutputDataConfig": {"S3OutputPath": "out"},
            "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 30},
            "StoppingCondition": {"MaxRuntimeInSeconds": 600}}}


def run_tuning(root: Path, trials: int, parallel: int, image: str) -> float:
    from emulator.jobs.service import TrainingJobs
    from emulator.state import tuning_records
    from emulator.tuning.service import FINAL, TuningJobs

    training = TrainingJobs(root / "s3", region="us-west-2", base_dir=root)
    service = TuningJobs(training, max_parallel=parallel)
    name = f"bench-{uuid.uuid4().hex[:8]}"
    start = time.perf_counter()
    service.create(request(name, trials, parallel, image))
    while (tuning_records.read(name) or {}).get("HyperParameterTuningJobStatus") not in FINAL:
        time.sleep(0.02)
    took = time.perf_counter() - start
    doc = tuning_records.read(name) or {}
    assert doc.get("HyperParameterTuningJobStatus") == "Completed", (doc.get("FailureReason"), [
        (t.get("TrainingJobStatus"), t.get("FailureReason")) for t in doc.get("Trials") or []])
    return took


def run_jobs(root: Path, trials: int, parallel: int, image: str) -> float:
    from emulator.jobs.service import TrainingJobs
    from emulator.tuning import trials as trial_requests

    training = TrainingJobs(root / "s3", region="us-west-2", base_dir=root)
    definition = request("x", trials, parallel, image)["TrainingJobDefinition"]
    rng = random.Random(1)
    waiting = [trial_requests.trial_request(definition, {"xval": str(rng.random())}, f"job-{uuid.uuid4().hex[:8]}",
                                            []) for _ in range(trials)]
    running: list[str] = []
    names = [p["TrainingJobName"] for p in waiting]
    start = time.perf_counter()
    while waiting or running:
        running = [n for n in running if not training.checked(training.found(n)).status.is_final]
        while waiting and len(running) < parallel:
            params = waiting.pop(0)
            training.create(params)
            running.append(params["TrainingJobName"])
        time.sleep(0.02)
    took = time.perf_counter() - start
    assert {str(training.found(n).status) for n in names} == {"Completed"}
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from emulator.defaults import DEFAULT_IMAGE

    with tempfile.TemporaryDirectory(prefix="bench-tuning-") as folder:
        root = Path(folder)
        os.environ["HETERO_EMU_STATE_DIR"] = str(root / "state")
        (root / "code").mkdir()
        (root / "code" / "train.py").write_text(SCRIPT)
        (root / "s3").mkdir()
        os.chdir(root)
        times: dict[str, list[float]] = {"tuning": [], "jobs": []}
        for _ in range(args.repeat):
            times["jobs"].append(run_jobs(root, args.trials, args.parallel, DEFAULT_IMAGE))
            times["tuning"].append(run_tuning(root, args.trials, args.parallel, DEFAULT_IMAGE))
    tuning, jobs = statistics.median(times["tuning"]), statistics.median(times["jobs"])
    load = os.getloadavg()[0]
    print(f"{args.trials} trials, {args.parallel} at once, median of {args.repeat} (load {load:.1f}):")
    print(f"  jobs created by this process: {jobs:6.2f} s  {[round(t, 2) for t in times['jobs']]}")
    print(f"  a tuning job:                 {tuning:6.2f} s  {[round(t, 2) for t in times['tuning']]}")
    print(f"  ratio tuning/jobs: {tuning / jobs:.2f}x; overhead per trial {(tuning - jobs) / args.trials:+.2f} s")


if __name__ == "__main__":
    main()
