"""What the live page draws cannot come from S3. A job whose output lies under the S3 root (its job
folder is then S3 objects: cluster.dot, cluster.svg, job.json) is run for real (the runner over the
fake engine), then S3 clients put a cluster.dot and a cluster.svg with `javascript:` links and a
job.json with markup in its names into that folder; the page of a real `hetero-emu serve` process
still draws the cluster the run made from the job's plan, and escapes every name it shows."""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import graphviz
import pytest
import requests
from serving import Server, running_server

from emulator.reports import diagram
from emulator.serve import page
from emulator.state import job_records

JOB = "safe-diagram-job"
BUCKET = "page-bucket"
EVIL_DOT = 'digraph x { a [label="click" URL="javascript:alert(document.cookie)"] }\n'
EVIL_SVG = ('<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink">'
            '<a xlink:href="javascript:alert(1)"><text>click</text></a><script>alert(2)</script></svg>')
MARKUP = "<script>alert('group')</script>"
needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running_server(tmp_path_factory.mktemp("serve-page-safety")) as running:
        yield running


@pytest.fixture(scope="module")
def s3(server: Server) -> Any:
    return server.client("s3")


@pytest.fixture(scope="module")
def ran(server: Server, s3: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The job, run to its end with its output under the server's S3 root and its record in the
    server's state folder; its job folder as the run left it."""
    from fake_backend import FakeBackend, exits

    from emulator.jobspec import load_spec_file
    from emulator.options import RunOptions
    from emulator.reports.console import RecordingReporter
    from emulator.run.runner import run_job

    s3.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": server.region})
    channel = "in/<b onmouseover=alert(1)>"
    s3.put_object(Bucket=BUCKET, Key=f"{channel}/part.csv", Body=b"1\n")
    project = tmp_path_factory.mktemp("project")
    (project / "code").mkdir()
    (project / "code" / "train.py").write_text("print('hello')\n")
    (project / "job.yaml").write_text(
        f"job_name: {JOB}\nentry_point: train.py\nsource_dir: code\n"
        "instance_groups:\n"
        "  - {instance_group_name: cpus, instance_type: ml.c5.xlarge, instance_count: 1}\n"
        "  - {instance_group_name: gpus, instance_type: ml.p3.2xlarge, instance_count: 1}\n"
        f"inputs:\n  train: {{s3_data: 's3://{BUCKET}/{channel}', distribution: ShardedByS3Key}}\n"
        f"output_path: s3://{BUCKET}/out\nlocal_s3_root: {server.s3_root}\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HETERO_EMU_STATE_DIR", str(server.state_dir))
        result = run_job(load_spec_file(project / "job.yaml"), RunOptions(grace=1),
                         backend=FakeBackend({"algo-1": exits(0), "algo-2": exits(0)}), reporter=RecordingReporter())
    assert result.status == "Completed"
    assert Path(result.job_dir) == server.s3_root / BUCKET / "out" / JOB
    return Path(result.job_dir)


def job_page(server: Server) -> str:
    got = requests.get(f"{server.url}/jobs/{JOB}", timeout=60)
    assert got.status_code == 200
    return got.text


def test_the_run_keeps_its_diagram_in_the_jobs_record(ran: Path, server: Server,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HETERO_EMU_STATE_DIR", str(server.state_dir))
    record = job_records.find(JOB)
    assert record is not None
    recorded = record.doc[job_records.CLUSTER_DOT]
    assert recorded == (ran / diagram.DOT_FILE).read_text()  # what the run wrote beside it, too
    assert '"host_algo-1"' in recorded and "cpus" in recorded and "gpus" in recorded


@needs_dot
def test_a_cluster_dot_or_svg_put_through_s3_is_not_what_the_page_draws(ran: Path, server: Server,
                                                                        s3: Any) -> None:
    before = job_page(server)
    s3.put_object(Bucket=BUCKET, Key=f"out/{JOB}/{diagram.DOT_FILE}", Body=EVIL_DOT.encode())
    s3.put_object(Bucket=BUCKET, Key=f"out/{JOB}/{diagram.SVG_FILE}", Body=EVIL_SVG.encode(),
                  ContentType="image/svg+xml")
    assert (ran / diagram.DOT_FILE).read_text() == EVIL_DOT  # S3 did write into the job folder
    after = job_page(server)
    drawn = re.search(r'<div class="svg-box">(.*?)</div>', after, re.S)

    assert drawn is not None and ">algo-1</text>" in drawn[1] and ">algo-2</text>" in drawn[1]
    assert ">click</text>" not in after and "javascript:" not in after.lower()
    assert "<a " not in drawn[1] and "<script" not in drawn[1]
    assert drawn[1] in before  # the same drawing as before the puts


@needs_dot
def test_the_diagrams_labels_are_escaped(ran: Path, server: Server) -> None:
    drawn = re.search(r'<div class="svg-box">(.*?)</div>', job_page(server), re.S)
    assert drawn is not None
    # The channel's S3 URI holds markup; the drawing holds it as text only.
    assert "&lt;b onmouseover=alert(1)&gt;" in drawn[1] and "<b onmouseover" not in drawn[1]


def test_names_from_an_s3_written_job_json_are_escaped(ran: Path, server: Server, s3: Any) -> None:
    doc = json.loads((ran / "job.json").read_text())
    for entry in doc["Hosts"]:
        entry["InstanceGroupName"] = MARKUP
        entry["InstanceType"] = '"><img src=x onerror=alert(1)>'
    doc["ResourceConfig"]["InstanceGroups"][0]["InstanceGroupName"] = MARKUP
    s3.put_object(Bucket=BUCKET, Key=f"out/{JOB}/job.json", Body=json.dumps(doc).encode())
    body = job_page(server)
    index = requests.get(server.url + "/", timeout=60).text

    for html in (body, index):
        assert MARKUP not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert(&#39;group&#39;)&lt;/script&gt;" in body
    embedded = re.search(r'<script type="application/json" id="job-data">(.*?)</script>', body, re.S)
    assert embedded is not None and "<" not in embedded[1]  # the page's data: JSON with < written \u003c
    assert json.loads(embedded[1])["hosts"][0]["group"] == MARKUP


# --------------------------------------------------------------------------------------------------
# What the server lets through of Graphviz's SVG (emulator/serve/page.py `inert_svg`)


@needs_dot
@pytest.mark.parametrize("dot", [
    EVIL_DOT,
    'digraph x { a [label="a" href="javascript:alert(1)"] }',
    'digraph x { a [label="a" id="stop"] }',  # would shadow the page's own #stop button
    'digraph x { a [label="a" class="status"] }',
], ids=["URL", "href", "id", "class"])
def test_svg_with_links_ids_or_classes_is_not_drawn(dot: str) -> None:
    assert page.draw_svg(dot) is None


@needs_dot
def test_svg_with_an_image_is_not_drawn(tmp_path: Path) -> None:
    # A PNG of one pixel: Graphviz would have the browser fetch its path from the server.
    row = zlib.compress(b"\x00\xff\xff\xff")
    png = b"\x89PNG\r\n\x1a\n" + b"".join(
        struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        for kind, data in ((b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)), (b"IDAT", row), (b"IEND", b"")))
    (tmp_path / "pixel.png").write_bytes(png)
    dot = f'digraph x {{ a [label="" image="{tmp_path / "pixel.png"}"] }}'
    assert "<image" in subprocess.run(["dot", "-Tsvg"], input=dot, capture_output=True, text=True, check=True).stdout
    assert page.draw_svg(dot) is None


@needs_dot
def test_the_svg_drawn_is_written_again_without_comments_or_prolog() -> None:
    svg = page.draw_svg('digraph x { "a-->b" [label="<x> & y"] }')
    assert svg is not None and svg.startswith('<svg xmlns="http://www.w3.org/2000/svg"')
    assert "<!--" not in svg and "<?xml" not in svg and "&lt;x&gt; &amp; y" in svg


def test_a_label_in_angle_brackets_stays_a_quoted_string_in_the_dot() -> None:
    # The graphviz package writes `<...>` as an HTML-like label unless it is marked nohtml.
    graph = graphviz.Digraph()
    graph.node("a", diagram._label("<b>x</b>"))
    graph.node("b", diagram._label("<i>a</i>", "<u>b</u>"))
    assert 'a [label="<b>x</b>"]' in graph.source and r'b [label="<i>a</i>\n<u>b</u>"]' in graph.source
