"""SDK v3's own HyperparameterTuner (`sagemaker.train.tuner`) over a ModelTrainer, unchanged but for
`sagemaker_session=EmulatorSessionV3(...)`, on the real engine: `tune(wait=True)` runs its trials as
training jobs here and sagemaker-core's HyperParameterTuningJob reads the answer (its best trial,
each trial's objective). v3 runs in .venv-sdk3 (it cannot share a venv with v2)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from test_sdk_v3 import REPO, sdk3_python  # noqa: F401  (the fixture: .venv-sdk3's python)

from emulator.defaults import DEFAULT_IMAGE

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image", "no_leftovers")]

SCRIPT = '''
import argparse, time
p = argparse.ArgumentParser()
p.add_argument("--lr", type=float)
p.add_argument("--epochs", type=int)
a, _ = p.parse_known_args()
for e in range(1, a.epochs + 1):
    print(f"epoch {e}: val_loss={abs(a.lr - 0.02) * 10 + 1.0 / e:.4f}", flush=True)
    time.sleep(0.2)
'''

USER_CODE = f'''
import json
from sagemaker.core.parameter import ContinuousParameter
from sagemaker.core.training.configs import Compute, SourceCode
from sagemaker.train import ModelTrainer
from sagemaker.train.tuner import HyperparameterTuner
from emulator.sagemaker.v3 import EmulatorSessionV3

session = EmulatorSessionV3(s3_root="s3")
trainer = ModelTrainer(role="arn:aws:iam::111122223333:role/R", training_image="{DEFAULT_IMAGE}",
                       sagemaker_session=session, source_code=SourceCode(source_dir="code", entry_script="train.py"),
                       compute=Compute(instance_type="ml.m5.large", instance_count=1), hyperparameters={{"epochs": 3}},
                       base_job_name="v3-tuning")
tuner = HyperparameterTuner(trainer, "val_loss", {{"lr": ContinuousParameter(0.001, 0.1)}},
                            metric_definitions=[{{"Name": "val_loss", "Regex": r"val_loss=([0-9.]+)"}}],
                            objective_type="Minimize", strategy="Random", random_seed=7, max_jobs=3,
                            max_parallel_jobs=2)
tuner.tune(wait=True)
job = tuner.latest_tuning_job
job.refresh()
trials = session.sagemaker_client.list_training_jobs_for_hyper_parameter_tuning_job(
    HyperParameterTuningJobName=job.hyper_parameter_tuning_job_name)["TrainingJobSummaries"]
print("RESULT " + json.dumps({{
    "status": job.hyper_parameter_tuning_job_status, "best": job.best_training_job.training_job_name,
    "trials": {{t["TrainingJobName"]: [t["TrainingJobStatus"], t["TunedHyperParameters"]["lr"],
                                      t["FinalHyperParameterTuningJobObjectiveMetric"]["Value"]] for t in trials}}}}))
'''


def test_v3s_tuner_runs_its_trials_here_and_names_the_best(sdk3_python: Path, tmp_path: Path) -> None:  # noqa: F811
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text(SCRIPT)
    (tmp_path / "s3").mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([str(sdk3_python), "-c", USER_CODE], capture_output=True, text=True, timeout=400,
                          env=env, cwd=tmp_path)
    results = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and len(results) == 1, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    result = json.loads(results[0][len("RESULT "):])
    assert result["status"] == "Completed"
    trials = result["trials"]
    assert len(trials) == 3 and {status for status, _, _ in trials.values()} == {"Completed"}
    # Each trial's objective is its script's last epoch for its own lr; the best is the least of them.
    for _, lr, value in trials.values():
        assert value == pytest.approx(abs(float(lr) - 0.02) * 10 + 1 / 3, abs=1e-3)
    assert result["best"] == min(trials, key=lambda name: trials[name][2])
