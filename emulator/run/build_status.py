"""An image build said while a job waits for it, as the service says what a starting job is doing.

On the service a job's first minutes are its Starting status, whose StatusMessage changes as the
instances are launched and prepared (DescribeTrainingJob's SecondaryStatusTransitions,
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_SecondaryStatusTransition.html), and the
SDK prints each new message while it waits: SDK v2's `logs_for_job` prints a line whenever the last
transition's StatusMessage changes (`sagemaker.utils.secondary_training_status_changed`). Here a job
whose image is missing first waits for its build, minutes for a framework image; that wait is said
in the same place: the Starting message reads `Building image hetero-emu/...: step 3/4, venv: ...
(2 min)` as the build advances, so `fit()`, boto3's DescribeTrainingJob through `hetero-emu serve`
and the live page show it without any channel of their own.

`publishing` wraps the runner's reporter for the builder: every step still reaches the console, and
the build's state (its step, the step's counter, the minutes so far) becomes one short line. That
line is handed on when it changes, at most once every MIN_INTERVAL seconds (the SDK polls every few
seconds; a message per pip line would flood it), and once more when the build ends. `to_record`
hands it to the job's record, for a job CreateTrainingJob recorded before the run.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from emulator.reports.console import Reporter
from emulator.reports.progress import LogFile, Task
from emulator.result import SecondaryStatus, Status
from emulator.state import job_records

#: The least time between two messages handed on while a build runs (its end is handed on at once).
MIN_INTERVAL = 10.0
#: How often the build's state is looked at for a message due.
TICK = 1.0
#: A message longer than this is cut (a step's title can name long paths).
MAX_MESSAGE = 240
#: The job record's field with the build's state, for `hetero-emu serve`'s page and SDK v3's console;
#: not a DescribeTrainingJob field.
RECORD_FIELD = "ImageBuild"

# A build step's title: `[framework-bullseye 3/4] venv: pip in a container of ...`, as
# emulator.backend.image_build._title writes it (tests/unit/test_build_status.py keeps them in step);
# a step with nothing to do is said as an info line starting with `✓ `.
_STEP_TITLE = re.compile(r"^(?:✓ )?\[(?P<recipe>[^\]\s]+) (?P<number>\d+)/(?P<total>\d+)\] (?P<text>.+)$")

Publish = Callable[[str, bool], None]


def parse_step(title: str) -> tuple[str, str] | None:
    """("3/4", "venv: pip ...") of a build step's title (or of its `✓` line), None for any other line."""
    match = _STEP_TITLE.match(title.strip())
    if match is None:
        return None
    return f"{match['number']}/{match['total']}", match["text"]


def elapsed_text(seconds: float) -> str:
    """How long so far, coarse enough to change once a minute: `40 s` in the first minute, then `2 min`."""
    return f"{int(seconds)} s" if seconds < 60 else f"{int(seconds // 60)} min"


class BuildStatus:
    """The state of one image build and the messages it gives (thread-safe: the builder advances it,
    a ticker thread polls it). `publish(message, building)` gets each message handed on; `clock` is
    time.monotonic unless a test gives its own."""

    def __init__(self, image: str, publish: Publish, *, interval: float = MIN_INTERVAL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.image = image
        self.publish = publish
        self.interval = interval
        self.clock = clock
        self.started = clock()
        self._lock = threading.Lock()
        self._step: tuple[str, str] | None = None
        self._task: Task | None = None
        self._sent: str | None = None
        self._sent_at: float | None = None

    def step(self, title: str, task: Task | None = None) -> None:
        """A step began (or, without `task`, was found done already); steps of other titles are no build's."""
        found = parse_step(title)
        if found is None:
            return
        with self._lock:
            self._step, self._task = found, task
        self.poll()

    def step_ended(self, task: Task) -> None:
        with self._lock:
            if self._task is task:
                self._task = None

    def message(self) -> str:
        """The message of the build's state now."""
        with self._lock:
            step, task = self._step, self._task
        text = f"Building image {self.image}"
        if step is not None:
            number, title = step
            counter = f" {task.done}/{task.total}" if task is not None and task.total else ""
            text += f": step {number}, {title}{counter}"
        return _cut(f"{text} ({elapsed_text(self.clock() - self.started)})")

    def poll(self) -> None:
        """Hand on the message if it changed and MIN_INTERVAL has passed since the last one."""
        message = self.message()
        now = self.clock()
        with self._lock:
            if message == self._sent or (self._sent_at is not None and now - self._sent_at < self.interval):
                return
            self._sent, self._sent_at = message, now
        self._hand_on(message, True)

    def finish(self, outcome: str) -> None:
        """The build ended ("built", "failed" or "stopped"): handed on at once, whatever the interval
        (`Image ... built in 6 min`; a failed job's FailureReason says why its build failed)."""
        took = elapsed_text(self.clock() - self.started)
        message = _cut(f"Image {self.image} built in {took}" if outcome == "built"
                       else f"Building image {self.image} {outcome} after {took}")
        with self._lock:
            self._sent, self._sent_at = message, self.clock()
        self._hand_on(message, False)

    def _hand_on(self, message: str, building: bool) -> None:
        # What hears of the build must never end it: a record that cannot be written is no failed build.
        with contextlib.suppress(OSError):
            self.publish(message, building)


class BuildReporter:
    """The runner's reporter as the builder sees it: everything goes to `inner`, and each build step
    also moves `status` on."""

    def __init__(self, inner: Reporter, status: BuildStatus) -> None:
        self.inner = inner
        self.status = status

    def set_hosts(self, hosts: Sequence[tuple[str, str]]) -> None:
        self.inner.set_hosts(hosts)

    def step(self, message: str) -> None:
        self.inner.step(message)

    @contextlib.contextmanager
    def task(self, title: str, total: int | None = None, log: LogFile | None = None) -> Iterator[Task]:
        with self.inner.task(title, total, log) as task:
            self.status.step(title, task)
            try:
                yield task
            finally:
                self.status.step_ended(task)

    def info(self, message: str) -> None:
        self.inner.info(message)
        if message.startswith("✓ "):  # a step with nothing to do (cached, up to date)
            self.status.step(message)

    def warn(self, message: str) -> None:
        self.inner.warn(message)

    def log_line(self, host: str, group: str, line: str) -> None:
        self.inner.log_line(host, group, line)

    def progress(self, host: str, group: str, text: str) -> None:
        self.inner.progress(host, group, text)


@contextlib.contextmanager
def publishing(inner: Reporter, image: str, publish: Publish | None, *, interval: float | None = None,
               tick: float | None = None) -> Iterator[Reporter]:
    """The reporter a builder of `image` reports to: `inner`, and, when `publish` is given, the build's
    state handed to it as it advances (`BuildStatus`), polled every `tick` seconds by a thread of its own
    so that a long step's minutes count on; the first message at once, the last when the build ends."""
    if publish is None:
        yield inner
        return
    status = BuildStatus(image, publish, interval=MIN_INTERVAL if interval is None else interval)
    status.poll()
    stop = threading.Event()

    def tick_on() -> None:
        while not stop.wait(TICK if tick is None else tick):
            status.poll()

    ticker = threading.Thread(target=tick_on, name=f"build status {image[:40]}", daemon=True)
    ticker.start()
    outcome = "failed"
    try:
        yield BuildReporter(inner, status)
        outcome = "built"
    except KeyboardInterrupt:  # StopTrainingJob's SIGTERM, Ctrl-C
        outcome = "stopped"
        raise
    finally:
        stop.set()
        ticker.join()
        status.finish(outcome)
    # The SDK prints a transition's StatusMessage only when it sees it change while the transition is
    # the last (sagemaker.utils.secondary_training_status_message, polled every 10 s by logs_for_job):
    # a job that moved on to Downloading at once hid "Image ... built in" from fit(). It stays one
    # interval, a few seconds beside the minutes of a build.
    time.sleep(status.interval)


def to_record(job_name: str) -> Publish:
    """A `publish` that writes each message into the job's record: the StatusMessage of its Starting
    transition (which DescribeTrainingJob answers and the SDK prints), and RECORD_FIELD. Only a job
    still InProgress and Starting is written: one stopped meanwhile keeps its Stopping."""

    def publish(message: str, building: bool) -> None:
        earlier = job_records.find(job_name)
        if earlier is None or earlier.status != Status.IN_PROGRESS:
            return
        transitions = earlier.transitions
        if not transitions or transitions[-1].get("Status") != SecondaryStatus.STARTING:
            return
        transitions[-1]["StatusMessage"] = message
        state: dict[str, Any] = {"Message": message, "Building": building}
        job_records.record(job_name, earlier.job_dir, Status.IN_PROGRESS, SecondaryStatusTransitions=transitions,
                           **{RECORD_FIELD: state})

    return publish


def building_message(doc: dict[str, Any]) -> str | None:
    """The message of the image build a job's record says is running, None when none is."""
    state = doc.get(RECORD_FIELD)
    if not isinstance(state, dict) or not state.get("Building") or doc.get("TrainingJobStatus") != Status.IN_PROGRESS:
        return None
    return build_message(doc)


def build_message(doc: dict[str, Any]) -> str | None:
    """The last message of the image build a job's record holds (its end once it ended), None without one."""
    state = doc.get(RECORD_FIELD)
    message = state.get("Message") if isinstance(state, dict) else None
    return message if isinstance(message, str) else None


def _cut(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE - 1] + "…"
