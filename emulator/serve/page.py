"""The live page of `hetero-emu serve`: every job on this machine, and each job as it runs, for teaching.

`routes(source)` gives the Starlette routes the server mounts:

- `GET /`: the jobs, newest first (name, status, groups, hosts, created, duration);
- `GET /jobs/{name}`: one job: its cluster diagram, its hosts (group, instance type, state, exit code),
  a live timeline of the hosts with their phases (`emulator.serve.phases`), the metrics, one log pane
  per host and a stop button; a job that does not exist gets a 404 page that says so;
- `GET /jobs/{name}/events`: server-sent events with what changed since the last look (host states,
  new log lines, phases, status, metric points), until the job has ended and everything was sent;
- `POST /jobs/{name}/stop`: StopTrainingJob, for the page's own button only: the request must carry the
  server's stop token (which the job page embeds and its script sends as a header) and come from this
  site by its Origin;
- `GET /_hetero-emu/static/...`: the page's own script and style sheet (no CDN: the page works offline).

Everything the page shows comes from a `JobSource`; `LiveJobs` is the real one (the job records, the
job folders and the engine's containers), a test passes a fake. With a `token` (the server listens
beyond localhost) every page route asks for it: `?token=...` once, then a cookie.

Log text reaches the browser as JSON and is put into the page with `textContent` only; every HTML
answer carries a Content-Security-Policy that allows the page's own script and nothing else.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import json
import re
import secrets
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qs, urlencode
from xml.etree import ElementTree

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from emulator.errors import ApiError, EmulatorError
from emulator.jobspec.model import GROUP_NAME_PATTERN, HOMOGENEOUS_GROUP, JOB_NAME_PATTERN
from emulator.planning import contract
from emulator.planning.plan import LABEL_GROUP, LABEL_HOST, LABEL_INSTANCE_TYPE, container_name
from emulator.reports.palette import FAILURE, group_colours
from emulator.reports.tuning_chart import tuning_svg
from emulator.run import build_status, hostfiles
from emulator.run import metrics as metrics_module
from emulator.run.logs import display_text
from emulator.serve.phases import PHASES, Tracker

if TYPE_CHECKING:
    from emulator.tuning.service import TuningJobs
from emulator.jobs.service import JobRecord, TrainingJobs
from emulator.tuning.service import description as tuning_description
from emulator.tuning.service import with_trials

HERE = Path(__file__).resolve().parent
# Under a prefix no S3 bucket can have (bucket names are lower-case letters, digits, dots and hyphens,
# and cannot start with "_"), so a path-style S3 request never lands here.
STATIC_PREFIX = "/_hetero-emu/static"
COOKIE = "hetero_emu_page"
HOST_NAME = re.compile(r"algo-[0-9]{1,5}")
# How often the events stream looks for news, and how long it may stay silent before a comment
# keeps proxies and the browser from closing it.
POLL_SECONDS = 1.0
KEEPALIVE_SECONDS = 15.0
# EventSource reconnects this long after a broken stream (the `retry:` field, in ms).
RETRY_MS = 3000
# A fresh page shows at most this much of each host's log: the last lines, not a 1 GB history.
TAIL_BYTES = 256 * 1024
# What one look reads of one host's log at most (the rest comes at the next look, at once).
READ_BYTES = 1024 * 1024
# Of the part of a log a fresh page does not show, how much is read for the toolkit's lines.
SCAN_BYTES = 16 * 1024 * 1024
# How far `line_start` looks for the next line.
LINE_SEARCH_BYTES = 64 * 1024
# The log lines one event carries at most.
EVENT_LINES = 2000
FINAL_STATUSES = ("Completed", "Failed", "Stopped")
# The newest jobs the index lists (each is described: job.json read).
INDEX_JOBS = 200
# How a stop carries the stop token: a header from the page's script, a field of the plain form.
STOP_HEADER = "x-hetero-emu-stop-token"
STOP_FIELD = "stop_token"
STOP_FORM_BYTES = 4096
# How many drawn diagrams LiveJobs keeps (one per job the page showed, about 10 KB each).
SVG_CACHE = 256
# What `inert_svg` lets through of Graphviz's SVG: the elements and attributes it writes for shapes,
# text and tooltips, and the ids and classes it gives them itself.
SVG_NAMESPACE = "http://www.w3.org/2000/svg"
SVG_ELEMENTS = frozenset({"svg", "g", "title", "polygon", "polyline", "path", "ellipse", "text"})
SVG_ATTRIBUTES = frozenset({"width", "height", "viewBox", "id", "class", "transform", "fill", "stroke", "points",
                            "d", "cx", "cy", "rx", "ry", "x", "y", "text-anchor", "font-family", "font-size",
                            "font-weight", "font-style", "stroke-width", "stroke-dasharray", "fill-opacity",
                            "stroke-opacity"})
SVG_ID = re.compile(r"(graph|node|edge|clust)[0-9]{1,6}")
SVG_CLASSES = frozenset({"graph", "node", "edge", "cluster"})
CSP = ("default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")


class NoSuchJob(LookupError):
    """No job of that name on this machine."""


class StopRefused(Exception):
    """StopTrainingJob said no (the job has ended already): its message."""


@dataclass(frozen=True)
class HostState:
    """One host as it is now."""

    host: str
    group: str
    instance_type: str
    state: str  # pending (staged, no container yet) | created | running | exited | removed | unknown
    exit_code: int | None = None
    started: datetime | None = None
    finished: datetime | None = None
    group_index: int = 0  # the group's place in the spec: its colour (emulator.reports.palette)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["started"] = _iso(self.started)
        out["finished"] = _iso(self.finished)
        return out


class JobSource(Protocol):
    """What the page reads: the jobs, one job's description, hosts, logs, metrics and diagram, and
    the one thing it does (stop). Unknown names raise NoSuchJob."""

    def jobs(self) -> list[JobRecord]:
        """Every job, newest first."""
        ...

    def describe(self, name: str) -> dict[str, Any]:
        """DescribeTrainingJob's answer."""
        ...

    def hosts(self, name: str) -> list[HostState]:
        """Each host as it is now, in host order ([] before the job is staged)."""
        ...

    def log_size(self, name: str, host: str) -> int:
        """How many bytes the host's log has now."""
        ...

    def line_start(self, name: str, host: str, offset: int) -> int:
        """Where the first line that starts at or after byte `offset` of the host's log starts."""
        ...

    def log_lines(self, name: str, host: str, offset: int, *, final: bool = False,
                  end: int | None = None) -> tuple[list[str], int]:
        """The complete lines of the host's log from byte `offset` (up to byte `end`), as a terminal
        shows them, and the offset after them. `final`: the log is complete, so a last line without
        a newline counts too."""
        ...

    def metrics(self, name: str) -> list[metrics_module.Sample]:
        """The job's metric points so far."""
        ...

    def stop(self, name: str) -> None:
        """StopTrainingJob; StopRefused when the service refuses."""
        ...

    def diagram_svg(self, name: str) -> str | None:
        """The cluster diagram as SVG that holds only shapes and text (`inert_svg`); None without one
        (or without Graphviz)."""
        ...

    def diagram_dot(self, name: str) -> str | None:
        """The cluster diagram's DOT text, made by the emulator from the job's plan; None before the
        run has staged the hosts."""
        ...

    def tuning_jobs(self) -> list[dict[str, Any]]:
        """Every hyperparameter tuning job, newest first, each as DescribeHyperParameterTuningJob's answer."""
        ...

    def tuning_job(self, name: str) -> dict[str, Any]:
        """One tuning job as DescribeHyperParameterTuningJob answers it, its trials (each a
        ListTrainingJobsForHyperParameterTuningJob row, in the order they were created) under
        `TrainingJobSummaries`. An unknown name raises NoSuchJob."""
        ...


# --------------------------------------------------------------------------------------------------
# The real source


class LiveJobs:
    """The jobs of this machine, all read through the jobs layer (`emulator.jobs.service.TrainingJobs`):
    their records, their descriptions, their containers in the engine while they
    run, and their job folders (job.json, logs/algo-N.log, metrics/, cluster.dot)."""

    def __init__(self, training: TrainingJobs, tuning: TuningJobs | None = None) -> None:
        self.training = training
        self.tuning = tuning
        self._svg: dict[str, str | None] = {}  # the SHA-256 of a DOT text -> its SVG
        # job folder -> (its host folders, each host's group, type and group index), read once staged
        self._layouts: dict[Path, tuple[list[Path], dict[str, tuple[str, str, int]]]] = {}
        self._seen_running: dict[str, float] = {}  # container -> when a look first saw it running

    # -- jobs and their folders

    def jobs(self) -> list[JobRecord]:
        return self.training.records()

    def _record(self, name: str) -> JobRecord:
        record = self.training.record(name) if _job_name(name) else None
        if record is None:
            raise NoSuchJob(name)
        return record

    def describe(self, name: str) -> dict[str, Any]:
        record = self._record(name)
        try:
            doc: dict[str, Any] = self.training.description(self.training.found(record.job_name))
        except ApiError as err:
            raise NoSuchJob(name) from err
        return doc

    def tuning_jobs(self) -> list[dict[str, Any]]:
        if self.tuning is None:
            return []
        found = [d for n in self.tuning.names() if (d := self.tuning.record(n)) is not None]
        found.sort(key=lambda d: str(d.get("CreationTime", "")), reverse=True)
        return [tuning_description(d) for d in found]

    def tuning_job(self, name: str) -> dict[str, Any]:
        record = self.tuning.record(name) if self.tuning is not None else None
        if record is None:
            raise NoSuchJob(name)
        return with_trials(record)

    def stop(self, name: str) -> None:
        self._record(name)
        try:
            self.training.stop({"TrainingJobName": name})
        except ApiError as err:
            raise StopRefused(err.message) from err

    # -- hosts

    def hosts(self, name: str) -> list[HostState]:
        record = self._record(name)
        folder = record.job_dir
        layout = self._layout(folder)
        containers = self._containers(name)
        if record.status.is_final:
            return self._ended_hosts(folder, layout, bool(containers))
        if not containers:
            # Staged (or still staging): no container yet; or they are gone and job.json is coming.
            state = "unknown" if record.training_start_time else "pending"
            return [HostState(h, g, t, state, group_index=i) for h, (g, t, i) in _in_host_order(layout)]
        return self._running_hosts(layout, containers)

    def _containers(self, name: str) -> dict[str, tuple[str, Mapping[str, str]]]:
        """host -> (its container's name, its labels), as `emulator.api` finds a job's containers."""
        try:
            found = self.training.resources(name)
        except EmulatorError:
            return {}
        out = {}
        for resource in found:
            host = resource.labels.get(LABEL_HOST, "")
            # A throwaway copy `exec` made of a stopped host carries the job's labels too.
            if resource.kind == "container" and resource.name == container_name(name, host):
                out[host] = (resource.name, resource.labels)
        return out

    def _running_hosts(self, layout: Mapping[str, tuple[str, str, int]],
                       containers: Mapping[str, tuple[str, Mapping[str, str]]]) -> list[HostState]:
        names = [containers[h][0] for h in containers]
        try:
            states = {s.name: s for s in self.training.container_states(names)}
        except EmulatorError:
            states = {}
        out = []
        for host in sorted(set(layout) | set(containers), key=contract.host_sort_key):
            group, itype, index = layout.get(host, ("?", "?", 0))
            if host not in containers:
                out.append(HostState(host, group, itype, "pending", group_index=index))
                continue
            container, labels = containers[host]
            group, itype = labels.get(LABEL_GROUP, group), labels.get(LABEL_INSTANCE_TYPE, itype)
            state = states.get(container)
            if state is None:
                out.append(HostState(host, group, itype, "unknown", group_index=index))
                continue
            if state.error == "container disappeared":
                word = "removed"
            elif state.running:
                word = "running"
            else:
                word = _ended_word(state.exit_code, "exited")
            # The engine's list of running containers carries no start time (only an inspect does, which
            # it saves for the hosts that exited): until then, the first look that saw it running.
            started = state.started_at
            if started is None and state.running:
                started = self._seen_running.setdefault(container, time.time())
            out.append(HostState(host, group, itype, word, state.exit_code, _from_epoch(started),
                                 _from_epoch(state.finished_at), index))
        return out

    def _ended_hosts(self, folder: Path, layout: Mapping[str, tuple[str, str, int]], kept: bool) -> list[HostState]:
        """An ended job's hosts from its job.json (`Hosts`: each host's exit code and its seconds from
        TrainingStartTime to its exit, emulator/run/artifacts.py `describe`)."""
        doc = _read_json(folder / "job.json")
        state = "exited" if kept else "removed"
        start = _parse_time(doc.get("TrainingStartTime"))
        given = doc.get("Hosts")
        listed = given if isinstance(given, list) else []
        order = _group_order_of(doc) or sorted({g for g, _, _ in layout.values()})
        out = []
        for entry in listed:
            if not isinstance(entry, dict) or not HOST_NAME.fullmatch(str(entry.get("Host", ""))):
                continue
            host, group = str(entry["Host"]), str(entry.get("InstanceGroupName", "?"))
            seconds = entry.get("Seconds")
            finished = (datetime.fromtimestamp(start.timestamp() + float(seconds), timezone.utc)
                        if start is not None and isinstance(seconds, (int, float)) else None)
            code = entry.get("ExitCode")
            out.append(HostState(host, group, str(entry.get("InstanceType", "?")),
                                 _ended_word(code if isinstance(code, int) else None, state),
                                 code if isinstance(code, int) else None, start, finished,
                                 order.index(group) if group in order else layout.get(host, ("", "", 0))[2]))
        if out:
            return sorted(out, key=lambda h: contract.host_sort_key(h.host))
        return [HostState(h, g, t, state, group_index=i) for h, (g, t, i) in _in_host_order(layout)]

    def _layout(self, folder: Path) -> dict[str, tuple[str, str, int]]:
        """host -> (group, instance type, the group's place in the spec) from the staged hosts'
        resourceconfig.json (their `instance_groups` list the groups in spec order, contract.py)."""
        host_dirs = sorted(folder.glob("hosts/algo-*"))
        cached = self._layouts.get(folder)
        if cached is not None and cached[0] == host_dirs:
            return cached[1]
        out: dict[str, tuple[str, str, int]] = {}
        for host_dir in host_dirs:
            config = hostfiles.host_path(host_dir, "input/config/resourceconfig.json")
            data = _parse_json(hostfiles.read_text_bounded(config, 1 << 20) if config is not None else "")
            # The file is under the host's /opt/ml, which the script owns: trusted only in the spec's shapes.
            if data.get("current_host") != host_dir.name or not HOST_NAME.fullmatch(host_dir.name):
                continue
            group, itype = data.get("current_group_name"), data.get("current_instance_type")
            groups = [g.get("instance_group_name") for g in data.get("instance_groups") or [] if isinstance(g, dict)]
            if isinstance(group, str) and GROUP_NAME_PATTERN.fullmatch(group) and isinstance(itype, str):
                out[host_dir.name] = (group, itype, groups.index(group) if group in groups else 0)
        if out:  # read again until the staging has written it
            self._layouts[folder] = (host_dirs, out)
        return out

    # -- logs, metrics, diagram

    def _log(self, name: str, host: str) -> Path:
        if not HOST_NAME.fullmatch(host):
            raise NoSuchJob(f"{name}/{host}")
        return self._record(name).job_dir / "logs" / f"{host}.log"

    def log_size(self, name: str, host: str) -> int:
        try:
            return self._log(name, host).stat().st_size
        except OSError:
            return 0

    def line_start(self, name: str, host: str, offset: int) -> int:
        if offset <= 0:
            return 0
        try:
            with open(self._log(name, host), "rb") as log:
                log.seek(offset - 1)
                data = log.read(LINE_SEARCH_BYTES)
        except OSError:
            return offset
        found = data.find(b"\n")
        # A line longer than the search starts mid-way: shown from there.
        return offset if found < 0 else offset + found

    def log_lines(self, name: str, host: str, offset: int, *, final: bool = False,
                  end: int | None = None) -> tuple[list[str], int]:
        want = READ_BYTES if end is None else max(0, min(READ_BYTES, end - offset))
        try:
            with open(self._log(name, host), "rb") as log:
                log.seek(offset)
                data = log.read(want)
        except OSError:
            return [], offset
        return split_lines(data, offset, final=final and end is None, full=len(data) >= READ_BYTES)

    def metrics(self, name: str) -> list[metrics_module.Sample]:
        return metrics_module.read(self._record(name).job_dir)

    def diagram_dot(self, name: str) -> str | None:
        """The DOT text the run made from the job's plan and keeps in the job's record
        (`JobRecord.cluster_dot`), never the job folder's cluster.dot: for an s3:// output that
        folder lies under the S3 root, where any S3 client can put a cluster.dot or cluster.svg of
        its own (with a `javascript:` link, say)."""
        return self._record(name).cluster_dot

    def diagram_svg(self, name: str) -> str | None:
        """The recorded DOT drawn by Graphviz's `dot -Tsvg` (once per text), if only shapes and text."""
        dot = self.diagram_dot(name)
        if dot is None:
            return None
        key = hashlib.sha256(dot.encode("utf-8", "surrogatepass")).hexdigest()
        if key not in self._svg:
            if len(self._svg) >= SVG_CACHE:
                self._svg.clear()
            self._svg[key] = draw_svg(dot)
        return self._svg[key]


def draw_svg(dot: str, program: str = "dot") -> str | None:
    """The SVG Graphviz draws of DOT text, as `inert_svg` writes it again (to sit inside HTML); None
    when Graphviz is not installed or fails, or draws more than shapes and text."""
    found = shutil.which(program)
    if found is None:
        return None
    try:
        done = subprocess.run([found, "-Tsvg"], input=dot.encode("utf-8", "replace"), capture_output=True,
                              timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    text = done.stdout.decode("utf-8", errors="replace")
    start = text.find("<svg")
    return inert_svg(text[start:]) if start >= 0 else None


def inert_svg(text: str) -> str | None:
    """Graphviz's SVG written again from its parsed elements, if they are only what Graphviz draws for
    `emulator.reports.diagram` (groups, shapes, text, tooltips) with Graphviz's own ids and classes; None for
    anything else. The page embeds the SVG in its HTML, so nothing in it may act: a DOT `URL` or
    `href` becomes an `<a xlink:href>` (a `javascript:` link), an `id` or `class` could shadow the
    page's own, an image would be fetched. Written again, it has no comments, no prolog and every
    text escaped by the serializer (https://graphviz.org/docs/outputs/svg/)."""
    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError:
        return None
    for element in root.iter():
        namespace, _, tag = element.tag.rpartition("}")
        if namespace != "{" + SVG_NAMESPACE or tag not in SVG_ELEMENTS:
            return None
        for name, value in element.attrib.items():
            if name not in SVG_ATTRIBUTES or (name == "id" and not SVG_ID.fullmatch(value)) or \
                    (name == "class" and value not in SVG_CLASSES):
                return None
    ElementTree.register_namespace("", SVG_NAMESPACE)
    return ElementTree.tostring(root, encoding="unicode")


def split_lines(data: bytes, offset: int, *, final: bool = False, full: bool = False) -> tuple[list[str], int]:
    """The complete lines of `data` (read at `offset`) as a terminal shows them (`display_text`: a
    progress bar's last state, invalid UTF-8 replaced) and the offset after them. A line without its
    newline counts only when the log is `final`, or when `data` is `full` (a line longer than a whole
    read is shown in pieces rather than never)."""
    cut = data.rfind(b"\n")
    if cut >= 0:
        body = data[:cut + 1]
    elif data and (final or full):
        body = data
    else:
        return [], offset
    pieces = body.split(b"\n")
    if body.endswith(b"\n"):
        pieces.pop()
    return [display_text(piece) for piece in pieces], offset + len(body)


# --------------------------------------------------------------------------------------------------
# The events stream


@dataclass(frozen=True)
class Event:
    """One server-sent event."""

    kind: str
    data: Any
    id: str | None = None

    def encode(self) -> str:
        lines = [f"event: {self.kind}"]
        if self.id is not None:
            lines.append(f"id: {self.id}")
        # JSON has no raw newline, so the data is one `data:` line.
        lines.append("data: " + json.dumps(self.data, separators=(",", ":"), ensure_ascii=False))
        return "\n".join(lines) + "\n\n"


class JobStream:
    """What one browser has been sent of one job, and what to send next (`poll`).

    Host states, phases and the status are sent whole when they differ from what was sent; log lines
    and metric points are sent once, in order, each host's lines from where the last event ended. An
    event that moves the logs or metrics carries an `id` saying how far each host is: a browser that
    reconnects sends it back (Last-Event-ID) and gets only what it lacks. A fresh browser gets the
    last TAIL_BYTES of each log (the earlier bytes are read for the phases, not sent)."""

    def __init__(self, source: JobSource, name: str, resume: str | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.source = source
        self.name = name
        self.clock = clock
        self.read: dict[str, int] = {}  # host -> bytes of its log read so far
        self.send_from: dict[str, int] = {}  # host -> the first byte whose lines are sent
        self.trackers: dict[str, Tracker] = {}
        self.metric_counts: dict[str, int] = {}
        self.resumed = decode_resume(resume)
        self.resumed_hosts: set[str] = set()  # hosts whose offset came back with the browser
        self.told_skipped: set[str] = set()  # hosts whose first lines were sent
        self.sent: dict[str, Any] = {}  # kind -> the last data sent (status, hosts, phases)
        self.finished = False

    def poll(self) -> tuple[list[Event], bool]:
        """The events since the last poll, and whether there is more to read at once (a log still
        being caught up). Ends with an `end` event (and `finished`) once the job has ended and
        everything was sent."""
        if self.finished:
            return [], False
        events: list[Event] = []
        doc = self.source.describe(self.name)
        ended = doc.get("TrainingJobStatus") in FINAL_STATUSES
        hosts = self.source.hosts(self.name)
        self._changed(events, "status", status_of(doc))
        self._changed(events, "hosts", {"hosts": [h.to_json() for h in hosts]},
                      extra={"now": _iso(datetime.fromtimestamp(self.clock(), timezone.utc))})
        behind = False
        for host in hosts:
            lines, more = self._read_log(host.host, ended)
            behind = behind or more
            if lines is not None:
                events.append(Event("log", lines, self._resume_id()))
        self._changed(events, "phases", {"phases": self._phases(hosts, doc, ended)})
        points = self._new_points(hosts)
        if points:
            events.append(Event("metrics", {"points": points}, self._resume_id()))
        if ended and not behind:
            events.append(Event("end", {"status": doc.get("TrainingJobStatus")}))
            self.finished = True
        return events, behind

    def _changed(self, events: list[Event], kind: str, data: dict[str, Any],
                 extra: Mapping[str, Any] | None = None) -> None:
        if self.sent.get(kind) != data:
            self.sent[kind] = data
            events.append(Event(kind, {**data, **(extra or {})}))

    def _read_log(self, host: str, ended: bool) -> tuple[dict[str, Any] | None, bool]:
        """The host's new lines to send (None: none), and whether its log has more to read now.

        Every line read goes to the host's phase tracker; the lines from `send_from` on are also
        sent. A fresh stream starts sending at the first line within TAIL_BYTES of the end, and reads
        the lines before it only for the phases, and of those only the first SCAN_BYTES: the
        toolkit's lines are at the start and at the end of a log, the middle is the script's."""
        if host not in self.read:
            resumed = self.resumed["l"].get(host)
            size = self.source.log_size(self.name, host)
            if isinstance(resumed, int) and 0 <= resumed <= size:
                self.resumed_hosts.add(host)
                start = resumed
            else:
                start = self.source.line_start(self.name, host, size - TAIL_BYTES) if size > TAIL_BYTES else 0
            self.read[host], self.send_from[host] = 0, start
            self.trackers[host] = Tracker()
        send_from = self.send_from[host]
        lines: list[str] = []
        batch_from: int | None = None
        budget = 8 * READ_BYTES
        while budget > 0 and len(lines) < EVENT_LINES:
            at = self.read[host]
            scanning = at < send_from
            if scanning and at >= SCAN_BYTES:
                self.read[host] = send_from  # past the head: on to the tail
                continue
            got, after = self.source.log_lines(self.name, host, at, final=ended and not scanning,
                                               end=send_from if scanning else None)
            if after <= at:
                if not scanning:
                    break
                self.read[host] = send_from  # nothing whole before it (cannot happen at a line start)
                continue
            budget -= after - at
            self.read[host] = after
            for line in got:
                self.trackers[host].feed(line)
            if not scanning:
                batch_from = at if batch_from is None else batch_from
                lines.extend(got)
        more = budget <= 0 or len(lines) >= EVENT_LINES
        if not lines or batch_from is None:
            return None, more
        data: dict[str, Any] = {"host": host, "lines": lines, "from": batch_from, "next": self.read[host]}
        if host not in self.told_skipped:
            self.told_skipped.add(host)
            if send_from > 0 and host not in self.resumed_hosts:
                data["skipped"] = send_from  # bytes before these lines, not shown
        return data, more

    def _phases(self, hosts: Sequence[HostState], doc: Mapping[str, Any], ended: bool) -> dict[str, Any]:
        job_end = _parse_time(doc.get("TrainingEndTime")) if ended else None
        now = datetime.fromtimestamp(self.clock(), timezone.utc)
        out: dict[str, Any] = {}
        for host in hosts:
            tracker = self.trackers.get(host.host)
            if tracker is None:
                continue
            running = host.finished is None and not ended
            found = tracker.phases(started=host.started, exited=host.finished, job_end=job_end,
                                   now=now if running else None)
            out[host.host] = [[p.name, _iso(p.start), None if running and i == len(found) - 1 else _iso(p.end)]
                              for i, p in enumerate(found)]
        return out

    def _new_points(self, hosts: Sequence[HostState]) -> list[dict[str, Any]]:
        by_host: dict[str, list[metrics_module.Sample]] = {}
        for sample in self.source.metrics(self.name):
            by_host.setdefault(sample.host, []).append(sample)
        points = []
        for host, samples in by_host.items():
            if host not in self.metric_counts:
                resumed = self.resumed["m"].get(host)
                self.metric_counts[host] = resumed if isinstance(resumed, int) and resumed >= 0 else 0
            fresh = samples[self.metric_counts[host]:]
            self.metric_counts[host] = len(samples)
            points += [{"host": s.host, "name": s.name, "value": s.value, "at": s.at} for s in fresh]
        return sorted(points, key=lambda p: (p["at"], p["host"]))

    def _resume_id(self) -> str:
        sent = {h: max(self.read[h], self.send_from[h]) for h in self.read}
        return encode_resume({"l": sent, "m": dict(self.metric_counts)})


def encode_resume(state: Mapping[str, Any]) -> str:
    raw = json.dumps(state, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_resume(text: str | None) -> dict[str, dict[str, Any]]:
    """A Last-Event-ID back into {"l": host -> log offset, "m": host -> metric points}; anything
    unreadable is a fresh start."""
    empty: dict[str, dict[str, Any]] = {"l": {}, "m": {}}
    if not text or len(text) > 64 * 1024:
        return empty
    try:
        data = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (ValueError, binascii.Error):
        return empty
    if not isinstance(data, dict):
        return empty
    return {key: {h: v for h, v in (data.get(key) or {}).items() if isinstance(h, str) and isinstance(v, int)}
            if isinstance(data.get(key), dict) else {} for key in ("l", "m")}


def image_notes(doc: Mapping[str, Any]) -> list[str]:
    """What the description says stands in for the job's image, and on which Python (from the job's
    creation on: emulator/jobs/service.py), the lines `hetero-emu run` says once."""
    emulated = doc.get("Emulator")
    stand_in = emulated.get("StandIn") if isinstance(emulated, Mapping) else None
    notes = stand_in.get("Notes") if isinstance(stand_in, Mapping) else None
    return [str(note) for note in notes] if isinstance(notes, list) else []


def status_of(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The status line of a described job: status, secondary status and its message, times."""
    transitions = doc.get("SecondaryStatusTransitions")
    last = transitions[-1] if isinstance(transitions, list) and transitions and isinstance(transitions[-1], dict) \
        else {}
    return {"status": str(doc.get("TrainingJobStatus", "")), "secondary": str(doc.get("SecondaryStatus", "")),
            "message": str(last.get("StatusMessage", "")), "failure": str(doc.get("FailureReason") or ""),
            "created": _text(doc.get("CreationTime")), "start": _text(doc.get("TrainingStartTime")),
            "end": _text(doc.get("TrainingEndTime"))}


# --------------------------------------------------------------------------------------------------
# The routes

_templates = Environment(loader=FileSystemLoader(str(HERE / "templates")),
                         autoescape=select_autoescape(["html"], default=True), trim_blocks=True, lstrip_blocks=True)


def routes(source: JobSource, *, token: str | None = None, stop_token: str | None = None) -> list[BaseRoute]:
    """The page's routes over `source`; with `token`, each one but the static files asks for it.
    `stop_token`: what a stop must carry (default: a random one, new for each call)."""
    page = _Page(source, token, stop_token or secrets.token_urlsafe(24))
    return [
        Route("/", page.gated(page.index), methods=["GET", "HEAD"]),
        Route("/jobs/{name}", page.gated(page.job), methods=["GET", "HEAD"]),
        Route("/jobs/{name}/events", page.gated(page.events), methods=["GET"]),
        Route("/jobs/{name}/stop", page.gated(page.stop), methods=["POST"]),
        Route("/tuning/{name}", page.gated(page.tuning), methods=["GET", "HEAD"]),
        Mount(STATIC_PREFIX, app=StaticFiles(directory=str(HERE / "static")), name="static"),
    ]


Handler = Callable[[Request], Awaitable[Response]]


class _Page:
    def __init__(self, source: JobSource, token: str | None, stop_token: str) -> None:
        self.source = source
        self.token = token
        self.stop_token = stop_token
        self.cookie = _cookie_value(token) if token else None

    # -- the token

    def gated(self, handler: Handler) -> Handler:
        async def gate(request: Request) -> Response:
            if self.token is None or self.cookie is None:
                return await handler(request)
            given = request.query_params.get("token")
            if given is not None and hmac.compare_digest(given.encode(), self.token.encode()):
                if request.method == "GET":
                    # Once: the cookie from now on, and the token out of the address bar and history.
                    rest = urlencode([(k, v) for k, v in request.query_params.multi_items() if k != "token"])
                    response: Response = RedirectResponse(request.url.path + (f"?{rest}" if rest else ""),
                                                          status_code=303)
                else:
                    response = await handler(request)
                response.set_cookie(COOKIE, self.cookie, httponly=True, samesite="strict", path="/")
                return response
            held = request.cookies.get(COOKIE, "")
            if hmac.compare_digest(held.encode(), self.cookie.encode()):
                return await handler(request)
            return self.html("token.html", 401, path=request.url.path, wrong=given is not None)
        return gate

    # -- pages

    def html(self, template: str, code: int = 200, **values: Any) -> HTMLResponse:
        body = _templates.get_template(template).render(static=STATIC_PREFIX, **values)
        return HTMLResponse(body, code, headers=_headers())

    def not_found(self, name: str) -> HTMLResponse:
        return self.html("not_found.html", 404, name=name)

    async def index(self, request: Request) -> Response:
        records = await run_in_threadpool(self.source.jobs)
        rows = await run_in_threadpool(self._index_rows, records[:INDEX_JOBS])
        tunings = [tuning_row(d) for d in (await run_in_threadpool(self.source.tuning_jobs))[:INDEX_JOBS]]
        running = any(r["status"] not in FINAL_STATUSES for r in [*rows, *tunings])
        return self.html("index.html", rows=rows, running=running, more=max(0, len(records) - INDEX_JOBS),
                         tunings=tunings)

    async def tuning(self, request: Request) -> Response:
        """A tuning job's view: its status, counters and best trial, the objective per trial, and a row
        per trial linking to the trial's own page; refreshed every few seconds while it runs."""
        name = request.path_params["name"]
        if not _job_name(name):
            return self.not_found(name)
        try:
            doc = await run_in_threadpool(self.source.tuning_job, name)
        except NoSuchJob:
            return self.not_found(name)
        summaries = list(doc.get("TrainingJobSummaries") or [])
        objective = (doc.get("HyperParameterTuningJobConfig") or {}).get("HyperParameterTuningJobObjective") or {}
        best = (doc.get("BestTrainingJob") or {}).get("TrainingJobName")
        trials = [{"name": t.get("TrainingJobName", ""), "status": t.get("TrainingJobStatus", ""),
                   "objective": _objective_text(t), "best": t.get("TrainingJobName") == best,
                   "tuned": ", ".join(f"{k}={v}" for k, v in sorted((t.get("TunedHyperParameters") or {}).items())),
                   "reason": str(t.get("FailureReason") or "")[:300]} for t in summaries]
        return self.html("tuning.html", name=name, row=tuning_row(doc), trials=trials,
                         metric=str(objective.get("MetricName", "")), direction=str(objective.get("Type", "")),
                         counters=doc.get("TrainingJobStatusCounters") or {},
                         objectives=doc.get("ObjectiveStatusCounters") or {},
                         reason=str(doc.get("FailureReason") or ""),
                         # An <img> of a data: URI: an SVG shown as an image runs nothing and fetches
                         # nothing, whatever it holds (the CSP's img-src allows data:).
                         chart="data:image/svg+xml;base64," + base64.b64encode(
                             tuning_svg(doc, summaries).encode()).decode(),
                         ended=doc.get("HyperParameterTuningJobStatus") in FINAL_STATUSES)

    def _index_rows(self, records: Sequence[JobRecord]) -> list[dict[str, Any]]:
        rows = []
        now = datetime.now(timezone.utc)
        for record in records:
            try:
                doc = self.source.describe(record.job_name)
                groups = groups_of(doc)
                if not groups and not record.status.is_final:
                    groups = _groups_from_hosts(self.source.hosts(record.job_name))
            except NoSuchJob:
                continue
            colours = group_colours([g for g, _, _ in groups])
            status = str(doc.get("TrainingJobStatus", record.status))
            start, end = _parse_time(doc.get("TrainingStartTime")), _parse_time(doc.get("TrainingEndTime"))
            if start is not None and end is None and status not in FINAL_STATUSES:
                end = now
            rows.append({"name": record.job_name, "status": status,
                         "secondary": str(doc.get("SecondaryStatus", "")),
                         # The image build a starting job waits for: its step and minutes (build_status.py).
                         "building": build_status.building_message(record.doc) or "",
                         "groups": [{"name": g, "type": t, "count": c, "fill": colours[g].fill,
                                     "stroke": colours[g].stroke} for g, t, c in groups],
                         "hosts": sum(c for _, _, c in groups),
                         "created": _short_time(_parse_time(doc.get("CreationTime")) or _parse_time(record.modified)),
                         "duration": _duration(start, end) if start is not None and end is not None else ""})
        return rows

    async def job(self, request: Request) -> Response:
        name = request.path_params["name"]
        if not _job_name(name):
            return self.not_found(name)
        try:
            values = await run_in_threadpool(self._job_values, name)
        except NoSuchJob:
            return self.not_found(name)
        return self.html("job.html", **values)

    def _job_values(self, name: str) -> dict[str, Any]:
        doc = self.source.describe(name)
        hosts = self.source.hosts(name)
        order = [g for g, _, _ in groups_of(doc)] or [g for g, _, _ in _groups_from_hosts(hosts)]
        for host in hosts:
            if host.group not in order:
                order.append(host.group)
        colours = group_colours(order)
        svg = self.source.diagram_svg(name)
        dot = None if svg is not None else self.source.diagram_dot(name)
        status = status_of(doc)
        data = {"job": name, "events": f"/jobs/{name}/events", "stop": f"/jobs/{name}/stop",
                "stopToken": self.stop_token,
                "groups": {g: {"fill": c.fill, "stroke": c.stroke} for g, c in colours.items()},
                "hosts": [h.to_json() for h in hosts], "failure": FAILURE, "status": status}
        return {"name": name, "status": status, "hosts": hosts, "colours": colours, "svg": svg, "dot": dot,
                "data": data, "ended": status["status"] in FINAL_STATUSES, "phases": PHASES,
                "image_notes": image_notes(doc),
                # A tuning job's trial links to it: the name is its ARN's last part, checked as a name.
                "tuning": _tuning_of(doc)}

    async def events(self, request: Request) -> Response:
        name = request.path_params["name"]
        if not _job_name(name):
            return self.not_found(name)
        stream = JobStream(self.source, name, resume=request.headers.get("last-event-id"))
        try:
            # The first look before the answer: an unknown job is a 404, not an empty stream.
            first = await run_in_threadpool(stream.poll)
        except NoSuchJob:
            return self.not_found(name)
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no", "X-Content-Type-Options": "nosniff"}
        return StreamingResponse(_sse(stream, first), media_type="text/event-stream", headers=headers)

    async def stop(self, request: Request) -> Response:
        name = request.path_params["name"]
        if not _same_origin(request) or not await self._stop_token_given(request):
            return JSONResponse({"error": "a stop must come from this page"}, 403)
        if not _job_name(name):
            return self.not_found(name)
        wants_json = "application/json" in request.headers.get("accept", "")
        try:
            await run_in_threadpool(self.source.stop, name)
        except NoSuchJob:
            return self.not_found(name)
        except StopRefused as err:
            if wants_json:
                return JSONResponse({"error": str(err)}, 409)
            return self.html("stopped.html", 409, name=name, error=str(err))
        if wants_json:
            return JSONResponse({"stopping": name})
        return RedirectResponse(f"/jobs/{name}", status_code=303)


    async def _stop_token_given(self, request: Request) -> bool:
        """Whether a stop carries the server's stop token: in the STOP_HEADER the page's script sends, or
        (the page without script) the form's STOP_FIELD. Another site's page cannot read the token, so it
        cannot send it, Origin or not (an older browser or a privacy setting may leave Origin out)."""
        given = request.headers.get(STOP_HEADER)
        if given is None and request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
            body = b""
            async for chunk in request.stream():
                body += chunk
                if len(body) > STOP_FORM_BYTES:
                    return False
            given = next(iter(parse_qs(body.decode("latin-1")).get(STOP_FIELD, [])), None)
        return given is not None and hmac.compare_digest(given.encode(), self.stop_token.encode())


async def _sse(stream: JobStream, first: tuple[list[Event], bool]) -> AsyncIterator[str]:
    """The stream's events as server-sent events: `retry:` first, then the `first` look's events and
    each later look's, a comment when nothing was sent for KEEPALIVE_SECONDS, until the job has ended
    and everything was sent."""
    yield f"retry: {RETRY_MS}\n\n"
    loop = asyncio.get_running_loop()
    quiet_since = loop.time()
    events, behind = first
    while True:
        for event in events:
            yield event.encode()
        if stream.finished:
            return
        if events:
            quiet_since = loop.time()
        elif loop.time() - quiet_since >= KEEPALIVE_SECONDS:
            yield ": keep-alive\n\n"
            quiet_since = loop.time()
        if not behind:
            await asyncio.sleep(POLL_SECONDS)
        try:
            events, behind = await run_in_threadpool(stream.poll)
        except NoSuchJob:  # its record was removed while the page followed it
            yield Event("end", {"status": "gone"}).encode()
            return


# --------------------------------------------------------------------------------------------------
# Helpers


def groups_of(doc: Mapping[str, Any]) -> list[tuple[str, str, int]]:
    """(group, instance type, host count) in spec order from a description's ResourceConfig (the
    request's, or job.json's); a homogeneous job's one group is `homogeneousCluster`, as the toolkit
    names it (resourceconfig.json's current_group_name)."""
    config = doc.get("ResourceConfig")
    if not isinstance(config, dict):
        return []
    groups = config.get("InstanceGroups")
    if isinstance(groups, list) and groups:
        return [(str(g.get("InstanceGroupName", "?")), str(g.get("InstanceType", "?")), int(g.get("InstanceCount", 0)))
                for g in groups if isinstance(g, dict)]
    if config.get("InstanceType"):
        return [(HOMOGENEOUS_GROUP, str(config["InstanceType"]), int(config.get("InstanceCount", 1)))]
    return []


def _group_order_of(doc: Mapping[str, Any]) -> list[str]:
    return [g for g, _, _ in groups_of(doc)]


def _groups_from_hosts(hosts: Sequence[HostState]) -> list[tuple[str, str, int]]:
    found: dict[str, tuple[int, str, int]] = {}
    for h in hosts:
        index, itype, count = found.get(h.group, (h.group_index, h.instance_type, 0))
        found[h.group] = (index, itype, count + 1)
    return [(g, t, c) for g, (_, t, c) in sorted(found.items(), key=lambda item: item[1][0])]


def _in_host_order(layout: Mapping[str, tuple[str, str, int]]) -> list[tuple[str, tuple[str, str, int]]]:
    return sorted(layout.items(), key=lambda item: contract.host_sort_key(item[0]))


def _job_name(name: str) -> bool:
    return len(name) <= 63 and JOB_NAME_PATTERN.fullmatch(name) is not None


def _cookie_value(token: str) -> str:
    # The cookie holds a digest of the token, not the token itself.
    return hmac.new(token.encode(), b"hetero-emu page", hashlib.sha256).hexdigest()


def _same_origin(request: Request) -> bool:
    """Whether a POST comes from this site: a browser says where a request comes from (Sec-Fetch-Site,
    Origin), so a page elsewhere cannot stop a job through the user's browser."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return origin is None
    return origin.split("://", 1)[-1] == request.headers.get("host", "")


def _headers() -> dict[str, str]:
    return {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
            "Cache-Control": "no-store"}


def _read_json(path: Path) -> dict[str, Any]:
    return _parse_json(hostfiles.read_text_bounded(path, 16 << 20))


def _parse_json(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def _parse_time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    if not isinstance(value, str) or not value:
        return None
    try:
        stamp = datetime.fromisoformat(value)
    except ValueError:
        return None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)


def _from_epoch(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, timezone.utc)


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _text(value: Any) -> str:
    stamp = _parse_time(value)
    return stamp.isoformat() if stamp is not None else ""


def _short_time(value: datetime | None) -> str:
    return "" if value is None else value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _duration(start: datetime, end: datetime) -> str:
    seconds = max(0, int(round((end - start).total_seconds())))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours}h {minutes:02d}m {seconds:02d}s" if hours else f"{minutes}m {seconds:02d}s" if minutes \
        else f"{seconds}s"


def _ended_word(code: int | None, otherwise: str) -> str:
    """What a class reads in an ended host's state cell: how it ended, from its exit code."""
    if code is None:
        return otherwise
    return "completed" if code == 0 else "failed"


def tuning_row(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A tuning job's row on the index: name, status, strategy, trials so far and the best objective."""
    config = doc.get("HyperParameterTuningJobConfig") or {}
    counters = doc.get("TrainingJobStatusCounters") or {}
    limits = config.get("ResourceLimits") or {}
    best = doc.get("BestTrainingJob") or {}
    return {"name": str(doc.get("HyperParameterTuningJobName", "")),
            "status": str(doc.get("HyperParameterTuningJobStatus", "")),
            "strategy": str(config.get("Strategy", "")),
            "trials": sum(int(v) for v in counters.values() if isinstance(v, int)),
            "most": limits.get("MaxNumberOfTrainingJobs") or "",
            "best": _objective_text(best) if best else "",
            "best_job": str(best.get("TrainingJobName", "")),
            "created": _short_time(_parse_time(doc.get("CreationTime")))}


def _tuning_of(doc: Mapping[str, Any]) -> str | None:
    """The tuning job a trial's description names in TuningJobArn (its name, in lower case as ARNs are)."""
    arn = doc.get("TuningJobArn")
    name = arn.rpartition("/")[2] if isinstance(arn, str) else ""
    return name if _job_name(name) else None


def _objective_text(summary: Mapping[str, Any]) -> str:
    value = (summary.get("FinalHyperParameterTuningJobObjectiveMetric") or {}).get("Value")
    return f"{value:.6g}" if isinstance(value, (int, float)) else ""
