"""The live page of `hetero-emu serve` (emulator/serve/page.py), through Starlette's TestClient over a
fake JobSource (no engine, no Docker); `LiveJobs`, the real source, on real job folders and log files;
and the cluster.dot a run leaves for the page (emulator/run/runner.py)."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from emulator.backend import ContainerState, Resource
from emulator.errors import DockerUnavailable
from emulator.planning.plan import LABEL_GROUP, LABEL_HOST, LABEL_INSTANCE_TYPE, LABEL_JOB, container_name
from emulator.reports.palette import group_colours
from emulator.result import Status
from emulator.run.metrics import Sample
from emulator.serve import page
from emulator.serve.page import HostState, JobStream, LiveJobs, NoSuchJob, StopRefused, routes, split_lines
from emulator.state import job_records
from emulator.state.job_records import JobRecord

JOB = "demo-job"
T0 = datetime(2026, 12, 1, 13, 0, 0, tzinfo=timezone.utc)
GROUPS = ["data_group", "dnn_group"]
COLOURS = group_colours(GROUPS)


def toolkit(at: datetime, message: str) -> str:
    """A toolkit log line in its own format (sagemaker_training/logging_config.py `configure_logger`)."""
    stamp = f"{at.strftime('%Y-%m-%d %H:%M:%S')},{at.microsecond // 1000:03d}"
    return f"{stamp} sagemaker-training-toolkit INFO     {message}"


@dataclass
class Frame:
    """What the fake source answers between two of the stream's looks."""

    status: str = "InProgress"
    secondary: str = "Training"
    hosts: Sequence[HostState] = ()
    logs: Mapping[str, bytes] = field(default_factory=dict)
    metrics: Sequence[Sample] = ()
    end: datetime | None = None


class FakeSource:
    """A JobSource whose job moves one frame on at each describe() (the stream describes once per look)."""

    def __init__(self, frames: Sequence[Frame], *, jobs: Sequence[JobRecord] = (), svg: str | None = "<svg></svg>",
                 dot: str | None = None, refuse_stop: str | None = None) -> None:
        self.frames = list(frames)
        self.at = -1
        self.records = list(jobs) or [JobRecord(JOB, Path("/nowhere"), Status.IN_PROGRESS, T0.isoformat())]
        self.svg, self.dot = svg, dot
        self.refuse_stop = refuse_stop
        self.stopped: list[str] = []
        self.reads: list[tuple[str, int, int | None]] = []
        self.vanish_after: int | None = None  # the record disappears at this look

    @property
    def frame(self) -> Frame:
        return self.frames[max(0, min(self.at, len(self.frames) - 1))]

    def _known(self, name: str) -> None:
        if name not in [r.job_name for r in self.records]:
            raise NoSuchJob(name)

    def jobs(self) -> list[JobRecord]:
        return list(self.records)

    def describe(self, name: str) -> dict[str, Any]:
        self._known(name)
        if self.vanish_after is not None and self.at + 1 >= self.vanish_after:
            raise NoSuchJob(name)
        if name != JOB:
            return {"TrainingJobName": name, "TrainingJobStatus": "Completed"}
        self.at += 1
        frame = self.frame
        doc: dict[str, Any] = {
            "TrainingJobName": name, "TrainingJobStatus": frame.status, "SecondaryStatus": frame.secondary,
            "CreationTime": T0.isoformat(), "TrainingStartTime": T0.isoformat(),
            "SecondaryStatusTransitions": [{"Status": frame.secondary, "StatusMessage": f"{frame.secondary} now"}],
            "ResourceConfig": {"InstanceGroups": [
                {"InstanceGroupName": "data_group", "InstanceType": "ml.c5.xlarge", "InstanceCount": 1},
                {"InstanceGroupName": "dnn_group", "InstanceType": "ml.p3.2xlarge", "InstanceCount": 1}]}}
        if frame.end is not None:
            doc["TrainingEndTime"] = frame.end.isoformat()
        return doc

    def hosts(self, name: str) -> list[HostState]:
        self._known(name)
        return list(self.frame.hosts)

    def log_size(self, name: str, host: str) -> int:
        return len(self.frame.logs.get(host, b""))

    def line_start(self, name: str, host: str, offset: int) -> int:
        found = self.frame.logs.get(host, b"").find(b"\n", offset - 1)
        return offset if found < 0 else found + 1

    def log_lines(self, name: str, host: str, offset: int, *, final: bool = False,
                  end: int | None = None) -> tuple[list[str], int]:
        self.reads.append((host, offset, end))
        data = self.frame.logs.get(host, b"")[offset:end]
        return split_lines(data[:page.READ_BYTES], offset, final=final and end is None,
                           full=len(data) >= page.READ_BYTES)

    def metrics(self, name: str) -> list[Sample]:
        return list(self.frame.metrics)

    def stop(self, name: str) -> None:
        self._known(name)
        if self.refuse_stop:
            raise StopRefused(self.refuse_stop)
        self.stopped.append(name)

    def diagram_svg(self, name: str) -> str | None:
        return self.svg

    def diagram_dot(self, name: str) -> str | None:
        return self.dot

    # Tuning jobs: `tunings` holds each as the service's description with its trials' rows.
    tunings: Sequence[dict[str, Any]] = ()

    def tuning_jobs(self) -> list[dict[str, Any]]:
        return [dict(t) for t in self.tunings]

    def tuning_job(self, name: str) -> dict[str, Any]:
        for doc in self.tunings:
            if doc["HyperParameterTuningJobName"] == name:
                return dict(doc)
        raise NoSuchJob(name)


def host(name: str, state: str, *, exit_code: int | None = None, started: float | None = None,
         finished: float | None = None) -> HostState:
    group = "data_group" if name == "algo-1" else "dnn_group"
    itype = "ml.c5.xlarge" if group == "data_group" else "ml.p3.2xlarge"
    def at(seconds: float | None) -> datetime | None:
        return None if seconds is None else T0 + timedelta(seconds=seconds)

    return HostState(name, group, itype, state, exit_code, at(started), at(finished), GROUPS.index(group))


def client(source: Any, token: str | None = None) -> TestClient:
    return TestClient(Starlette(routes=routes(source, token=token)))


@pytest.fixture(autouse=True)
def no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stream looks again at once: the fake job moves on at each look, not with the clock."""
    monkeypatch.setattr(page, "POLL_SECONDS", 0.0)


def read_events(text: str) -> list[tuple[str, Any, str | None]]:
    """(event, data, id) of each event of a text/event-stream body; comments and retry as ("", line, None)."""
    out: list[tuple[str, Any, str | None]] = []
    for block in text.split("\n\n"):
        if not block:
            continue
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            if line.startswith(":") or line.startswith("retry:"):
                out.append(("", line, None))
                continue
            key, _, value = line.partition(": ")
            fields[key] = value
        if "event" in fields:
            out.append((fields["event"], json.loads(fields["data"]), fields.get("id")))
    return out


def stream(source: Any, headers: Mapping[str, str] | None = None) -> list[tuple[str, Any, str | None]]:
    with client(source).stream("GET", f"/jobs/{JOB}/events", headers=dict(headers or {})) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        return read_events(response.read().decode())


# --------------------------------------------------------------------------------------------------
# The index


def test_the_index_lists_the_jobs_newest_first_with_their_groups_hosts_and_times() -> None:
    newer = JobRecord(JOB, Path("/a"), Status.IN_PROGRESS, (T0 + timedelta(hours=1)).isoformat())
    older = JobRecord("old-job", Path("/b"), Status.COMPLETED, T0.isoformat())
    source = FakeSource([Frame()], jobs=[newer, older])
    body = client(source).get("/").text

    assert body.index(f'href="/jobs/{JOB}"') < body.index('href="/jobs/old-job"')
    row = re.search(rf'<tr class="job" data-job="{JOB}">(.*?)</tr>', body, re.S)
    assert row is not None
    assert "InProgress" in row[1] and "data_group" in row[1] and "dnn_group" in row[1]
    assert COLOURS["data_group"].fill in row[1] and COLOURS["dnn_group"].fill in row[1]
    assert re.search(r'<td class="num">2</td>', row[1])  # 1 + 1 hosts
    assert "2026-12-01 13:00:00 UTC" in row[1]
    # A running job refreshes the list.
    assert '<meta http-equiv="refresh"' in body


def test_an_empty_index_says_how_to_start_a_job() -> None:
    source = FakeSource([Frame()])
    source.records = []
    body = client(source).get("/").text

    assert "No jobs yet" in body and "<table" not in body


def test_the_index_lists_the_newest_jobs_and_counts_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(page, "INDEX_JOBS", 1)
    records = [JobRecord(JOB, Path("/a"), Status.COMPLETED, T0.isoformat()),
               JobRecord("old-job", Path("/b"), Status.COMPLETED, T0.isoformat()),
               JobRecord("older-job", Path("/c"), Status.COMPLETED, T0.isoformat())]
    body = client(FakeSource([Frame("Completed", "Completed")], jobs=records)).get("/").text

    assert f'href="/jobs/{JOB}"' in body and "old-job" not in body
    assert "2 older jobs not listed." in body
    assert '<meta http-equiv="refresh"' not in body  # nothing runs: nothing to refresh


# --------------------------------------------------------------------------------------------------
# The job page


def test_the_job_page_holds_the_hosts_groups_colours_and_diagram() -> None:
    frame = Frame(hosts=[host("algo-1", "running", started=0), host("algo-2", "created")])
    source = FakeSource([frame], svg='<svg id="the-diagram"><text>algo-1</text></svg>')
    response = client(source).get(f"/jobs/{JOB}")
    body = response.text

    assert response.status_code == 200
    assert "Content-Security-Policy" in response.headers and "script-src 'self'" in response.headers[
        "Content-Security-Policy"]
    rows = dict(re.findall(r'<tr data-host="(algo-\d)">(.*?)</tr>', body, re.S))
    assert list(rows) == ["algo-1", "algo-2"]
    assert "data_group" in rows["algo-1"] and COLOURS["data_group"].fill in rows["algo-1"]
    assert "dnn_group" in rows["algo-2"] and COLOURS["dnn_group"].fill in rows["algo-2"]
    assert "ml.p3.2xlarge" in rows["algo-2"] and 'class="state state-created"' in rows["algo-2"]
    assert '<svg id="the-diagram">' in body  # Graphviz's SVG, inline
    # One log pane per host, in its group's colour; the script and data the page runs on.
    panes = re.findall(r'<div class="log-pane" data-host="(algo-\d)" style="border-color: (#[0-9a-f]+)"', body)
    assert panes == [("algo-1", COLOURS["data_group"].stroke), ("algo-2", COLOURS["dnn_group"].stroke)]
    embedded = re.search(r'<script type="application/json" id="job-data">(.*?)</script>', body, re.S)
    assert embedded is not None
    data = json.loads(embedded[1])
    assert data["events"] == f"/jobs/{JOB}/events" and data["stop"] == f"/jobs/{JOB}/stop"
    assert data["groups"]["dnn_group"] == {"fill": COLOURS["dnn_group"].fill, "stroke": COLOURS["dnn_group"].stroke}
    assert f'src="{page.STATIC_PREFIX}/job.js"' in body and f'href="{page.STATIC_PREFIX}/page.css"' in body
    assert "Training now" in body  # the secondary status' message


def test_the_job_page_says_what_stands_in_for_the_image_and_on_which_python() -> None:
    notes = ["hetero-emu/pytorch-training:1.11.0-py39 stands in for 7631.../pytorch-training:1.11.0-gpu-py38",
             "pytorch 1.11.0 py38: running on Python 3.9 (Debian has no 3.8)"]

    class StandIn(FakeSource):
        def describe(self, name: str) -> dict[str, Any]:
            return {**super().describe(name), "Emulator": {"StandIn": {"Notes": notes}}}

    body = client(StandIn([Frame()])).get(f"/jobs/{JOB}").text
    assert re.findall(r'<p class="muted image-note">(.*?)</p>', body) == notes
    assert "image-note" not in client(FakeSource([Frame()])).get(f"/jobs/{JOB}").text


def test_without_graphviz_the_page_shows_the_dot_text_escaped() -> None:
    source = FakeSource([Frame()], svg=None, dot='digraph cluster { a [label="<b>x</b>"] }')
    body = client(source).get(f"/jobs/{JOB}").text

    assert '<pre class="dot">digraph cluster { a [label=&#34;&lt;b&gt;x&lt;/b&gt;&#34;] }</pre>' in body


def test_names_and_messages_are_escaped_in_the_page() -> None:
    frame = Frame(secondary="<img src=x onerror=alert(1)>")
    body = client(FakeSource([frame])).get(f"/jobs/{JOB}").text

    assert "<img src=x" not in body and "&lt;img src=x" in body


@pytest.mark.parametrize("path", ["/jobs/no-such-job", "/jobs/no-such-job/events", "/jobs/bad..name",
                                  "/jobs/" + "a" * 70])
def test_a_job_that_does_not_exist_gets_a_404_page_linking_to_the_index(path: str) -> None:
    response = client(FakeSource([Frame()])).get(path)

    assert response.status_code == 404
    assert "No such job" in response.text and 'href="/"' in response.text
    assert "text/html" in response.headers["content-type"]


# --------------------------------------------------------------------------------------------------
# The events


def lines_of(log: Sequence[str]) -> bytes:
    return "".join(log).encode()


def test_the_events_send_each_state_change_and_each_log_line_once_in_order() -> None:
    frames = [
        Frame(hosts=[host("algo-1", "pending")]),
        Frame(hosts=[host("algo-1", "running", started=0)], logs={"algo-1": b"line 1\nline 2\n"}),
        Frame(hosts=[host("algo-1", "running", started=0)], logs={"algo-1": b"line 1\nline 2\nline 3\nline 4 pa"}),
        Frame(hosts=[host("algo-1", "running", started=0)], logs={"algo-1": b"line 1\nline 2\nline 3\nline 4 pa"}),
        Frame("Completed", "Completed", hosts=[host("algo-1", "exited", exit_code=0, started=0, finished=9)],
              logs={"algo-1": b"line 1\nline 2\nline 3\nline 4 part\r\nline 5 without newline"},
              end=T0 + timedelta(seconds=12)),
    ]
    events = stream(FakeSource(frames))

    assert events[0] == ("", "retry: 3000", None)
    kinds = [kind for kind, _, _ in events if kind]
    states = [[h["state"] for h in data["hosts"]] for kind, data, _ in events if kind == "hosts"]
    assert states == [["pending"], ["running"], ["exited"]]
    logs = [data for kind, data, _ in events if kind == "log"]
    assert [d["lines"] for d in logs] == [["line 1", "line 2"], ["line 3"], ["line 4 part", "line 5 without newline"]]
    # Each batch starts where the one before ended.
    assert [(d["from"], d["next"]) for d in logs] == [(0, 14), (14, 21), (21, 56)]
    statuses = [data["status"] for kind, data, _ in events if kind == "status"]
    assert statuses == ["InProgress", "Completed"]
    assert kinds[-1] == "end" and events[-1][1] == {"status": "Completed"}
    # The exited host's phases end with the upload until TrainingEndTime.
    phases = [data["phases"] for kind, data, _ in events if kind == "phases"][-1]
    assert phases["algo-1"] == [["script", T0.isoformat(), (T0 + timedelta(seconds=9)).isoformat()],
                                ["upload", (T0 + timedelta(seconds=9)).isoformat(),
                                 (T0 + timedelta(seconds=12)).isoformat()]]


def test_a_running_hosts_last_phase_is_open_and_phases_come_from_the_toolkits_lines() -> None:
    log = "\n".join([toolkit(T0 + timedelta(seconds=1), "Installing dependencies from requirements.txt"),
                     "Collecting six", toolkit(T0 + timedelta(seconds=4), "Invoking user script"), "epoch 1", ""])
    frames = [Frame(hosts=[host("algo-1", "running", started=0)], logs={"algo-1": log.encode()}),
              Frame("Stopped", "Stopped", hosts=[host("algo-1", "exited", exit_code=143, started=0, finished=6)],
                    logs={"algo-1": log.encode()}, end=T0 + timedelta(seconds=6))]
    events = stream(FakeSource(frames))
    phases = [data["phases"]["algo-1"] for kind, data, _ in events if kind == "phases"]

    def at(seconds: float) -> str:
        return (T0 + timedelta(seconds=seconds)).isoformat()

    assert phases[0] == [["toolkit", at(0), at(1)], ["requirements", at(1), at(4)], ["script", at(4), None]]
    assert phases[-1][-1] == ["script", at(4), at(6)]  # ended: no upload after a stop at the end time


def test_a_reconnecting_browser_gets_only_what_it_lacks() -> None:
    frames = [Frame(hosts=[host("algo-1", "running", started=0)], logs={"algo-1": b"one\ntwo\n"}),
              Frame(hosts=[host("algo-1", "running", started=0)], logs={"algo-1": b"one\ntwo\nthree\n"},
                    metrics=[Sample("algo-1", "loss", 0.5, T0.timestamp() + 1)]),
              Frame("Completed", "Completed", hosts=[host("algo-1", "exited", exit_code=0, started=0, finished=3)],
                    logs={"algo-1": b"one\ntwo\nthree\n"}, metrics=[Sample("algo-1", "loss", 0.5, T0.timestamp() + 1)])]
    first = stream(FakeSource(frames[:1] + [replace(frames[0], status="Failed")]))
    last_id = [i for kind, _, i in first if kind == "log"][-1]
    assert last_id is not None

    again = stream(FakeSource(frames), headers={"Last-Event-ID": last_id})
    logs = [data for kind, data, _ in again if kind == "log"]
    assert [d["lines"] for d in logs] == [["three"]] and logs[0]["from"] == 8
    metric_id = [i for kind, _, i in again if kind == "metrics"][-1]
    assert metric_id is not None
    third = stream(FakeSource(frames[2:]), headers={"Last-Event-ID": metric_id})
    assert [kind for kind, _, _ in third if kind in ("log", "metrics")] == []


def test_a_fresh_page_gets_the_tail_of_a_long_log_from_a_line_start_and_the_phases_of_all_of_it() -> None:
    head = toolkit(T0 + timedelta(seconds=2), "Invoking user script") + "\n"
    body = "".join(f"progress line {i:06d} of a long run\n" for i in range(20000))
    log = (head + body).encode()
    frames = [Frame("Completed", "Completed", hosts=[host("algo-1", "exited", exit_code=0, started=0, finished=50)],
                    logs={"algo-1": log}, end=T0 + timedelta(seconds=50))]
    events = stream(FakeSource(frames))
    logs = [data for kind, data, _ in events if kind == "log"]

    assert logs[0]["skipped"] == logs[0]["from"] > 0
    assert log[logs[0]["from"] - 1:logs[0]["from"]] == b"\n"  # a whole line, not a piece of one
    sent = [line for d in logs for line in d["lines"]]
    assert sent[-1] == "progress line 019999 of a long run"
    # The whole lines of the last TAIL_BYTES.
    assert page.TAIL_BYTES - len("progress line 000000 of a long run\n") < len(log) - logs[0]["from"] <= page.TAIL_BYTES
    assert sent == log[logs[0]["from"]:].decode().splitlines()
    phases = [data["phases"]["algo-1"] for kind, data, _ in events if kind == "phases"][-1]
    assert [p[0] for p in phases] == ["toolkit", "script"]  # the toolkit line was in the part not sent


def test_the_unshown_middle_of_a_long_log_is_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(page, "SCAN_BYTES", 1000)
    head = toolkit(T0 + timedelta(seconds=1), "Invoking user script") + "\n"
    middle = "".join(f"output {i:07d}\n" for i in range(100000))
    tail = toolkit(T0 + timedelta(seconds=90), "Waiting for the process to finish and give a return code.") + "\nbye\n"
    log = (head + middle + tail).encode()
    frames = [Frame("Completed", "Completed", hosts=[host("algo-1", "exited", exit_code=0, started=0, finished=91)],
                    logs={"algo-1": log}, end=T0 + timedelta(seconds=95))]
    source = FakeSource(frames)
    events = stream(source)

    sent_from = [d for kind, d, _ in events if kind == "log"][0]["from"]
    # One read of the head (up to READ_BYTES), then the shown tail: none of the middle beyond.
    assert [offset for _, offset, _ in source.reads if offset < sent_from] == [0]
    assert sent_from > page.READ_BYTES
    phases = [data["phases"]["algo-1"] for kind, data, _ in events if kind == "phases"][-1]
    assert [p[0] for p in phases] == ["toolkit", "script", "toolkit", "upload"]


def test_metric_points_are_sent_once_each() -> None:
    one = Sample("algo-1", "loss", 0.9, T0.timestamp() + 1)
    two = Sample("algo-2", "loss", 0.7, T0.timestamp() + 2)
    three = Sample("algo-1", "loss", 0.5, T0.timestamp() + 3)
    frames = [Frame(hosts=[host("algo-1", "running", started=0)], metrics=[one]),
              Frame(hosts=[host("algo-1", "running", started=0)], metrics=[one, two]),
              Frame(hosts=[host("algo-1", "running", started=0)], metrics=[one, two]),
              Frame("Completed", "Completed", hosts=[host("algo-1", "exited", exit_code=0, started=0, finished=4)],
                    metrics=[one, two, three])]
    events = stream(FakeSource(frames))
    sent = [[(p["host"], p["value"]) for p in data["points"]] for kind, data, _ in events if kind == "metrics"]

    assert sent == [[("algo-1", 0.9)], [("algo-2", 0.7)], [("algo-1", 0.5)]]


def test_a_quiet_stream_keeps_itself_alive_with_a_comment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(page, "KEEPALIVE_SECONDS", 0.0)
    quiet = Frame(hosts=[host("algo-1", "running", started=0)])
    frames = [quiet, quiet, quiet, Frame("Completed", "Completed", hosts=[host("algo-1", "exited", exit_code=0,
                                                                                started=0, finished=1)])]
    events = stream(FakeSource(frames))

    assert ("", ": keep-alive", None) in events
    assert [kind for kind, _, _ in events if kind][-1] == "end"


def test_a_job_whose_record_goes_away_ends_its_stream() -> None:
    source = FakeSource([Frame(hosts=[host("algo-1", "running", started=0)])])
    source.vanish_after = 2
    events = stream(source)

    assert [kind for kind, _, _ in events if kind][-1] == "end" and events[-1][1] == {"status": "gone"}


def test_the_stream_object_sends_nothing_twice() -> None:
    frame = Frame(hosts=[host("algo-1", "running", started=0)], logs={"algo-1": b"a\n"})
    stream_ = JobStream(FakeSource([frame]), JOB)
    first, _ = stream_.poll()
    second, _ = stream_.poll()

    assert {e.kind for e in first} == {"status", "hosts", "log", "phases"}
    assert second == []


# --------------------------------------------------------------------------------------------------
# Stop


def stop_token(http: TestClient) -> str:
    """The stop token the job page embeds for its script (emulator/serve/page.py `_Page.stop`)."""
    embedded = re.search(r'<script type="application/json" id="job-data">(.*?)</script>', http.get(f"/jobs/{JOB}").text,
                         re.S)
    assert embedded is not None
    return str(json.loads(embedded[1])["stopToken"])


def test_the_stop_button_posts_and_stops_the_job() -> None:
    source = FakeSource([Frame()])
    http = client(source)
    body = http.get(f"/jobs/{JOB}").text
    assert f'<form id="stop-form" method="post" action="/jobs/{JOB}/stop">' in body
    token = stop_token(http)

    answer = http.post(f"/jobs/{JOB}/stop", headers={"Accept": "application/json", page.STOP_HEADER: token})
    assert answer.status_code == 200 and answer.json() == {"stopping": JOB}
    # The form as a browser without script posts it, with the token in its hidden field.
    plain = http.post(f"/jobs/{JOB}/stop", data={page.STOP_FIELD: token}, follow_redirects=False)
    assert plain.status_code == 303 and plain.headers["location"] == f"/jobs/{JOB}"
    assert source.stopped == [JOB, JOB]


def test_a_refused_stop_says_why() -> None:
    source = FakeSource([Frame()], refuse_stop="The request was rejected because the training job is in status "
                                               "Completed.")
    http = client(source)
    answer = http.post(f"/jobs/{JOB}/stop", headers={"Accept": "application/json", page.STOP_HEADER: stop_token(http)})

    assert answer.status_code == 409 and "Completed" in answer.json()["error"]


def test_another_site_cannot_stop_a_job_through_the_browser() -> None:
    source = FakeSource([Frame()])
    http = client(source)
    token = stop_token(http)
    cross = http.post(f"/jobs/{JOB}/stop", headers={"Origin": "https://evil.example", "Accept": "application/json",
                                                     page.STOP_HEADER: token})
    fetched = http.post(f"/jobs/{JOB}/stop", headers={"Sec-Fetch-Site": "cross-site", page.STOP_HEADER: token})
    same = http.post(f"/jobs/{JOB}/stop", headers={"Origin": "http://testserver", "Accept": "application/json",
                                                    page.STOP_HEADER: token})

    assert cross.status_code == 403 and fetched.status_code == 403
    assert same.status_code == 200 and source.stopped == [JOB]


def test_stopping_an_unknown_job_is_a_404() -> None:
    source = FakeSource([Frame()])
    http = client(source)
    assert http.post("/jobs/other-job/stop", headers={page.STOP_HEADER: stop_token(http)}).status_code == 404
    assert source.stopped == []


# --------------------------------------------------------------------------------------------------
# The token


def test_with_a_token_every_page_asks_for_it_once_then_keeps_a_cookie() -> None:
    source = FakeSource([Frame("Completed", "Completed")])
    http = client(source, token="s3cret")

    for path in ("/", f"/jobs/{JOB}", f"/jobs/{JOB}/events"):
        denied = http.get(path)
        assert denied.status_code == 401
        assert '<form method="get"' in denied.text and 'name="token"' in denied.text
    assert http.post(f"/jobs/{JOB}/stop").status_code == 401 and source.stopped == []
    wrong = http.get("/?token=nope")
    assert wrong.status_code == 401 and "not the server" in wrong.text

    given = http.get(f"/jobs/{JOB}?token=s3cret&x=1", follow_redirects=False)
    assert given.status_code == 303 and given.headers["location"] == f"/jobs/{JOB}?x=1"
    cookie = given.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    assert "s3cret" not in cookie  # a digest, not the token
    assert http.get(f"/jobs/{JOB}").status_code == 200  # the cookie from now on
    assert http.get("/").status_code == 200
    with http.stream("GET", f"/jobs/{JOB}/events") as events:
        assert events.status_code == 200


def test_the_static_files_need_no_token() -> None:
    http = client(FakeSource([Frame()]), token="s3cret")

    assert http.get(f"{page.STATIC_PREFIX}/job.js").status_code == 200


# --------------------------------------------------------------------------------------------------
# The static files


def test_the_script_and_style_sheet_are_served() -> None:
    http = client(FakeSource([Frame()]))
    script = http.get(f"{page.STATIC_PREFIX}/job.js")
    style = http.get(f"{page.STATIC_PREFIX}/page.css")

    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    assert "new EventSource(data.events)" in script.text
    assert style.status_code == 200 and "text/css" in style.headers["content-type"]
    assert http.get(f"{page.STATIC_PREFIX}/../page.py").status_code == 404


def test_the_page_loads_nothing_from_elsewhere() -> None:
    files = [*(page.HERE / "templates").iterdir(), *(page.HERE / "static").iterdir()]
    assert {p.suffix for p in files} >= {".html", ".js", ".css"}
    for path in files:
        text = path.read_text().replace("http://www.w3.org/2000/svg", "")
        assert "http://" not in text and "https://" not in text, path.name
        assert not re.search(r"""(src|href)=["']//""", text), path.name  # protocol-relative


def test_the_script_never_puts_text_in_as_html() -> None:
    script = (page.HERE / "static" / "job.js").read_text()
    assert "innerHTML" not in script and "insertAdjacentHTML" not in script and "document.write" not in script


# --------------------------------------------------------------------------------------------------
# LiveJobs, the real source


@pytest.fixture
def live(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[LiveJobs, Path]:
    """A job record and its folder in a state folder of this test's own, described by the real
    training service, with no engine (find says so)."""
    from emulator.aws.training import SageMakerTraining

    monkeypatch.setenv("HETERO_EMU_STATE_DIR", str(tmp_path / "state"))
    folder = tmp_path / "out" / JOB
    (folder / "logs").mkdir(parents=True)
    job_records.record(JOB, folder, Status.IN_PROGRESS, SecondaryStatus="Training",
                       TrainingStartTime=T0.isoformat())
    source = LiveJobs(SageMakerTraining(tmp_path / "s3", region="us-east-1"))
    source.training._backend = StubEngine({})
    return source, folder


class StubEngine:
    """The two engine calls LiveJobs makes, over a fixed set of containers."""

    def __init__(self, states: Mapping[str, ContainerState], labels: Mapping[str, Mapping[str, str]] | None = None,
                 down: bool = False) -> None:
        self.states_ = states
        self.labels = labels or {}
        self.down = down

    def find(self, job: str | None = None) -> list[Resource]:
        if self.down:
            raise DockerUnavailable("no engine here")
        return [Resource("container", name, JOB, self.labels[name]) for name in self.states_]

    def states(self, names: Sequence[str]) -> list[ContainerState]:
        return [self.states_[n] for n in names]


def test_livejobs_reads_a_growing_log_in_whole_lines(live: tuple[LiveJobs, Path]) -> None:
    source, folder = live
    path = folder / "logs" / "algo-1.log"
    path.write_bytes(b"epoch 1\nhalf a li")
    lines, offset = source.log_lines(JOB, "algo-1", 0)
    assert (lines, offset) == (["epoch 1"], 8)
    assert source.log_lines(JOB, "algo-1", offset) == ([], 8)  # the half line waits for its end

    with path.open("ab") as log:
        log.write(b"ne\r\n 10%\r 50%\r100%\nbad \xff byte\nno newline yet")
    lines, offset = source.log_lines(JOB, "algo-1", offset)
    assert lines == ["half a line", "100%", "bad \ufffd byte"]  # CRLF, a progress bar's last state
    assert source.log_lines(JOB, "algo-1", offset) == ([], offset)
    assert source.log_lines(JOB, "algo-1", offset, final=True) == (["no newline yet"], path.stat().st_size)
    assert source.log_size(JOB, "algo-1") == path.stat().st_size
    assert source.log_lines(JOB, "algo-9", 0) == ([], 0)  # no such log yet
    # Where the next whole line starts: at the offset itself when a line starts there.
    assert [source.line_start(JOB, "algo-1", n) for n in (0, 1, 8, 9)] == [0, 8, 8, 21]


def test_livejobs_reads_only_up_to_an_end_and_refuses_other_paths(live: tuple[LiveJobs, Path]) -> None:
    source, folder = live
    (folder / "logs" / "algo-1.log").write_bytes(b"one\ntwo\nthree\n")

    assert source.log_lines(JOB, "algo-1", 0, end=6) == (["one"], 4)
    with pytest.raises(NoSuchJob):
        source.log_lines(JOB, "../../etc/passwd", 0)
    with pytest.raises(NoSuchJob):
        source.log_lines("../x", "algo-1", 0)


def test_livejobs_describes_a_running_job_and_refuses_an_unknown_one(live: tuple[LiveJobs, Path]) -> None:
    source, _ = live
    doc = source.describe(JOB)

    assert doc["TrainingJobName"] == JOB and doc["TrainingJobStatus"] == "InProgress"
    assert [r.job_name for r in source.jobs()] == [JOB]
    with pytest.raises(NoSuchJob):
        source.describe("never-ran")


def test_livejobs_hosts_of_a_running_job_come_from_the_engine(live: tuple[LiveJobs, Path]) -> None:
    source, folder = live
    started = T0.timestamp()
    names = {h: container_name(JOB, h) for h in ("algo-1", "algo-2", "algo-3")}
    labels = {names[h]: {LABEL_JOB: JOB, LABEL_HOST: h, LABEL_GROUP: g, LABEL_INSTANCE_TYPE: t}
              for h, g, t in (("algo-1", "data_group", "ml.c5.xlarge"), ("algo-2", "dnn_group", "ml.p3.2xlarge"),
                              ("algo-3", "dnn_group", "ml.p3.2xlarge"))}
    states = {names["algo-1"]: ContainerState(names["algo-1"], running=True, started_at=started),
              names["algo-2"]: ContainerState(names["algo-2"], running=False, exit_code=1, started_at=started,
                                              finished_at=started + 5),
              names["algo-3"]: ContainerState(names["algo-3"], running=True)}
    source.training._backend = StubEngine(states, labels)
    stage_hosts(folder, {"algo-1": "data_group", "algo-2": "dnn_group", "algo-3": "dnn_group"})
    found = {h.host: h for h in source.hosts(JOB)}

    # The engine's list of running containers gives no start time (algo-3): running since first seen.
    assert [h.state for h in found.values()] == ["running", "failed", "running"]
    assert found["algo-3"].started is not None and source.hosts(JOB)[2].started == found["algo-3"].started
    assert found["algo-2"].exit_code == 1 and found["algo-2"].finished == T0 + timedelta(seconds=5)
    assert found["algo-1"].started == T0 and found["algo-1"].group == "data_group"
    assert [h.group_index for h in found.values()] == [0, 1, 1]


def stage_hosts(folder: Path, groups: Mapping[str, str]) -> None:
    """Each host's resourceconfig.json as the plan stages it (emulator/planning/contract.py)."""
    order = list(dict.fromkeys(groups.values()))
    types = {"data_group": "ml.c5.xlarge", "dnn_group": "ml.p3.2xlarge"}
    layout = [{"instance_group_name": g, "instance_type": types[g], "hosts": [h for h in groups if groups[h] == g]}
              for g in order]
    for name, group in groups.items():
        config = folder / "hosts" / name / "input" / "config"
        config.mkdir(parents=True)
        (config / "resourceconfig.json").write_text(json.dumps(
            {"current_host": name, "current_group_name": group, "current_instance_type": types[group],
             "hosts": list(groups), "instance_groups": layout}))


def test_livejobs_hosts_before_the_containers_are_pending(live: tuple[LiveJobs, Path]) -> None:
    source, folder = live
    job_records.record(JOB, folder, Status.IN_PROGRESS, TrainingStartTime=None)
    record = job_records.find(JOB)
    assert record is not None
    job_records.write_atomically(job_records.state_dir() / "jobs" / f"{JOB}.json",
                                 json.dumps({k: v for k, v in record.doc.items() if k != "TrainingStartTime"}))
    stage_hosts(folder, {"algo-1": "data_group", "algo-2": "dnn_group"})
    source.training._backend = StubEngine({}, down=True)

    assert [(h.host, h.group, h.instance_type, h.state) for h in source.hosts(JOB)] == [
        ("algo-1", "data_group", "ml.c5.xlarge", "pending"), ("algo-2", "dnn_group", "ml.p3.2xlarge", "pending")]


def test_livejobs_hosts_of_an_ended_job_come_from_job_json(live: tuple[LiveJobs, Path]) -> None:
    source, folder = live
    (folder / "job.json").write_text(json.dumps({
        "TrainingJobName": JOB, "TrainingJobStatus": "Failed", "TrainingStartTime": T0.isoformat(),
        "ResourceConfig": {"InstanceGroups": [
            {"InstanceGroupName": "data_group", "InstanceType": "ml.c5.xlarge", "InstanceCount": 1},
            {"InstanceGroupName": "dnn_group", "InstanceType": "ml.p3.2xlarge", "InstanceCount": 1}]},
        "Hosts": [{"Host": "algo-2", "InstanceGroupName": "dnn_group", "InstanceType": "ml.p3.2xlarge", "ExitCode": 3,
                   "Seconds": 4.5},
                  {"Host": "algo-1", "InstanceGroupName": "data_group", "InstanceType": "ml.c5.xlarge",
                   "ExitCode": 143, "Seconds": 5.0}]}))
    job_records.record(JOB, folder, Status.FAILED)
    hosts = source.hosts(JOB)

    assert [(h.host, h.state, h.exit_code, h.group_index) for h in hosts] == [
        ("algo-1", "failed", 143, 0), ("algo-2", "failed", 3, 1)]
    assert hosts[1].started == T0 and hosts[1].finished == T0 + timedelta(seconds=4.5)


def test_livejobs_metrics_are_the_jobs_metric_files(live: tuple[LiveJobs, Path]) -> None:
    source, folder = live
    (folder / "metrics").mkdir()
    (folder / "metrics" / "algo-1.jsonl").write_text('{"name": "loss", "value": 0.5, "at": 10.0}\n')

    assert source.metrics(JOB) == [Sample("algo-1", "loss", 0.5, 10.0)]


def test_livejobs_stop_goes_through_stoptrainingjob(live: tuple[LiveJobs, Path]) -> None:
    source, folder = live
    job_records.record(JOB, folder, Status.COMPLETED)

    with pytest.raises(StopRefused, match="Completed"):
        source.stop(JOB)


def test_livejobs_draws_the_diagram_once_per_recorded_dot(live: tuple[LiveJobs, Path],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    source, folder = live
    assert source.diagram_svg(JOB) is None and source.diagram_dot(JOB) is None  # not staged yet
    job_records.record(JOB, folder, Status.IN_PROGRESS,
                       ClusterDot='digraph cluster { "host_algo-1" [label="algo-1"] }\n')
    assert source.diagram_dot(JOB) is not None and "algo-1" in (source.diagram_dot(JOB) or "")
    if shutil.which("dot") is None:
        pytest.skip("Graphviz's dot is not installed")
    svg = source.diagram_svg(JOB)
    assert svg is not None and svg.startswith("<svg") and ">algo-1</text>" in svg
    runs: list[object] = []
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: runs.append(a))
    assert source.diagram_svg(JOB) == svg and runs == []  # cached


def test_livejobs_without_graphviz_has_no_svg(live: tuple[LiveJobs, Path], monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    source, folder = live
    job_records.record(JOB, folder, Status.IN_PROGRESS, ClusterDot="digraph cluster { a }\n")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))

    assert source.diagram_svg(JOB) is None
    assert source.diagram_dot(JOB) == "digraph cluster { a }\n"


def test_the_page_over_livejobs_streams_a_finished_jobs_log(live: tuple[LiveJobs, Path]) -> None:
    source, folder = live
    (folder / "logs" / "algo-1.log").write_bytes(b"hello\nbye")
    (folder / "job.json").write_text(json.dumps({
        "TrainingJobName": JOB, "TrainingJobStatus": "Completed", "TrainingStartTime": T0.isoformat(),
        "TrainingEndTime": (T0 + timedelta(seconds=3)).isoformat(),
        "Hosts": [{"Host": "algo-1", "InstanceGroupName": "homogeneousCluster", "InstanceType": "ml.c5.xlarge",
                   "ExitCode": 0, "Seconds": 2.0}]}))
    job_records.record(JOB, folder, Status.COMPLETED)
    events = stream(source)

    assert [d["lines"] for kind, d, _ in events if kind == "log"] == [["hello", "bye"]]
    assert [kind for kind, _, _ in events if kind][-1] == "end"


# --------------------------------------------------------------------------------------------------
# The run leaves cluster.dot for the page


def test_a_run_writes_cluster_dot_in_its_job_folder(project: Path) -> None:
    from fake_backend import FakeBackend, exits

    from emulator.jobspec import load_spec_file
    from emulator.options import RunOptions
    from emulator.reports import diagram
    from emulator.reports.console import RecordingReporter
    from emulator.run.runner import run_job

    (project / "job.yaml").write_text("job_name: dot-job\nentry_point: train.py\nsource_dir: code\n"
                                      "instance_type: ml.c5.xlarge\ninstance_count: 2\noutput_path: out\n"
                                      "distribution: {mpi: {enabled: true}}\n")
    result = run_job(load_spec_file(project / "job.yaml"), RunOptions(grace=1),
                     backend=FakeBackend({"algo-1": exits(0), "algo-2": exits(0)}), reporter=RecordingReporter())
    text = (result.job_dir / diagram.DOT_FILE).read_text()

    assert text.startswith("digraph cluster {")
    assert '"host_algo-1" -> "host_algo-2" [label="mpirun over ssh"' in text


def test_a_cluster_dot_that_cannot_be_written_does_not_fail_the_run(project: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from fake_backend import FakeBackend, exits

    from emulator.jobspec import load_spec_file
    from emulator.options import RunOptions
    from emulator.reports import diagram
    from emulator.reports.console import RecordingReporter
    from emulator.run.runner import run_job

    def broken(plan: object) -> object:
        raise RuntimeError("no picture today")

    monkeypatch.setattr(diagram, "graph", broken)
    (project / "job.yaml").write_text("job_name: dot-job-2\nentry_point: train.py\nsource_dir: code\n"
                                      "instance_type: ml.c5.xlarge\ninstance_count: 1\noutput_path: out\n")
    reporter = RecordingReporter()
    result = run_job(load_spec_file(project / "job.yaml"), RunOptions(grace=1),
                     backend=FakeBackend({"algo-1": exits(0)}), reporter=reporter)

    assert result.status == "Completed"
    assert any("cluster.dot not written: no picture today" in w for w in reporter.warnings)



# --------------------------------------------------------------------------------------------------
# The diagram the page shows: how the hosts talk (emulator/reports/diagram.py)

EDGE = re.compile(r'^\s*"?([\w-]+)"? -> "?([\w-]+)"? \[label="([^"]*)"', re.M)


def talk_plan(load: Any, distribution: Mapping[str, Any], counts: tuple[int, int] = (2, 3),
              host_order: str = "spec", seed: int | None = None) -> Any:
    from emulator.planning.plan import make_plan

    raw = {"job_name": "talk-job", "entry_point": "train.py", "source_dir": "./code",
           "instance_groups": [
               {"instance_group_name": "data_group", "instance_type": "ml.c5.xlarge", "instance_count": counts[0]},
               {"instance_group_name": "dnn_group", "instance_type": "ml.p4d.24xlarge", "instance_count": counts[1]}],
           "distribution": dict(distribution)}
    return make_plan(load(raw), "talk-job", host_order, seed, job_dir=Path("/tmp/never-written"))


def talk_edges(plan: Any) -> list[tuple[str, str, str]]:
    from emulator.reports import diagram

    return [e for e in EDGE.findall(diagram.graph(plan).source) if e[2] in ("mpirun over ssh", "torchrun rendezvous")]


def test_mpi_edges_go_from_the_first_host_of_the_distribution_group_to_each_other(load: Any) -> None:
    plan = talk_plan(load, {"mpi": {"enabled": True}, "instance_groups": ["dnn_group"]})

    assert talk_edges(plan) == [("host_algo-3", "host_algo-4", "mpirun over ssh"),
                                ("host_algo-3", "host_algo-5", "mpirun over ssh")]


def test_mpi_edges_follow_a_shuffled_host_order(load: Any) -> None:
    from emulator.planning.plan import mpi_hosts

    for seed in range(40):
        plan = talk_plan(load, {"mpi": {"enabled": True}, "instance_groups": ["dnn_group"]}, host_order="shuffled",
                         seed=seed)
        leader, *workers = mpi_hosts(plan)
        if leader != "algo-3":
            break
    assert leader != "algo-3"
    assert talk_edges(plan) == [(f"host_{leader}", f"host_{w}", "mpirun over ssh") for w in workers]


def test_smdistributed_data_parallel_talks_over_mpi_too(load: Any) -> None:
    plan = talk_plan(load, {"smdistributed": {"dataparallel": {"enabled": True}}, "instance_groups": ["dnn_group"]},
                     counts=(1, 2))

    assert talk_edges(plan) == [("host_algo-2", "host_algo-3", "mpirun over ssh")]


def test_torchrun_makes_every_group_a_world_with_its_first_host_as_the_rendezvous(load: Any) -> None:
    from emulator.reports import diagram

    plan = talk_plan(load, {"torch_distributed": {"enabled": True}, "instance_groups": ["dnn_group"]})
    source = diagram.graph(plan).source

    assert talk_edges(plan) == [(f"host_algo-{n}", f"rendezvous_{0 if n < 3 else 1}", "torchrun rendezvous")
                                for n in range(1, 6)]
    assert 'rendezvous_0 [label="torchrun rendezvous\\nalgo-1:7777 (MASTER_ADDR:MASTER_PORT)"' in source
    assert 'rendezvous_1 [label="torchrun rendezvous\\nalgo-3:7777 (MASTER_ADDR:MASTER_PORT)"' in source
    # Each rendezvous sits in its world's group box, after the group's hosts.
    box = source[source.index("subgraph cluster_group_1"):]
    assert box.index('"host_algo-5"') < box.index("rendezvous_1 [") < box.index("}")
    assert "mpirun over ssh" not in source


def test_a_one_host_torchrun_world_rendezvous_on_itself(load: Any) -> None:
    from emulator.reports import diagram

    plan = talk_plan(load, {"torch_distributed": {"enabled": True}, "instance_groups": ["dnn_group"]}, counts=(1, 2))
    source = diagram.graph(plan).source

    assert "127.0.0.1:29500 on algo-1 (a world of one)" in source
    assert ("host_algo-1", "rendezvous_0", "torchrun rendezvous") in talk_edges(plan)


def test_torchrun_beside_smdistributed_is_one_world_over_the_named_group(load: Any) -> None:
    # The SDK sends sagemaker_distribution_instance_groups then (Framework._distribution_configuration).
    plan = talk_plan(load, {"torch_distributed": {"enabled": True},
                            "smdistributed": {"dataparallel": {"enabled": True}}, "instance_groups": ["dnn_group"]})

    assert [e for e in talk_edges(plan) if e[2] == "torchrun rendezvous"] == [
        (f"host_algo-{n}", "rendezvous_0", "torchrun rendezvous") for n in (3, 4, 5)]


def test_without_a_distribution_the_hosts_have_no_talk_edges(load: Any) -> None:
    from emulator.planning.plan import make_plan
    from emulator.reports import diagram

    raw = {"job_name": "quiet-job", "entry_point": "train.py", "source_dir": "./code",
           "instance_type": "ml.c5.xlarge", "instance_count": 3}
    source = diagram.graph(make_plan(load(raw), "quiet-job", job_dir=Path("/tmp/never-written"))).source

    assert " -> " not in source


def test_the_talk_edges_are_drawn(load: Any) -> None:
    from emulator.reports import diagram

    if shutil.which("dot") is None:
        pytest.skip("Graphviz's dot is not installed")
    svg = diagram.graph(talk_plan(load, {"mpi": {"enabled": True}, "instance_groups": ["dnn_group"]})).pipe(
        format="svg").decode()

    assert svg.count(">mpirun over ssh</text>") == 2



# --------------------------------------------------------------------------------------------------
# The tuning view


def tuning_doc(name: str = "tune-1", *, status: str = "InProgress", trial_name: str = f"{JOB}-001-abcdef01",
               value: float = 0.25) -> dict[str, Any]:
    """A tuning job as DescribeHyperParameterTuningJob answers it, with its one ended and one running trial."""
    ended = {"TrainingJobName": trial_name, "TrainingJobStatus": "Completed", "CreationTime": T0.isoformat(),
             "TunedHyperParameters": {"lr": "0.01"}, "ObjectiveStatus": "Succeeded",
             "FinalHyperParameterTuningJobObjectiveMetric": {"MetricName": "val_loss", "Value": value}}
    running = {"TrainingJobName": f"{name}-002-abcdef02", "TrainingJobStatus": "InProgress",
               "CreationTime": T0.isoformat(), "TunedHyperParameters": {"lr": "0.1"}, "ObjectiveStatus": "Pending"}
    return {"HyperParameterTuningJobName": name, "HyperParameterTuningJobStatus": status,
            "CreationTime": T0.isoformat(),
            "HyperParameterTuningJobConfig": {
                "Strategy": "Random", "ResourceLimits": {"MaxNumberOfTrainingJobs": 4, "MaxParallelTrainingJobs": 2},
                "HyperParameterTuningJobObjective": {"Type": "Minimize", "MetricName": "val_loss"}},
            "TrainingJobStatusCounters": {"Completed": 1, "InProgress": 1, "RetryableError": 0,
                                          "NonRetryableError": 0, "Stopped": 0},
            "ObjectiveStatusCounters": {"Succeeded": 1, "Pending": 1, "Failed": 0},
            "BestTrainingJob": ended, "TrainingJobSummaries": [ended, running]}


def test_the_index_lists_tuning_jobs_with_their_strategy_trials_and_best() -> None:
    source = FakeSource([Frame()])
    source.tunings = [tuning_doc()]
    body = client(source).get("/").text

    row = re.search(r'<tr class="tuning" data-tuning="tune-1">(.*?)</tr>', body, re.S)
    assert row is not None
    assert 'href="/tuning/tune-1"' in row[1] and "Random" in row[1] and "InProgress" in row[1]
    assert "2 / 4" in row[1]  # trials so far of MaxNumberOfTrainingJobs
    assert f'href="/jobs/{JOB}-001-abcdef01">0.25<' in row[1]


def test_the_tuning_view_shows_each_trial_linked_the_best_marked_and_the_chart() -> None:
    source = FakeSource([Frame()])
    source.tunings = [tuning_doc()]
    body = client(source).get("/tuning/tune-1").text

    trials = re.findall(r'<tr class="trial( best)?" data-trial="([^"]+)">(.*?)</tr>', body, re.S)
    assert [(best, name) for best, name, _ in trials] == [(" best", f"{JOB}-001-abcdef01"), ("", "tune-1-002-abcdef02")]
    assert f'href="/jobs/{JOB}-001-abcdef01"' in trials[0][2] and "0.25" in trials[0][2] and "lr=0.01" in trials[0][2]
    assert "Pending" not in trials[1][2] and "InProgress" in trials[1][2]
    # The picture as an image (an SVG image runs nothing), the tuning job's own; a refresh while it runs.
    chart = re.search(r'<figure class="tuning-chart"><img src="data:image/svg\+xml;base64,([^"]+)"', body)
    assert chart is not None
    assert "tune-1" in base64.b64decode(chart[1]).decode() and "<svg" in base64.b64decode(chart[1]).decode()
    assert '<meta http-equiv="refresh"' in body


def test_an_ended_tuning_view_does_not_refresh() -> None:
    source = FakeSource([Frame()])
    source.tunings = [tuning_doc(status="Completed")]
    body = client(source).get("/tuning/tune-1").text

    assert '<meta http-equiv="refresh"' not in body and "Completed" in body


def test_hostile_names_in_a_tuning_job_are_escaped() -> None:
    source = FakeSource([Frame()])
    source.tunings = [tuning_doc(trial_name="x<script>alert(1)</script>")]
    body = client(source).get("/tuning/tune-1").text

    assert "<script>alert(1)</script>" not in body and "&lt;script&gt;" in body


@pytest.mark.parametrize("path", ["/tuning/no-such-tuning", "/tuning/bad..name"])
def test_a_tuning_job_that_does_not_exist_gets_a_404_page(path: str) -> None:
    response = client(FakeSource([Frame()])).get(path)

    assert response.status_code == 404 and 'href="/"' in response.text


def test_a_trials_page_links_to_its_tuning_job() -> None:
    source = FakeSource([Frame()])
    described = source.describe

    def with_arn(name: str) -> dict[str, Any]:
        arn = "arn:aws:sagemaker:us-west-2:000000000000:hyper-parameter-tuning-job/tune-1"
        return {**described(name), "TuningJobArn": arn}

    source.describe = with_arn  # type: ignore[method-assign]
    body = client(source).get(f"/jobs/{JOB}").text
    assert 'trial of the tuning job <a href="/tuning/tune-1">tune-1</a>' in body
    plain = client(FakeSource([Frame()])).get(f"/jobs/{JOB}").text
    assert "trial of the tuning job" not in plain
