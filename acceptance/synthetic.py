"""Synthetic data of the shape each notebook uploads or its script reads, made on this machine.

Each maker writes into a folder (`dest`), which the runner gives as a folder of the notebook's
working directory (where a skipped download cell would have written) or under the S3 root (where a
notebook's data is in S3, or its script reads AWS's public copy). Pixels and labels are random with a
fixed seed: the notebooks must run, not learn.
"""

from __future__ import annotations

import gzip
import json
import random
import struct
from pathlib import Path
from typing import Any

SEED = 31


def _mnist_files(count: int, rng: random.Random) -> dict[str, bytes]:
    """The four idx files of MNIST (http://yann.lecun.com/exdb/mnist/ format), `count` images each."""
    files = {}
    for prefix in ("train", "t10k"):
        pixels = bytes(rng.randrange(256) for _ in range(count * 28 * 28))
        labels = bytes(rng.randrange(10) for _ in range(count))
        files[f"{prefix}-images-idx3-ubyte"] = struct.pack(">IIII", 2051, count, 28, 28) + pixels
        files[f"{prefix}-labels-idx1-ubyte"] = struct.pack(">II", 2049, count) + labels
    return files


def mnist_idx_gz(dest: Path, count: int = 512) -> None:
    """MNIST's four `.gz` files, as AWS's public bucket has them (`datasets/image/MNIST/`)."""
    dest.mkdir(parents=True, exist_ok=True)
    for name, data in _mnist_files(count, random.Random(SEED)).items():
        (dest / f"{name}.gz").write_bytes(gzip.compress(data, mtime=0))


def mnist_torchvision(dest: Path, count: int = 512) -> None:
    """What `torchvision.datasets.MNIST(dest, download=True)` leaves: `MNIST/raw/` with each file
    and its `.gz`."""
    raw = dest / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for name, data in _mnist_files(count, random.Random(SEED)).items():
        (raw / name).write_bytes(data)
        (raw / f"{name}.gz").write_bytes(gzip.compress(data, mtime=0))


def caltech256_jpegs(dest: Path, classes: int = 4, per_class: int = 3, size: int = 240) -> None:
    """Caltech-256's layout (`256_ObjectCategories/001.ak47/001_0001.jpg`): a folder per category,
    JPEG files in it, every image at least 224 pixels a side as the ViT script keeps."""
    from PIL import Image

    rng = random.Random(SEED)
    for label in range(1, classes + 1):
        folder = dest / f"{label:03d}.category{label}"
        folder.mkdir(parents=True, exist_ok=True)
        for index in range(1, per_class + 1):
            pixels = bytes(rng.randrange(256) for _ in range(size * (size + 16) * 3))
            image = Image.frombytes("RGB", (size, size + 16), pixels)
            image.save(folder / f"{label:03d}_{index:04d}.jpg", format="JPEG", quality=85)


def hf_tokenized(dest: Path, rows: int = 32, length: int = 64, vocab: int = 30522) -> None:
    """A tokenized text-classification dataset as `datasets.Dataset.save_to_disk` writes it (one
    Arrow stream file, `dataset_info.json`, `state.json`) with the columns the notebooks' scripts
    train on: `input_ids`, `attention_mask`, `labels`, in torch format."""
    import pyarrow as pa

    rng = random.Random(SEED)
    dest.mkdir(parents=True, exist_ok=True)
    ids = [[101] + [rng.randrange(1000, vocab) for _ in range(length - 2)] + [102] for _ in range(rows)]
    table = pa.table({
        "labels": pa.array([rng.randrange(2) for _ in range(rows)], pa.int64()),
        "input_ids": pa.array(ids, pa.list_(pa.int32())),
        "attention_mask": pa.array([[1] * length for _ in range(rows)], pa.list_(pa.int8())),
    })
    name = "data-00000-of-00001.arrow"
    with pa.OSFile(str(dest / name), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    features: dict[str, Any] = {
        "labels": {"dtype": "int64", "_type": "Value"},
        "input_ids": {"feature": {"dtype": "int32", "_type": "Value"}, "_type": "Sequence"},
        "attention_mask": {"feature": {"dtype": "int8", "_type": "Value"}, "_type": "Sequence"},
    }
    (dest / "dataset_info.json").write_text(json.dumps({
        "citation": "", "description": "synthetic", "features": features, "homepage": "", "license": "",
    }))
    (dest / "state.json").write_text(json.dumps({
        "_data_files": [{"filename": name}],
        "_fingerprint": "0000000000000031",
        "_format_columns": ["input_ids", "attention_mask", "labels"],
        "_format_kwargs": {},
        "_format_type": "torch",
        "_output_all_columns": False,
        "_split": None,
    }))


MAKERS = {f.__name__: f for f in (mnist_idx_gz, mnist_torchvision, caltech256_jpegs, hf_tokenized)}
