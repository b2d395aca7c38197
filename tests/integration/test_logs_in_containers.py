"""No log byte lost, on the real engine: a host that writes 200 MB and exits at once, the same with a
failing host and with Ctrl-C; a final line without a newline on 3 hosts, run after run; a `\\r`
progress bar shown live on a terminal and as lines on a pipe.

The flood's bytes are made by one generator, here and in the container alike, so the log file is
compared with what the host wrote by length and hash (with the job's secret masked, as on disk).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pty
import select
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from emulator.jobspec import validate
from emulator.options import RunOptions
from emulator.reports.console import ConsoleReporter
from emulator.run.runner import run_job

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image", "no_leftovers")]

REPO = Path(__file__).resolve().parents[2]
SECRET = "flood-s3cr3t-987"
MB = 1_000_000

# The flood: numbered 100-byte lines, 1 MB per write; every 10,000th line carries the secret.
FLOOD = f'''
SECRET = {SECRET!r}


def flood_chunks(total):
    line = 0
    for _ in range(total // 1_000_000):
        parts = []
        for _ in range(10_000):
            text = b"%09d " % line + (SECRET.encode() if line % 10_000 == 7 else b"")
            parts.append(text.ljust(99, b".") + b"\\n")
            line += 1
        yield b"".join(parts)
'''
exec(FLOOD)  # defines flood_chunks here too


def expected(total: int, upto: int | None = None) -> tuple[int, str]:
    """(length, sha256) of the flood's first `upto` bytes with the secret masked, as the log holds them."""
    data = b"".join(flood_chunks(total))[:upto]  # type: ignore[name-defined]  # noqa: F821
    masked = data.replace(SECRET.encode(), b"***")
    return len(masked), hashlib.sha256(masked).hexdigest()


def digest(path: Path) -> tuple[int, str]:
    data = path.read_bytes()
    return len(data), hashlib.sha256(data).hexdigest()


HOST_SCRIPT = FLOOD + '''
import json, os, signal, sys, time
from pathlib import Path

HOST = json.loads(Path("/opt/ml/input/config/resourceconfig.json").read_text())["current_host"]
# Hyperparameter values are JSON-encoded in the file, as the SDK writes them.
ROLE = json.loads(json.loads(Path("/opt/ml/input/config/hyperparameters.json").read_text())[HOST])
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
written = 0
if ROLE.startswith("flood"):
    for chunk in flood_chunks(int(ROLE.split(":")[1])):
        view = memoryview(chunk)
        while view:
            n = os.write(1, view)
            written += n
            view = view[n:]
        if stop:
            break
    Path("/opt/ml/output/data/written").write_text(str(written))
    if stop:
        sys.exit(0)
    if ROLE.endswith(":fail"):
        sys.exit(3)  # at once, right after its last byte
elif ROLE == "wait":
    while not stop:
        time.sleep(0.05)
'''


def flood_job(tmp_path: Path, roles: dict[str, str]) -> dict[str, Any]:
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "flood.py").write_text(HOST_SCRIPT)
    return {
        "job_name": f"flood-{uuid.uuid4().hex[:8]}",
        "source_dir": "code",
        "container_entry_point": ["python3", "/opt/ml/code/flood.py"],
        "hyperparameters": roles,
        "environment": {"FLOOD_API_KEY": SECRET},
        "instance_groups": [{"instance_group_name": "g", "instance_type": "ml.c5.xlarge",
                             "instance_count": len(roles)}],
        "output_path": str(tmp_path / "out"),
    }


def quiet_run(tmp_path: Path, raw: dict[str, Any]) -> Any:
    # The console is not under test here: a quiet reporter keeps 2 million lines out of memory.
    reporter = ConsoleReporter(out=io.StringIO(), err=io.StringIO(), quiet=True)
    return run_job(validate(raw, base_dir=tmp_path), RunOptions(grace=5), reporter=reporter)


def test_a_host_writing_200_mb_and_exiting_at_once_loses_no_byte(tmp_path: Path) -> None:
    result = quiet_run(tmp_path, flood_job(tmp_path, {"algo-1": f"flood:{200 * MB}", "algo-2": f"flood:{MB}"}))
    assert result.status == "Completed"
    # 200 MB is far past this engine's own log rotation (json-file, 3 x 10 MB): nothing is dropped.
    assert digest(result.job_dir / "logs" / "algo-1.log") == expected(200 * MB)
    assert digest(result.job_dir / "logs" / "algo-2.log") == expected(MB)


def test_a_failing_host_writing_200_mb_loses_no_byte(tmp_path: Path) -> None:
    result = quiet_run(tmp_path, flood_job(tmp_path, {"algo-1": "wait", "algo-2": f"flood:{200 * MB}:fail"}))
    assert result.status == "Failed"
    assert result.failed_host == "algo-2 (g)" and (result.failure_reason or "").startswith("AlgorithmError: ")
    assert digest(result.job_dir / "logs" / "algo-2.log") == expected(200 * MB)
    # The FailureReason quotes the last lines, masked like the file.
    assert SECRET not in json.dumps(json.loads((result.job_dir / "job.json").read_text()))


def test_ctrl_c_while_a_host_floods_keeps_every_byte_it_wrote(tmp_path: Path) -> None:
    raw = flood_job(tmp_path, {"algo-1": f"flood:{400 * MB}", "algo-2": "wait"})
    spec = tmp_path / "spec.json"  # JSON is YAML
    spec.write_text(json.dumps(raw))
    proc = subprocess.Popen([sys.executable, "-m", "emulator.cli", "run", str(spec), "--quiet"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "NO_COLOR": "1"})
    log = tmp_path / "out" / raw["job_name"] / "logs" / "algo-1.log"
    deadline = time.monotonic() + 120
    while not (log.is_file() and log.stat().st_size > 20 * MB) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)  # mid-flood
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted: stopping algo-1 (g), algo-2 (g)" in err
    job_dir = tmp_path / "out" / raw["job_name"]
    written = int((job_dir / "hosts" / "algo-1" / "output" / "data" / "written").read_text())
    assert 20 * MB < written < 400 * MB  # stopped while writing
    assert digest(log) == expected(400 * MB, upto=written)


def test_a_final_line_without_a_newline_reaches_every_log_every_time(tmp_path: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    # Through the toolkit's `train`, as the issue saw it: the last bytes arrive after train's own lines.
    (code / "train.py").write_text('import sys\nprint("working")\nsys.stdout.write("done")\n')
    for attempt in range(3):
        result = quiet_run(tmp_path, {
            "job_name": f"nonl-{attempt}-{uuid.uuid4().hex[:6]}", "entry_point": "train.py", "source_dir": "code",
            "instance_groups": [{"instance_group_name": "a", "instance_type": "ml.c5.xlarge", "instance_count": 2},
                                {"instance_group_name": "b", "instance_type": "ml.c5.xlarge", "instance_count": 1}],
            "output_path": str(tmp_path / "out")})
        assert result.status == "Completed"
        for host in ("algo-1", "algo-2", "algo-3"):
            data = (result.job_dir / "logs" / f"{host}.log").read_bytes()
            assert b"working\n" in data
            assert data.endswith(b"done"), (attempt, host, data[-200:])


BAR = '''
import sys, time
print("before the bar", flush=True)
for i in range(0, 101, 10):
    sys.stderr.write("\\rtraining: %3d%%|%s| %d/10" % (i, "#" * (i // 10), i // 10))
    sys.stderr.flush()
    time.sleep(0.25)
sys.stderr.write("\\n")
print("after the bar", flush=True)
'''


def bar_spec(tmp_path: Path) -> Path:
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "bar.py").write_text(textwrap.dedent(BAR))
    spec = tmp_path / "spec.yaml"
    spec.write_text(json.dumps({
        "job_name": f"bar-{uuid.uuid4().hex[:8]}", "source_dir": "code",
        "container_entry_point": ["python3", "/opt/ml/code/bar.py"],
        "instance_type": "ml.c5.xlarge", "output_path": str(tmp_path / "out")}))
    return spec


def test_a_progress_bar_is_redrawn_in_place_on_a_terminal(tmp_path: Path) -> None:
    spec = bar_spec(tmp_path)
    primary, secondary = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "emulator.cli", "run", str(spec)], cwd=REPO,
                            stdout=secondary, stderr=subprocess.PIPE, env={**os.environ, "NO_COLOR": "1"})
    os.close(secondary)
    screen = b""
    first_update_at = None
    while True:
        ready, _, _ = select.select([primary], [], [], 60)
        if not ready:
            break
        try:
            data = os.read(primary, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        screen += data
        if first_update_at is None and b"training:" in screen:
            first_update_at = time.monotonic()
    proc.wait(timeout=60)
    os.close(primary)
    assert proc.returncode == 0
    text = screen.decode()
    prefix = "algo-1 (homogeneousCluster) |"
    # Live: states of the bar are redrawn over one another below the log lines (cursor up to the
    # bar, erase to the end of the screen), each with the prefix; the finished bar stays as the host's line.
    redraws = [part for part in text.split("\x1b[1F\x1b[J") if part.startswith(f"{prefix} training:")]
    assert len(redraws) >= 3, text
    assert f"{prefix} training: 100%|##########| 10/10\r\n" in text  # the pty turns \n into \r\n
    assert f"{prefix} before the bar" in text and f"{prefix} after the bar" in text
    assert "training:   0%" not in text.split(f"{prefix} after the bar")[1]
    log = next((tmp_path / "out").glob("bar-*/logs/algo-1.log")).read_bytes()
    assert log.count(b"\rtraining:") == 11  # the file keeps the bytes


def test_a_progress_bar_on_a_pipe_is_a_few_lines_not_one_glued_line(tmp_path: Path) -> None:
    spec = bar_spec(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "emulator.cli", "run", str(spec)], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "NO_COLOR": "1"})
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if "training:" in line]
    assert lines[-1] == "algo-1 (homogeneousCluster) | training: 100%|##########| 10/10"
    assert 2 <= len(lines) < 11  # throttled states, each a line of its own
    assert all(line.count("training:") == 1 and "\r" not in line for line in lines)


def test_max_run_ending_a_flooding_job_keeps_every_byte(tmp_path: Path) -> None:
    raw = flood_job(tmp_path, {"algo-1": f"flood:{100 * MB}", "algo-2": "wait"})
    raw["max_run"] = 8  # algo-2 waits forever: max_run ends the job after algo-1's flood
    result = quiet_run(tmp_path, raw)
    assert result.status == "Stopped" and result.secondary_status == "MaxRuntimeExceeded"
    # What algo-1 wrote (all of it, unless a very slow machine made max_run cut its flood short).
    written = int((result.job_dir / "hosts" / "algo-1" / "output" / "data" / "written").read_text())
    assert written > 0
    assert digest(result.job_dir / "logs" / "algo-1.log") == expected(100 * MB, upto=written)



def test_a_flooding_hosts_last_line_reaches_the_console(tmp_path: Path) -> None:
    """The audit's finding: under a flood the console also dropped each host's last lines (a final
    "done" was missing). Two hosts write 20 MB each, far faster than this slow console shows lines,
    then one last line: the console says how many lines it did not show and still shows that line."""
    from emulator.reports.console import RecordingReporter

    class SlowConsole(RecordingReporter):
        def log_line(self, host: str, group: str, line: str) -> None:
            time.sleep(0.0002)
            super().log_line(host, group, line)

    code = tmp_path / "code"
    code.mkdir()
    (code / "flood.py").write_text(textwrap.dedent('''
        import json, os
        host = json.load(open("/opt/ml/input/config/resourceconfig.json"))["current_host"]
        block = (b"y" * 99 + b"\\n") * 10_000
        for _ in range(20):
            os.write(1, block)
        print(f"{host} training done", flush=True)
    '''))
    raw = {"job_name": f"flood-end-{uuid.uuid4().hex[:8]}", "source_dir": "code",
           "container_entry_point": ["python3", "/opt/ml/code/flood.py"],
           "instance_groups": [{"instance_group_name": "g", "instance_type": "ml.c5.xlarge", "instance_count": 2}],
           "output_path": str(tmp_path / "out")}
    reporter = SlowConsole()
    result = run_job(validate(raw, base_dir=tmp_path), RunOptions(grace=5), reporter=reporter)
    assert result.status == "Completed"
    assert any("not shown (the console fell behind)" in w for w in reporter.warnings)
    for host in ("algo-1", "algo-2"):
        log = (result.job_dir / "logs" / f"{host}.log").read_bytes()
        assert log.endswith(f"{host} training done\n".encode()), log[-300:]
        shown = [line for name, _, line in reporter.lines if name == host]
        assert shown[-1] == f"{host} training done", (shown[-3:], reporter.warnings)
        assert len(shown) < 200_001  # the flood was summarised, not shown line by line
