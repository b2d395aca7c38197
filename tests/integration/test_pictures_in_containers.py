"""The pictures of real jobs: a run's timeline.svg drawn from the engine's own start and exit times,
and `hetero-emu render`'s cluster diagram of an example (cluster.dot, cluster.svg with Graphviz)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from emulator.jobspec import validate
from emulator.options import RunOptions
from emulator.reports.console import RecordingReporter
from emulator.reports.timeline import SVG_NS
from emulator.run.runner import run_job

REPO = Path(__file__).resolve().parents[2]

# algo-1 and algo-2 (data_group) serve until stopped; algo-3 (dnn_group) crashes after 1.5 s.
SCRIPT = '''\
import json, sys, time
from pathlib import Path

rc = json.loads(Path("/opt/ml/input/config/resourceconfig.json").read_text())
if rc["current_group_name"] == "dnn_group":
    time.sleep(1.5)
    sys.exit(3)
time.sleep(600)
'''


def svg_elements(path: Path, tag: str) -> list[ET.Element]:
    return list(ET.parse(path).getroot().iter(f"{{{SVG_NS}}}{tag}"))


@pytest.mark.docker
@pytest.mark.usefixtures("training_image", "no_leftovers")
def test_a_failed_jobs_timeline_marks_the_host_that_died_first(tmp_path: Path) -> None:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "x.py").write_text(SCRIPT)
    spec = validate({
        "base_job_name": f"pictures-{uuid.uuid4().hex[:6]}",
        "source_dir": "code",
        "container_entry_point": ["python3", "/opt/ml/code/x.py"],
        "output_path": str(tmp_path / "out"),
        "instance_groups": [
            {"instance_group_name": "data_group", "instance_type": "ml.c5.xlarge", "instance_count": 2},
            {"instance_group_name": "dnn_group", "instance_type": "ml.c5.xlarge", "instance_count": 1},
        ],
    }, base_dir=tmp_path)
    result = run_job(spec, RunOptions(grace=5), reporter=RecordingReporter())

    assert result.status == "Failed"
    path = result.job_dir / "timeline.svg"
    assert path.parent == (result.job_dir / "job.json").parent
    bars = {r.get("data-host"): r for r in svg_elements(path, "rect") if "bar" in (r.get("class") or "").split()}
    assert sorted(bars) == ["algo-1", "algo-2", "algo-3"]
    marked = [h for h, r in bars.items() if "first-failure" in (r.get("class") or "").split()]
    assert marked == ["algo-3"]
    exits = {t.get("data-host"): t.text for t in svg_elements(path, "text") if t.get("class") == "exit"}
    assert exits == {"algo-1": "exit 143, stopped by the emulator", "algo-2": "exit 143, stopped by the emulator",
                     "algo-3": "exit 3"}
    # Docker's StartedAt/FinishedAt: the crasher's bar is ~1.5 s long and ends before the others'.
    end = {h: float(r.get("x", "0")) + float(r.get("width", "0")) for h, r in bars.items()}
    assert end["algo-3"] < end["algo-1"] and end["algo-3"] < end["algo-2"]
    # In seconds, by the axis: its ticks' x positions give the scale.
    ticks = {float(t.text or ""): float(t.get("x", "0"))
             for t in svg_elements(path, "text") if t.get("class") == "tick"}
    (t0, x0), (t1, x1) = sorted(ticks.items())[:2]
    crasher = float(bars["algo-3"].get("width", "0")) * (t1 - t0) / (x1 - x0)
    assert 1.4 < crasher < 15, crasher  # slept 1.5 s; a loaded machine starts Python slowly
    subtitle = next(t.text or "" for t in svg_elements(path, "text") if t.get("class") == "status")
    assert subtitle.startswith("Failed: algo-3 (dnn_group) failed first, exit 3 at "), subtitle


def test_render_of_an_example_draws_its_cluster(tmp_path: Path) -> None:
    if shutil.which("dot") is None and os.environ.get("EMULATOR_REQUIRE_DOCKER") != "1":
        pytest.skip("Graphviz's dot is not installed")
    out = tmp_path / "rendered"
    done = subprocess.run([sys.executable, "-m", "emulator.cli", "render", "examples/data-offload/job.yaml",
                           "-o", str(out)], capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={**os.environ, "NO_COLOR": "1"}, check=False)

    assert done.returncode == 0, done.stderr
    assert f"{out}/cluster.dot, {out}/cluster.svg" in done.stdout
    dot = (out / "cluster.dot").read_text()
    assert "subgraph cluster_group_0" in dot and "subgraph cluster_group_1" in dot
    words = [t.text for t in svg_elements(out / "cluster.svg", "text")]
    for expected in ("data_group", "ml.c5.xlarge x 2", "dnn_group", "ml.g5.xlarge x 1", "algo-1", "algo-2",
                     "algo-3", "training: 2 files", "channel training", "data/train", "4 files", "ShardedByS3Key"):
        assert expected in words, (expected, words)
    edges = [g.find(f"{{{SVG_NS}}}title") for g in svg_elements(out / "cluster.svg", "g") if g.get("class") == "edge"]
    assert [e.text for e in edges if e is not None] == ["channel_0->host_algo-1"]  # data_group only

