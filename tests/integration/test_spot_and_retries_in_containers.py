"""Spot interruptions and platform errors injected into real jobs (docs/service-features.md): the
hosts are stopped, new ones start with a fresh /opt/ml and the checkpoints restored, and a script
that resumes from its checkpoint finishes the right number of epochs."""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path

import pytest
import yaml
from testkit import hetero_emu, unique

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image", "no_leftovers")]

# One epoch a second, and faults late enough that the first attempt has saved a checkpoint however
# long the toolkit takes to start on a loaded machine (CI runs four Docker tests at once: 5 s was
# once too short), and enough epochs that the second attempt cannot finish before the second.
EPOCHS = 40
# A resumable training script as people write them: rank 0 (the first host) saves a checkpoint at
# the end of each epoch (written aside, then renamed, so a stop never leaves half a file); every host
# resumes from the checkpoint it finds. Each host notes which attempt's /opt/ml it runs on.
SCRIPT = f'''
import json, os, time, uuid
ckpt = "/opt/ml/checkpoints/state.json"
host = json.loads(os.environ["SM_RESOURCE_CONFIG"])["current_host"]
os.makedirs("/opt/ml/output/data", exist_ok=True)
open(f"/opt/ml/output/data/run-{{uuid.uuid4().hex}}", "w").close()
start = json.load(open(ckpt))["epoch"] if os.path.exists(ckpt) else 0
print(f"{{host}} resuming from epoch {{start}}" if start else f"{{host}} starting", flush=True)
for epoch in range(start, {EPOCHS}):
    time.sleep(1)
    if host == "algo-1":
        with open(ckpt + ".tmp", "w") as out:
            json.dump({{"epoch": epoch + 1}}, out)
        os.replace(ckpt + ".tmp", ckpt)
    print(f"{{host}} epoch {{epoch + 1}} done", flush=True)
if host == "algo-1":
    open("/opt/ml/model/epochs.txt", "w").write(str({EPOCHS}))
'''


def project(tmp_path: Path, name: str, **fields: object) -> Path:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text(SCRIPT)
    (tmp_path / "ckpt").mkdir()
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({
        "job_name": name, "entry_point": "train.py", "source_dir": "code", "output_path": "out",
        "checkpoint_s3_uri": "ckpt", "max_run": 300,
        "instance_groups": [{"instance_group_name": "trainers", "instance_type": "ml.c5.xlarge", "instance_count": 1},
                            {"instance_group_name": "loaders", "instance_type": "ml.m5.xlarge", "instance_count": 1}],
        **fields}))
    return spec


def test_a_spot_job_resumes_from_its_checkpoint_across_two_interruptions(tmp_path: Path) -> None:
    name = unique("spot-resume")
    spec = project(tmp_path, name, use_spot_instances=True, max_wait=600)
    run = hetero_emu("run", spec, "--interrupt-at", "15s", "--interrupt-at", "35s", "--grace", "5", timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert (run.stdout + run.stderr).count("spot interruption (injected") == 2

    job = tmp_path / "out" / name
    doc = json.loads((job / "job.json").read_text())
    steps = [t["Status"] for t in doc["SecondaryStatusTransitions"]]
    assert steps.count("Interrupted") == 2 and steps[-1] == "Completed"
    assert [a["Ended"] for a in doc["Emulator"]["Attempts"]] == ["spot-interruption", "spot-interruption"]
    # The restarts are in TrainingTimeInSeconds, not in what is billed.
    assert doc["BillableTimeInSeconds"] < doc["TrainingTimeInSeconds"]

    resumes = {}
    for host in ("algo-1", "algo-2"):
        log = (job / "logs" / f"{host}.log").read_text()
        # The script's own lines, attempt by attempt. Only those are looked at: the toolkit's log
        # lines go to stderr, which the engine copies apart from stdout, so on a loaded machine one
        # may land between two of the script's.
        ours = re.findall(rf"^{host} (starting|resuming from epoch \d+|epoch \d+ done)\r?$", log, re.MULTILINE)
        runs: list[tuple[int, list[int]]] = []
        for line in ours:
            if line == "starting" or line.startswith("resuming"):
                runs.append((int(line.split()[-1]) if line.startswith("resuming") else 0, []))
            else:
                assert runs, (host, ours)
                runs[-1][1].append(int(line.split()[1]))
        # Three attempts: the second and third resume where the last checkpoint left off, each runs
        # the epochs after its checkpoint's one by one, and the last one finishes.
        resumes[host] = [first for first, _ in runs]
        assert len(runs) == 3 and 0 == runs[0][0] < runs[1][0] < runs[2][0] < EPOCHS, (host, runs)
        for first, epochs in runs:
            assert epochs == list(range(first + 1, first + 1 + len(epochs))), (host, first, epochs)
        assert runs[2][1][-1] == EPOCHS, (host, runs)
        if host == "algo-1":
            # The checkpoint is algo-1's: written after each epoch, just before it says so, so a
            # resume is at the epoch it last said done, or the one after when a stop came between.
            for (_, before), (again, _) in zip(runs, runs[1:], strict=False):
                assert before and again in (before[-1], before[-1] + 1), (host, runs)
        # New hosts: the last attempt's /opt/ml holds nothing of the earlier ones'.
        assert len(list((job / "hosts" / host / "output" / "data").glob("run-*"))) == 1
    # Both hosts start each attempt from the same restored checkpoint (each its own copy: algo-2,
    # which may lag or lead algo-1 by a few epochs, never sees algo-1's writes of the same attempt).
    assert resumes["algo-1"] == resumes["algo-2"], resumes
    assert json.loads((tmp_path / "ckpt" / "state.json").read_text()) == {"epoch": EPOCHS}
    with tarfile.open(job / "output" / "model.tar.gz") as tar:
        member = tar.extractfile("epochs.txt")
        assert member is not None and member.read() == str(EPOCHS).encode()


def test_a_platform_error_is_retried_as_the_retry_strategy_says(tmp_path: Path) -> None:
    name = unique("retry")
    spec = project(tmp_path, name, max_retry_attempts=1)
    run = hetero_emu("run", spec, "--inject", "platform-error@12s", timeout=400)
    assert run.returncode == 0, run.stdout + run.stderr
    doc = json.loads((tmp_path / "out" / name / "job.json").read_text())
    steps = [t["Status"] for t in doc["SecondaryStatusTransitions"]]
    assert steps.count("Restarting") == 1 and steps[-1] == "Completed"
    log = (tmp_path / "out" / name / "logs" / "algo-1.log").read_text()
    assert re.search(r"algo-1 resuming from epoch ([1-9]|[1-3][0-9])\n", log.replace("\r", ""))


def test_an_injection_the_service_could_never_make_is_refused_with_exit_code_2(tmp_path: Path) -> None:
    spec = project(tmp_path, unique("no-spot"))
    run = hetero_emu("run", spec, "--interrupt-at", "5s")
    assert run.returncode == 2
    assert "only a managed spot training job is interrupted" in run.stderr
    assert "Traceback" not in run.stderr
    late = hetero_emu("run", spec, "--inject", "platform-error@10m")
    assert late.returncode == 2 and "max_run is 300 s" in late.stderr
    assert not (tmp_path / "out").exists()  # nothing was started, nothing staged
