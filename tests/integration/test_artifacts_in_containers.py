"""Artifacts of real jobs on the real engine: a 1 GiB model packed into model.tar.gz unpacks to the
bytes the container wrote (hashed inside the container), and `disable_output_compression` leaves the
files themselves under output/model/ and output/data/, as CompressionType NONE does on the service.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import tarfile
import textwrap
from pathlib import Path
from typing import Any

import pytest

from emulator.jobspec import JobSpec, validate
from emulator.reports.console import RecordingReporter
from emulator.run.runner import run_job

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image", "no_leftovers")]

GIB = 1 << 30
CONFIG = '{"layers": 2}'


def spec_running(tmp_path: Path, script: str, **fields: Any) -> JobSpec:
    code = tmp_path / "code"
    code.mkdir()
    (code / "job.py").write_text(textwrap.dedent(script))
    return validate({
        "base_job_name": "artifacts",
        "source_dir": "code",
        "container_entry_point": ["python3", "/opt/ml/code/job.py"],
        "output_path": str(tmp_path / "out"),
        **fields,
    }, base_dir=tmp_path)


def test_a_1_gib_model_unpacks_to_the_bytes_the_container_wrote(tmp_path: Path) -> None:
    spec = spec_running(tmp_path, f"""
        import hashlib, os
        digest = hashlib.sha256()
        with open("/opt/ml/model/weights.bin", "wb") as f:
            for _ in range({GIB} // (4 << 20)):
                block = os.urandom(4 << 20)
                digest.update(block)
                f.write(block)
        os.makedirs("/opt/ml/model/config", exist_ok=True)
        with open("/opt/ml/model/config/model.json", "w") as f:
            f.write({CONFIG!r})
        os.makedirs("/opt/ml/output/data", exist_ok=True)
        with open("/opt/ml/output/data/sha256.txt", "w") as f:
            f.write(digest.hexdigest())
        """, instance_type="ml.c5.xlarge")
    reporter = RecordingReporter()

    result = run_job(spec, reporter=reporter)

    assert result.status == "Completed", result.failure_reason
    assert result.output_artifact is not None and result.model_artifact is not None
    with tarfile.open(result.output_artifact) as tar:
        member = tar.extractfile("sha256.txt")
        assert member is not None
        written = member.read().decode()
    with tarfile.open(result.model_artifact) as tar:
        assert sorted(tar.getnames()) == ["config/model.json", "weights.bin"]
        weights = tar.getmember("weights.bin")
        assert weights.size == GIB
        stream = tar.extractfile(weights)
        assert stream is not None
        digest = hashlib.sha256()
        while chunk := stream.read(4 << 20):
            digest.update(chunk)
    assert digest.hexdigest() == written
    # GNU tar reads the same stream: `tar -xzOf archive weights.bin` gives the same bytes.
    unpacked = subprocess.run(["tar", "-xzOf", str(result.model_artifact), "weights.bin"],
                              stdout=subprocess.PIPE, check=True).stdout
    assert hashlib.sha256(unpacked).hexdigest() == written
    del unpacked

    # 1 GiB is a large tree: packing reported progress, and job.json keeps its time apart.
    mb = f"{(GIB + len(CONFIG)) / 1e6:,.1f} MB"
    first = reporter.infos.index(f"packing model.tar.gz: {mb} in 2 files")
    assert any(line.startswith(f"  model.tar.gz: {mb} in 2 files, ") for line in reporter.infos[first + 1:])
    doc = json.loads((result.job_dir / "job.json").read_text())
    seconds = doc["Emulator"]["Seconds"]
    assert seconds["Artifacts"] > 0
    assert seconds["Total"] >= seconds["Training"] + seconds["Artifacts"]
    assert doc["TrainingTimeInSeconds"] == doc["BillableTimeInSeconds"] == round(result.billable_seconds)
    assert doc["OutputDataConfig"]["CompressionType"] == "GZIP"


def test_disable_output_compression_leaves_the_files_themselves(tmp_path: Path) -> None:
    spec = spec_running(tmp_path, """
        import json, os
        host = json.load(open("/opt/ml/input/config/resourceconfig.json"))["current_host"]
        with open("/opt/ml/model/shared.bin", "w") as f:
            f.write("written by " + host)
        os.makedirs("/opt/ml/model/" + host, exist_ok=True)
        with open(f"/opt/ml/model/{host}/part.bin", "wb") as f:
            f.write(host.encode() * 1000)
        os.chmod(f"/opt/ml/model/{host}/part.bin", 0o640)
        os.makedirs("/opt/ml/output/data", exist_ok=True)
        with open("/opt/ml/output/data/metrics-" + host + ".json", "w") as f:
            json.dump({"host": host}, f)
        """, instance_groups=[
            {"instance_group_name": "a", "instance_type": "ml.c5.xlarge", "instance_count": 1},
            {"instance_group_name": "b", "instance_type": "ml.c5.xlarge", "instance_count": 1},
        ], disable_output_compression=True)

    result = run_job(spec, reporter=RecordingReporter())

    assert result.status == "Completed", result.failure_reason
    out = result.job_dir / "output"
    assert (result.model_artifact, result.output_artifact) == (out / "model", out / "data")
    assert sorted(p.name for p in out.iterdir()) == ["data", "model"]  # no tarballs
    files = {p.relative_to(out).as_posix(): p for p in out.rglob("*") if p.is_file()}
    assert sorted(files) == ["data/metrics-algo-1.json", "data/metrics-algo-2.json", "model/algo-1/part.bin",
                             "model/algo-2/part.bin", "model/shared.bin"]
    assert files["model/shared.bin"].read_text() == "written by algo-2"  # the later host wins
    assert files["model/algo-1/part.bin"].read_bytes() == b"algo-1" * 1000
    assert files["model/algo-2/part.bin"].stat().st_mode & 0o777 == 0o640
    doc = json.loads((result.job_dir / "job.json").read_text())
    assert doc["OutputDataConfig"]["CompressionType"] == "NONE"
    assert doc["ModelArtifacts"] == {"S3ModelArtifacts": str(out / "model")}
    # The copies are the driver's own: the hosts' folders are left as they were.
    assert (result.job_dir / "hosts" / "algo-1" / "model" / "shared.bin").read_text() == "written by algo-1"
