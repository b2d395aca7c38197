"""S3 on a local root, on the real engine: the code is an s3:// sourcedir.tar.gz, the data an s3://
prefix, the output an s3:// prefix, all under --s3-root. The script runs from the unpacked archive,
model.tar.gz lands at the service's key (<prefix>/<job>/output/model.tar.gz), and nothing else under
the root changes."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import uuid
from pathlib import Path

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image", "no_leftovers")]

REPO = Path(__file__).resolve().parents[2]

SCRIPT = """\
import json, os
rc = json.load(open('/opt/ml/input/config/resourceconfig.json'))
hp = json.load(open('/opt/ml/input/config/hyperparameters.json'))
from helper import GREETING
files = sorted(os.listdir('/opt/ml/input/data/training'))
print(GREETING, rc['current_host'], 'submit', hp['sagemaker_submit_directory'], 'files', files)
if rc['current_host'] == 'algo-1':
    open('/opt/ml/model/weights.txt', 'w').write('trained on ' + ','.join(files))
"""


def snapshot(root: Path) -> dict[str, str]:
    """Every path under the root with what it is: a file's size, mtime and content hash."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            out[rel] = "link " + os.readlink(path)
        elif path.is_file():
            st = path.stat()
            out[rel] = f"file {st.st_size} {st.st_mtime_ns} {hashlib.sha256(path.read_bytes()).hexdigest()}"
        else:
            out[rel] = "dir"
    return out


def test_code_data_and_output_in_s3_under_the_root(tmp_path: Path) -> None:
    root = tmp_path / "s3root"
    bucket = root / "my-bucket"
    (bucket / "data" / "train").mkdir(parents=True)
    (bucket / "data" / "train" / "a.csv").write_text("1\n")
    (bucket / "data" / "train" / "b.csv").write_text("2\n")
    (bucket / "unrelated").mkdir()
    (bucket / "unrelated" / "keep.txt").write_text("untouched\n")
    code = bucket / "job" / "source" / "sourcedir.tar.gz"
    code.parent.mkdir(parents=True)
    with tarfile.open(code, "w:gz") as tar:  # as the SDK packs source_dir
        for name, text in (("train.py", SCRIPT), ("helper.py", "GREETING = 'hello from the archive'\n")):
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    name = f"s3-root-{uuid.uuid4().hex[:8]}"
    spec = tmp_path / "job.yaml"
    spec.write_text(json.dumps({
        "job_name": name, "entry_point": "train.py", "source_dir": "s3://my-bucket/job/source/sourcedir.tar.gz",
        "output_path": "s3://my-bucket/output",
        "instance_groups": [{"instance_group_name": "a", "instance_type": "ml.c5.xlarge", "instance_count": 1},
                            {"instance_group_name": "b", "instance_type": "ml.c5.xlarge", "instance_count": 1}],
        "inputs": {"training": {"s3_data": "s3://my-bucket/data/train", "instance_groups": ["a", "b"]}},
    }))
    before = snapshot(root)

    done = subprocess.run([sys.executable, "-m", "emulator.cli", "run", str(spec), "--s3-root", str(root), "--json",
                           "--quiet"], capture_output=True, text=True, timeout=300, cwd=REPO,
                          env={**os.environ, "NO_COLOR": "1"}, check=False)
    assert done.returncode == 0, done.stdout + done.stderr

    job_dir = bucket / "output" / name
    description = json.loads((job_dir / "job.json").read_text())
    assert description["TrainingJobStatus"] == "Completed"
    for host in ("algo-1", "algo-2"):
        log = (job_dir / "logs" / f"{host}.log").read_text()
        assert f'hello from the archive {host} submit "/opt/ml/code" files [\'a.csv\', \'b.csv\']' in log, log
    model = job_dir / "output" / "model.tar.gz"  # the service's key: <prefix>/<job>/output/model.tar.gz
    with tarfile.open(model) as tar:
        member = tar.extractfile("weights.txt")
        assert member is not None and member.read() == b"trained on a.csv,b.csv"

    after = snapshot(root)
    prefix = f"my-bucket/output/{name}"
    changed = {p for p in set(before) | set(after) if before.get(p) != after.get(p)}
    assert changed, "the job wrote nothing under the root"
    outside = sorted(p for p in changed if p != prefix and not p.startswith(prefix + "/")
                     and p not in ("my-bucket/output",))
    assert outside == [], outside
    assert "my-bucket/output" not in before  # made by the job: its own output prefix
