"""`hetero-emu tune SPEC` as a user runs it, in a process of its own on the real engine: a Grid search
of a heterogeneous job (each trial two instance groups), a row per trial, the best trial, the
tuning job described and its picture; a detached tuning job stopped with `hetero-emu stop`; a
`tuning:` section the service would refuse (exit 2, naming it)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from testkit import hetero_emu as cli
from testkit import unique

from emulator import api
from emulator.defaults import DEFAULT_IMAGE

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image", "no_leftovers")]

# Every host says which group it is in and what it got; the trainer's leader prints the objective,
# which the optimizer and the learning rate decide.
SCRIPT = '''
import json, os, time
hps = json.load(open("/opt/ml/input/config/hyperparameters.json"))
group = os.environ.get("SM_CURRENT_INSTANCE_GROUP")
print(f"HOST {os.environ['SM_CURRENT_HOST']} {group} lr={hps['lr']} optimizer={hps['optimizer']}", flush=True)
if group == "trainers":
    lr, optimizer = float(hps["lr"]), json.loads(hps["optimizer"])
    for epoch in range(1, int(hps["epochs"]) + 1):
        loss = abs(lr - 0.01) * 10 + (0.5 if optimizer == "sgd" else 0.0) + 1.0 / epoch
        print(f"epoch {epoch}: val_loss={loss:.4f}", flush=True)
        time.sleep(float(hps.get("pause", "0.2")))
'''


def spec(folder: Path, tuning: dict[str, Any], **hyperparameters: Any) -> Path:
    (folder / "code").mkdir(parents=True, exist_ok=True)
    (folder / "code" / "train.py").write_text(SCRIPT)
    raw = {"base_job_name": unique("tune"), "image_uri": DEFAULT_IMAGE, "entry_point": "train.py",
           "source_dir": "code",
           "instance_groups": [{"instance_group_name": "data", "instance_type": "ml.c5.xlarge", "instance_count": 1},
                               {"instance_group_name": "trainers", "instance_type": "ml.c5.xlarge",
                                "instance_count": 1}],
           "hyperparameters": {"epochs": 3, **hyperparameters},
           "metric_definitions": [{"Name": "val_loss", "Regex": "val_loss=([0-9.]+)"}],
           "tuning": {"objective_metric_name": "val_loss", "objective_type": "Minimize", **tuning}}
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_a_grid_search_of_a_heterogeneous_job_runs_every_combination_and_names_the_best(tmp_path: Path) -> None:
    path = spec(tmp_path, {"strategy": "Grid", "max_parallel_jobs": 2, "job_name": unique("grid")[:20],
                           "hyperparameter_ranges": {"lr": [0.001, 0.01], "optimizer": ["adam", "sgd"]}})
    name = yaml.safe_load(path.read_text())["tuning"]["job_name"]
    done = cli("tune", str(path), cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line for line in done.stdout.splitlines() if f"{name}-0" in line and not line.startswith("best:")]
    assert len(rows) == 4, done.stdout

    described = json.loads(cli("describe", name, "--json", cwd=tmp_path).stdout)
    assert described["HyperParameterTuningJobStatus"] == "Completed"
    summaries = described["TrainingJobSummaries"]
    combos = sorted((s["TunedHyperParameters"]["lr"], s["TunedHyperParameters"]["optimizer"]) for s in summaries)
    assert combos == [("0.001", '"adam"'), ("0.001", '"sgd"'), ("0.01", '"adam"'), ("0.01", '"sgd"')]
    # The best is the least final objective, worked out here from the trials' own rows.
    values = {s["TrainingJobName"]: s["FinalHyperParameterTuningJobObjectiveMetric"]["Value"] for s in summaries}
    assert described["BestTrainingJob"]["TrainingJobName"] == min(values, key=lambda n: values[n])
    assert described["BestTrainingJob"]["TunedHyperParameters"] == {"lr": "0.01", "optimizer": '"adam"'}

    # Each trial is a heterogeneous training job of its own: both groups' hosts ran with the trial's values.
    best = described["BestTrainingJob"]["TrainingJobName"]
    # The trial names its tuning job: DescribeTrainingJob's answer and its job.json (`describe --json`).
    assert api.description(best).doc["TuningJobArn"] == described["HyperParameterTuningJobArn"]
    trial = json.loads(cli("describe", best, "--json", cwd=tmp_path).stdout)
    assert trial["TuningJobArn"] == described["HyperParameterTuningJobArn"]
    logs = cli("logs", best, cwd=tmp_path).stdout
    assert "HOST algo-1 data lr=0.01 optimizer=\"adam\"" in logs and "HOST algo-2 trainers lr=0.01" in logs
    folder = Path(described["Emulator"]["Folder"])
    assert (folder / "tuning.svg").read_text().startswith("<?xml")
    assert json.loads((folder / "tuning.json").read_text())["HyperParameterTuningJobStatus"] == "Completed"


def test_a_detached_tuning_job_stops_with_its_trials(tmp_path: Path) -> None:
    path = spec(tmp_path, {"strategy": "Random", "max_jobs": 6, "max_parallel_jobs": 1,
                           "hyperparameter_ranges": {"lr": {"type": "continuous", "min_value": 0.001,
                                                            "max_value": 0.1},
                                                     "optimizer": ["adam", "sgd"]}},
                epochs=100, pause=0.5)
    started = cli("tune", str(path), "--detach", cwd=tmp_path)
    assert started.returncode == 0, started.stderr
    name = started.stdout.strip()
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:  # until the first trial's hosts run
        described = json.loads(cli("describe", name, "--json", cwd=tmp_path).stdout)
        rows = described.get("TrainingJobSummaries") or []
        if rows and "val_loss" in cli("logs", rows[0]["TrainingJobName"], cwd=tmp_path).stdout:
            break
        time.sleep(1)
    stopped = cli("stop", name, cwd=tmp_path)
    assert stopped.returncode == 0, stopped.stderr
    while time.monotonic() < deadline:
        described = json.loads(cli("describe", name, "--json", cwd=tmp_path).stdout)
        if described["HyperParameterTuningJobStatus"] in ("Completed", "Failed", "Stopped"):
            break
        time.sleep(1)
    assert described["HyperParameterTuningJobStatus"] == "Stopped"
    # The one trial that ran was stopped, and none started after the stop.
    assert [s["TrainingJobStatus"] for s in described["TrainingJobSummaries"]] == ["Stopped"]


def test_a_tuning_section_the_service_would_refuse_exits_2_naming_it(tmp_path: Path) -> None:
    path = spec(tmp_path, {"strategy": "Random", "max_jobs": 2, "objective_metric_name": "accuracy",
                           "hyperparameter_ranges": {"optimizer": ["adam", "sgd"]}})
    done = cli("tune", str(path), cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "tuning" in done.stderr and "accuracy" in done.stderr
    assert "Traceback" not in done.stderr


def test_ctrl_c_stops_the_tuning_job_and_its_trials_and_exits_130(tmp_path: Path) -> None:
    path = spec(tmp_path, {"strategy": "Random", "max_jobs": 4, "max_parallel_jobs": 2,
                           "job_name": unique("ctrl-c")[:20],
                           "hyperparameter_ranges": {"lr": {"type": "continuous", "min_value": 0.001,
                                                            "max_value": 0.1},
                                                     "optimizer": ["adam", "sgd"]}},
                epochs=200, pause=0.5)
    name = yaml.safe_load(path.read_text())["tuning"]["job_name"]
    proc = subprocess.Popen([sys.executable, "-m", "emulator.cli", "tune", str(path)], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "NO_COLOR": "1"})
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:  # until a trial's trainer prints its first epoch
            rows = api.tuning_description(name).get("TrainingJobSummaries") if api.is_tuning_job(name) else None
            if rows and any("val_loss" in cli("logs", r["TrainingJobName"], cwd=tmp_path).stdout for r in rows):
                break
            time.sleep(1)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out + err
    assert "stopping the tuning job" in err and f"{name}: Stopped" in out
    described = api.tuning_description(name)
    assert described["HyperParameterTuningJobStatus"] == "Stopped"
    assert {r["TrainingJobStatus"] for r in described["TrainingJobSummaries"]} == {"Stopped"}
