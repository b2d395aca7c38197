"""A Hugging Face estimator of SDK v2, unchanged but for `sagemaker_session=EmulatorSession(...)`, on
the real engine: `HuggingFace(transformers_version="4.36.0", pytorch_version="2.1.0", py_version="py310")`
resolves AWS's `huggingface-pytorch-training` image itself, the Hugging Face stand-in runs it
(emulator/training_images/huggingface.py), and a tiny `transformers.Trainer` script trains an epoch fully offline:
a random 2-layer BERT made in the test and given as a channel, synthetic token ids read with
`datasets`, the model saved to /opt/ml/model and uploaded as model.tar.gz.
"""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import docker
import pytest
from sagemaker.huggingface import HuggingFace
from sagemaker.inputs import TrainingInput
from test_seed_clusters import log_tagged

from emulator import api
from emulator.sagemaker import EmulatorSession
from emulator.training_images import huggingface
from emulator.training_images.frameworks import TRAINING_MODULES

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("no_leftovers")]

ROLE = "arn:aws:iam::111122223333:role/SageMakerRole"
VERSIONS = {"transformers_version": "4.36.0", "pytorch_version": "2.1.0", "py_version": "py310"}
ROWS, BATCH = 24, 8

# The random model, saved with the image's own transformers (the host has none).
MAKE_MODEL = '''\
from transformers import BertConfig, BertForSequenceClassification
config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=64, max_position_embeddings=64, num_labels=2)
BertForSequenceClassification(config).save_pretrained("/out")
'''

TRAIN = '''\
import argparse, json, os
import accelerate, datasets, torch, transformers
from transformers import AutoModelForSequenceClassification, Trainer, TrainingArguments

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
args, _ = parser.parse_known_args()
data = datasets.load_dataset("json", data_files=os.path.join(os.environ["SM_CHANNEL_TRAIN"], "train.jsonl"))["train"]
model = AutoModelForSequenceClassification.from_pretrained(os.environ["SM_CHANNEL_MODEL"])
trainer = Trainer(model=model, train_dataset=data, args=TrainingArguments(
    output_dir="/tmp/trainer", num_train_epochs=args.epochs, per_device_train_batch_size=8, report_to=[],
    save_strategy="no", logging_steps=1, use_cpu=True))
result = trainer.train()
trainer.save_model(os.environ["SM_MODEL_DIR"])
print("HF_JSON " + json.dumps({
    "transformers": transformers.__version__, "datasets": datasets.__version__, "accelerate": accelerate.__version__,
    "torch": torch.__version__, "steps": result.global_step, "loss": result.training_loss,
    "module": os.environ.get("SM_FRAMEWORK_MODULE"), "offline": os.environ.get("HF_HUB_OFFLINE")}), flush=True)
'''


@pytest.fixture(scope="module")
def huggingface_image(docker_client: docker.DockerClient) -> str:
    """The Hugging Face image of transformers 4.36.0 on PyTorch 2.1.0 (built unless up to date; scripts/test.sh
    builds it once per machine)."""
    from emulator.backend.docker_images import LocalImages
    from emulator.reports.progress import as_step_reporter

    target = huggingface.choose("pytorch", "4.36.0", "2.1.0", "py310")
    images = LocalImages(lambda: docker_client)
    return str(images.build_framework_image(target, as_step_reporter(lambda m: None)).image)


def test_the_sdks_hugging_face_estimator_trains_offline_on_the_stand_in(
        tmp_path: Path, docker_client: docker.DockerClient, huggingface_image: str) -> None:
    s3 = tmp_path / "s3"
    model, train = s3 / "hf-data" / "model", s3 / "hf-data" / "train"
    for folder in (model, train, tmp_path / "code"):
        folder.mkdir(parents=True)
    docker_client.containers.run(huggingface_image, ["python", "-c", MAKE_MODEL], remove=True, network_disabled=True,
                                 user=f"{os.getuid()}:{os.getgid()}", environment={"HOME": "/tmp"},
                                 volumes={str(model): {"bind": "/out", "mode": "rw"}})
    # Synthetic tokenised data: token ids of the model's vocabulary, a mask and a label per row.
    rows = [{"input_ids": [(i * 7 + j) % 100 for j in range(12)], "attention_mask": [1] * 12, "labels": i % 2}
            for i in range(ROWS)]
    (train / "train.jsonl").write_text("".join(__import__("json").dumps(r) + "\n" for r in rows))
    (tmp_path / "code" / "train.py").write_text(TRAIN)

    session = EmulatorSession(s3_root=s3)
    # A GPU instance type: SDK v2 lists Hugging Face training images for the gpu processor alone (a CPU
    # one is refused by the SDK itself); the emulated host has no GPU and the script trains on the CPU.
    estimator = HuggingFace(entry_point="train.py", source_dir=str(tmp_path / "code"), role=ROLE,
                            instance_type="ml.g5.xlarge", instance_count=1, sagemaker_session=session,
                            hyperparameters={"epochs": 1}, **VERSIONS,
                            environment={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                                         "HF_DATASETS_OFFLINE": "1"})
    estimator.fit(inputs={"model": TrainingInput("s3://hf-data/model"), "train": TrainingInput("s3://hf-data/train")},
                  job_name="hf-trainer", logs=False)

    described = session.describe_training_job("hf-trainer")
    assert described["TrainingJobStatus"] == "Completed", described.get("FailureReason")
    requested = described["AlgorithmSpecification"]["TrainingImage"]
    assert requested == estimator.training_image_uri()
    assert "/huggingface-pytorch-training:2.1.0-transformers4.36.0-" in requested  # AWS's image, as the SDK named it
    emulated = api.describe("hf-trainer")  # job.json: what ran is the emulator's addition, not the API's
    assert "Emulator" not in described
    assert emulated["Emulator"]["Image"] == huggingface_image
    assert emulated["Emulator"]["StandIn"]["For"] == requested

    info = log_tagged(Path(session.training.found("hf-trainer").job_dir), "algo-1", "HF_JSON")
    versions = dict(p.split("==") for p in huggingface.choose("pytorch", "4.36.0", "2.1.0").huggingface.packages)
    assert (info["transformers"], info["torch"].split("+")[0]) == ("4.36.0", "2.1.0")
    assert (info["datasets"], info["accelerate"]) == (versions["datasets"], versions["accelerate"])
    assert info["steps"] == ROWS // BATCH and info["loss"] > 0  # one epoch of three batches
    # The PyTorch toolkit started the script, as in AWS's Hugging Face image; the SDK's variables reached it.
    assert (info["module"], info["offline"]) == (TRAINING_MODULES["pytorch"], "1")

    bucket = session.default_bucket()
    with tarfile.open(s3 / bucket / "hf-trainer" / "output" / "model.tar.gz") as tar:
        names = set(tar.getnames())
    assert "config.json" in names and names & {"model.safetensors", "pytorch_model.bin"}, names
