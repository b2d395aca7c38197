"""Training metrics from a real job (docs/metrics.md): the SDK's own estimator with
`metric_definitions=`, its hosts printing a training loop's lines (a tqdm-like `\\r` bar among them),
on the real engine; CloudWatch answers while the job runs, and the SDK's `TrainingJobAnalytics` after."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sagemaker.analytics import TrainingJobAnalytics
from sagemaker.estimator import Estimator
from sagemaker.instance_group import InstanceGroup
from testkit import unique, wait_for

from emulator.defaults import DEFAULT_IMAGE
from emulator.sagemaker import EmulatorSession

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image", "no_leftovers")]

# Each host: 6 epochs, a progress bar, then the epoch's loss; the trainers also a validation accuracy.
SCRIPT = '''
import json, os, sys, time
group = os.environ["SM_CURRENT_INSTANCE_GROUP"]
for epoch in range(6):
    for step in range(5):
        sys.stdout.write(f"\\repoch {epoch} [{'#' * step}{'.' * (4 - step)}]")
        sys.stdout.flush()
        time.sleep(0.05)
    loss = 1.0 / (epoch + 1)
    print(f"\\nepoch {epoch}: train_loss={loss:.4f}", flush=True)
    if group == "dnn_group":
        print(f"epoch {epoch}: val_acc={0.5 + epoch / 20:.2f}", flush=True)
    time.sleep(0.5)
'''
DEFINITIONS = [{"Name": "train:loss", "Regex": r"train_loss=([0-9.]+)"},
               {"Name": "validation:accuracy", "Regex": r"val_acc=([0-9.]+)"}]
NAMESPACE = "/aws/sagemaker/TrainingJobs"


def test_a_real_jobs_metrics_reach_the_sdks_analytics_while_it_runs_and_after(tmp_path: Path) -> None:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text(SCRIPT)
    (tmp_path / "s3" / "bucket").mkdir(parents=True)
    session = EmulatorSession(s3_root=tmp_path / "s3")
    estimator = Estimator(
        image_uri=DEFAULT_IMAGE, entry_point="train.py", source_dir=str(tmp_path / "code"),
        role="arn:aws:iam::111122223333:role/SageMakerRole", sagemaker_session=session,
        instance_groups=[InstanceGroup("data_group", "ml.c5.xlarge", 1), InstanceGroup("dnn_group", "ml.g5.xlarge", 2)],
        metric_definitions=DEFINITIONS, output_path="s3://bucket/out", base_job_name=unique("metrics"))
    estimator.fit(wait=False)
    name = estimator.latest_training_job.name
    cloudwatch = session.boto_session.client("cloudwatch")

    def loss_points() -> list[dict[str, object]]:
        now = datetime.now(timezone.utc)
        return cloudwatch.get_metric_statistics(  # type: ignore[no-any-return]
            Namespace=NAMESPACE, MetricName="train:loss", Dimensions=[{"Name": "TrainingJobName", "Value": name}],
            StartTime=now - timedelta(minutes=10), EndTime=now + timedelta(minutes=1), Period=60,
            Statistics=["Maximum", "SampleCount"])["Datapoints"]

    # While it runs: the first epochs' values are there before the job ends.
    wait_for(lambda: loss_points(), "a train:loss value while the job runs", timeout=180)
    assert session.describe_training_job(name)["TrainingJobStatus"] == "InProgress"
    done = threading.Event()
    threading.Thread(target=lambda: (estimator.latest_training_job.wait(logs="None"), done.set()), daemon=True).start()
    wait_for(done.is_set, "the job's end", timeout=300)

    described = session.describe_training_job(name)
    assert described["TrainingJobStatus"] == "Completed"
    finals = {m["MetricName"]: m["Value"] for m in described["FinalMetricDataList"]}
    assert finals == {"train:loss": pytest.approx(1 / 6, abs=1e-4), "validation:accuracy": 0.75}
    frame = TrainingJobAnalytics(name, sagemaker_session=session).dataframe()
    assert set(frame["metric_name"]) == {"train:loss", "validation:accuracy"}
    counts = sum(p["SampleCount"] for p in loss_points())  # type: ignore[misc]
    assert counts == 3 * 6  # every host's every epoch; the progress bar's lines gave none
    job_dir = Path(session.training.found(name).job_dir)
    assert (job_dir / "metrics.svg").is_file()
