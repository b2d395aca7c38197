"""The engine contract: what a job does is the same on every engine. Each test runs one real, small
job (2-3 hosts, the default image) once on this machine's Docker engine and once on the swarm of
tests/swarm (hosts spread over three nodes, the job folder on the folder every node shares), and
asserts the same outcome on both: statuses, exit codes and reasons, what each host sees, logs to the
last byte, stopping, and that nothing of the job is left on any engine or node afterwards."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from engines import Engine

from emulator import api
from emulator.backend import Capabilities, contract_problems, registry
from emulator.errors import EnvironmentProblem
from emulator.jobspec import JobSpec, validate
from emulator.options import RunOptions
from emulator.planning.plan import LABEL_HOST, LABEL_JOB
from emulator.reports.console import RecordingReporter
from emulator.result import HostResult, JobResult
from emulator.training_images.image_recipes import LAUNCHERS_LABEL

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]

# Every script starts so: who am I (from the resource config, as the service writes it), and a
# function printing one tagged JSON line.
PRELUDE = '''\
import json, os, sys, time
from pathlib import Path

CONFIG = json.loads(Path("/opt/ml/input/config/resourceconfig.json").read_text())
HOST, GROUP = CONFIG["current_host"], CONFIG["current_group_name"]
report = lambda tag, payload: print(tag, json.dumps(payload, sort_keys=True), flush=True)
'''

# How long a driver whose process was killed may take until its watcher has removed everything.
REAP_BOUND = 30.0


def groups(*spec: tuple[str, int]) -> list[dict[str, Any]]:
    return [{"instance_group_name": n, "instance_type": "ml.c5.xlarge", "instance_count": c} for n, c in spec]


def job_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def raw_spec(engine: Engine, script: str, job: str, **fields: Any) -> dict[str, Any]:
    """A spec (as a mapping) running PRELUDE + `script` as each host's entry point, its code and job
    folder in the engine's folder."""
    code = engine.folder / "code"
    code.mkdir(exist_ok=True)
    (code / "job.py").write_text(PRELUDE + textwrap.dedent(script))
    return {"job_name": job, "source_dir": str(code), "container_entry_point": ["python3", "/opt/ml/code/job.py"],
            "output_path": str(engine.folder / "out"), **fields}


def make_spec(engine: Engine, script: str, job: str, **fields: Any) -> JobSpec:
    return validate(raw_spec(engine, script, job, **fields), base_dir=engine.folder)


def run(engine: Engine, spec: JobSpec, **options: Any) -> JobResult:
    return api.run(spec, RunOptions(**options), engine_name=engine.name, reporter=RecordingReporter())


def host(result: JobResult, name: str) -> HostResult:
    return next(h for h in result.hosts if h.host == name)


def log_of(result: JobResult, name: str) -> bytes:
    return (result.job_dir / "logs" / f"{name}.log").read_bytes()


def tagged(result: JobResult, name: str, tag: str) -> dict[str, Any]:
    """The payload of the host's one line tagged `tag`, read from its log file."""
    lines = [line for line in log_of(result, name).decode().splitlines() if line.startswith(tag + " ")]
    assert len(lines) == 1, (name, log_of(result, name)[-2000:])
    return json.loads(lines[0][len(tag) + 1:])  # type: ignore[no-any-return]


def job_doc(job_dir: Path) -> dict[str, Any]:
    return json.loads((job_dir / "job.json").read_text())  # type: ignore[no-any-return]


class Driver:
    """`python -m emulator run SPEC --engine E` in a subprocess (its own process, so a signal reaches
    the driver alone), with this process's environment (the swarm engine's variables included)."""

    def __init__(self, engine: Engine, raw: dict[str, Any]) -> None:
        self.job_dir = engine.folder / "out" / raw["job_name"]
        spec = engine.folder / "spec.yaml"
        spec.write_text(json.dumps(raw))  # JSON is YAML
        self.proc = subprocess.Popen([sys.executable, "-m", "emulator", "run", str(spec), "--engine", engine.name],
                                     cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     env={**os.environ, "NO_COLOR": "1"})

    def wait_until_hosts_say(self, text: bytes, hosts: list[str], timeout: float = 150) -> None:
        deadline = time.monotonic() + timeout
        logs = [self.job_dir / "logs" / f"{name}.log" for name in hosts]
        while not all(log.is_file() and text in log.read_bytes() for log in logs):
            assert self.proc.poll() is None, self.stderr()
            assert time.monotonic() < deadline, f"the hosts never said {text!r}"
            time.sleep(0.1)

    def stderr(self) -> str:
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode(errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


def sleeping_job_driver(engine: Engine, prefix: str) -> tuple[str, Driver]:
    """A driver of a job of two hosts that sleep for 600 s, returned once both are running."""
    job = job_name(prefix)
    driver = Driver(engine, raw_spec(engine, 'print("ready", flush=True)\ntime.sleep(600)\n', job,
                                     instance_groups=groups(("ga", 1), ("gb", 1))))
    try:
        driver.wait_until_hosts_say(b"ready\n", ["algo-1", "algo-2"])
    except BaseException:
        driver.kill()
        raise
    return job, driver


# --------------------------------------------------------------------------------------------------
# The contract's shape: every engine has every member (emulator.backend), and says what it may lack


def test_every_registered_engine_has_the_whole_contract_and_declares_its_capabilities() -> None:
    for name in registry.names():
        engine = registry.engine(name)  # made, not asked: no engine answers this test
        assert contract_problems(engine) == [], name
        assert isinstance(vars(type(engine)).get("capabilities"), Capabilities), f"{name}: declared by its class"


def test_the_images_of_every_engine_answer_for_this_machine_s_images(engine: Engine, training_image: str) -> None:
    """The image capability (emulator/backend/images.py) on a real engine: the swarm's images are this
    machine's, where it builds and copies an image from, as the Docker engine's are."""
    images = registry.engine(engine.name).images
    assert images.present(training_image)
    assert LAUNCHERS_LABEL in (images.labels(training_image) or {})
    assert images.image_id(training_image) == engine.host.images.get(training_image).id
    assert images.size(training_image) > 0
    assert not images.present("hetero-emu/no-such-image:0") and images.labels("hetero-emu/no-such-image:0") is None


# --------------------------------------------------------------------------------------------------
# GPUs and vCPUs (docs/gpus.md): neither engine here has a GPU


def test_a_gpu_type_sees_its_emulated_gpus_a_cpu_type_none_and_real_gpus_are_refused(engine: Engine) -> None:
    script = '''
        import shutil, subprocess
        smi = shutil.which("nvidia-smi")
        gpus = subprocess.run([smi, "--list-gpus"], capture_output=True, text=True).stdout.splitlines() if smi else None
        report("GPUS", {"gpus": gpus, "vars": os.environ.get("HETERO_EMU_CPU_COUNT")})
        '''
    kinds = [{"instance_group_name": "cpu", "instance_type": "ml.c5.xlarge", "instance_count": 1},
             {"instance_group_name": "gpu", "instance_type": "ml.g5.12xlarge", "instance_count": 1}]
    result = run(engine, make_spec(engine, script, job_name("ct-gpus"), instance_groups=kinds), gpus="emulate")
    assert result.status == "Completed", result.failure_reason
    assert tagged(result, "algo-1", "GPUS") == {"gpus": None, "vars": "4"}
    seen = tagged(result, "algo-2", "GPUS")
    assert seen["vars"] == "48" and [g.split(" (UUID")[0] for g in seen["gpus"]] == [
        f"GPU {i}: NVIDIA A10G" for i in range(4)]
    # Real GPUs: this engine has none to give, so the job is refused before anything is created.
    with pytest.raises(EnvironmentProblem) as refused:
        run(engine, make_spec(engine, script, job_name("ct-real-gpus"), instance_groups=kinds), gpus="real")
    assert refused.value.message.startswith("--gpus real: ")
    assert ("node-generic-resources" if engine.name == "swarm" else "nvidia-ctk") in (refused.value.hint or "")


# --------------------------------------------------------------------------------------------------
# Outcomes


def test_a_job_whose_hosts_all_exit_0_completes_and_each_host_is_itself(engine: Engine) -> None:
    data = engine.folder / "data"
    data.mkdir()
    (data / "part-0.csv").write_text("1,2\n3,4\n")
    spec = make_spec(
        engine,
        '''
        channels = sorted(p.name for p in Path("/opt/ml/input/data").iterdir())
        files = {c: sorted(p.name for p in Path("/opt/ml/input/data", c).iterdir()) for c in channels}
        report("ME", {"host": HOST, "group": GROUP, "files": files})
        ''',
        job_name("ct-complete"),
        instance_groups=groups(("data_group", 1), ("dnn_group", 2)),
        inputs={"train": {"s3_data": str(data), "instance_groups": ["data_group"]}},
    )
    result = run(engine, spec)

    assert result.status == "Completed", result.failure_reason
    assert [(h.host, h.group, h.exit_code, h.failure_reason) for h in result.hosts] == [
        ("algo-1", "data_group", 0, None), ("algo-2", "dnn_group", 0, None), ("algo-3", "dnn_group", 0, None)]
    expected = {"algo-1": ("data_group", {"train": ["part-0.csv"]}),
                "algo-2": ("dnn_group", {}), "algo-3": ("dnn_group", {})}
    for name, (group, files) in expected.items():
        config = json.loads((result.job_dir / "hosts" / name / "input" / "config" / "resourceconfig.json").read_text())
        assert (config["current_host"], config["current_group_name"]) == (name, group)
        assert tagged(result, name, "ME") == {"host": name, "group": group, "files": files}
    assert job_doc(result.job_dir)["TrainingJobStatus"] == "Completed"


def failing_spec(engine: Engine, job: str) -> JobSpec:
    """algo-2 and algo-3 (sleepers) say "sleeping", listen on a port and sleep 600 s; algo-1
    (group crashers) waits until it reaches both (so the crash never comes before their hosts
    start, which on a loaded swarm can be seconds apart), writes a failure file and exits 3."""
    return make_spec(
        engine,
        '''
        import socket
        if GROUP == "sleepers":
            print("sleeping", flush=True)
            server = socket.create_server(("", 7777))
            time.sleep(600)
        for peer in ("algo-2", "algo-3"):
            for _ in range(600):
                try:
                    socket.create_connection((peer, 7777), timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.2)
        Path("/opt/ml/output/failure").write_text("ValueError: loss is NaN at step 12")
        raise SystemExit(3)
        ''',
        job,
        instance_groups=groups(("crashers", 1), ("sleepers", 2)),
    )


def assert_the_crash_failed_the_job_and_stopped_the_sleepers(result: JobResult) -> None:
    assert result.status == "Failed"
    reason = result.failure_reason or ""
    assert reason == "AlgorithmError: ValueError: loss is NaN at step 12, exit code: 3", reason
    assert result.failed_host == "algo-1 (crashers)"
    assert "ValueError: loss is NaN at step 12" in reason, reason
    crasher = host(result, "algo-1")
    assert crasher.exit_code == 3
    for name in ("algo-2", "algo-3"):
        sleeper = host(result, name)
        # SIGTERM (exit 143) reached the sleeper soon after the crash: it was stopped, not left to
        # run its 600 s, nor killed after the grace.
        assert sleeper.exit_code == 143, sleeper
        assert sleeper.seconds - crasher.seconds < 15, (crasher, sleeper)
        assert sleeper.failure_reason == "stopped by the emulator (exit code 143)", sleeper
        assert b"sleeping\n" in log_of(result, name)
    doc = job_doc(result.job_dir)
    assert (doc["TrainingJobStatus"], doc["FailureReason"]) == ("Failed", reason)


def test_the_first_failing_host_fails_the_job_and_the_others_are_stopped(engine: Engine) -> None:
    assert_the_crash_failed_the_job_and_stopped_the_sleepers(run(engine, failing_spec(engine, job_name("ct-fail")),
                                                                 grace=5))


@pytest.mark.parametrize("engine", ["swarm"], indirect=True)
def test_a_swarm_reached_through_its_manager_alone_stops_the_others_with_their_exit_codes(
        engine: Engine, training_image: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a swarm of several machines usually offers: the manager, and no node's engine. The
    sleepers are stopped through the manager (their services updated to a placement no node meets),
    and still end with the exit code of the SIGTERM; the nodes then remove what is left by themselves."""
    assert engine.cluster is not None
    engine.cluster.load_image_everywhere(training_image)  # no node engine to copy it through
    monkeypatch.delenv("HETERO_EMU_SWARM_NODES")
    job = job_name("ct-fail-manager")
    assert_the_crash_failed_the_job_and_stopped_the_sleepers(run(engine, failing_spec(engine, job), grace=5))
    deadline = time.monotonic() + 30
    while left := engine.leftovers(job):
        assert time.monotonic() < deadline, left
        time.sleep(0.5)


def test_an_early_exit_0_stops_nobody(engine: Engine) -> None:
    spec = make_spec(
        engine,
        '''
        if HOST == "algo-2":
            time.sleep(4)
        report("DONE", {"host": HOST})
        ''',
        job_name("ct-early"),
        instance_groups=groups(("quick", 1), ("slow", 1)),
    )
    result = run(engine, spec)

    assert result.status == "Completed", result.failure_reason
    quick, slow = host(result, "algo-1"), host(result, "algo-2")
    assert (quick.exit_code, quick.failure_reason, slow.exit_code, slow.failure_reason) == (0, None, 0, None)
    assert slow.seconds >= 3.5 and slow.seconds > quick.seconds + 2, (quick, slow)
    assert tagged(result, "algo-2", "DONE") == {"host": "algo-2"}


def test_max_run_stops_the_job_and_every_host(engine: Engine) -> None:
    spec = make_spec(engine, 'print("started", flush=True)\ntime.sleep(600)\n', job_name("ct-maxrun"),
                     instance_groups=groups(("ga", 1), ("gb", 1)), max_run=3)
    result = run(engine, spec, grace=5)

    assert result.status == "Stopped"
    assert result.secondary_status == "MaxRuntimeExceeded"
    assert result.failure_reason is None
    for h in result.hosts:
        assert (h.exit_code, h.failure_reason) == (143, "stopped by the emulator (exit code 143)"), h
    doc = job_doc(result.job_dir)
    assert (doc["TrainingJobStatus"], doc["SecondaryStatus"]) == ("Stopped", "MaxRuntimeExceeded")


def test_sigterm_to_the_driver_stops_the_job_and_leaves_nothing(engine: Engine) -> None:
    job, driver = sleeping_job_driver(engine, "ct-sigterm")
    try:
        driver.proc.send_signal(signal.SIGTERM)
        code = driver.proc.wait(120)
        said = driver.stderr()
    finally:
        driver.kill()
    assert code == 130, said
    # What the driver said, should job.json be missing (it was, once in about six runs, unexplained).
    assert (driver.job_dir / "job.json").is_file(), said
    assert job_doc(driver.job_dir)["TrainingJobStatus"] == "Stopped"
    assert engine.leftovers(job) == []


# --------------------------------------------------------------------------------------------------
# What hosts get: each other, and every byte of their output


def test_hosts_reach_each_other_by_name_over_tcp(engine: Engine) -> None:
    spec = make_spec(
        engine,
        '''
        import socket
        if HOST == "algo-2":
            with socket.create_server(("", 7070)) as server:
                conn, _ = server.accept()
                with conn:
                    conn.sendall(b"hello from algo-2 to " + conn.recv(64))
            sys.exit(0)
        deadline = time.time() + 60
        while True:
            try:
                conn = socket.create_connection(("algo-2", 7070), timeout=5)
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.2)
        with conn:
            conn.sendall(HOST.encode())
            conn.shutdown(socket.SHUT_WR)
            answer = b""
            while chunk := conn.recv(64):
                answer += chunk
        report("GOT", {"answer": answer.decode()})
        ''',
        job_name("ct-tcp"),
        instance_groups=groups(("client", 1), ("server", 1)),
    )
    result = run(engine, spec)

    assert result.status == "Completed", result.failure_reason
    assert tagged(result, "algo-1", "GOT") == {"answer": "hello from algo-2 to algo-1"}


def test_hosts_reach_the_emulator_s_aws_by_aws_names_and_still_each_other(engine: Engine) -> None:
    # AWS inside the job (emulator/run/job_aws.py): on every engine, each host's boto3 (the default image
    # has the toolkit's) reaches S3 and STS by AWS's own names, through the job's gateway, with no
    # endpoint URL set; S3 is the job's S3 root. The job's own names still resolve.
    root = engine.folder / "s3"
    (root / "job-bucket").mkdir(parents=True)
    spec = make_spec(
        engine,
        """
        import socket, boto3
        s3 = boto3.client("s3")  # in the job's region: AWS_REGION, as the service sets it
        s3.put_object(Bucket="job-bucket", Key=f"from/{HOST}", Body=HOST.encode())
        for _ in range(300):  # a swarm's host has a name once its task runs
            try:
                peer = socket.gethostbyname("algo-2")
                break
            except OSError:
                time.sleep(0.2)
        report("AWS", {"account": boto3.client("sts").get_caller_identity()["Account"],
                       "endpoint": s3.meta.endpoint_url, "peer": bool(peer),
                       "env": sorted(k for k in os.environ if k.startswith("AWS_ENDPOINT"))})
        """,
        job_name("ct-aws"),
        instance_groups=groups(("ga", 1), ("gb", 1)),
        local_s3_root=str(root),
        region="us-west-2",
    )
    result = run(engine, spec)

    gateway_log = result.job_dir / "aws" / "gateway.log"
    assert result.status == "Completed", (result.failure_reason, gateway_log.is_file() and gateway_log.read_text())
    for name in ("algo-1", "algo-2"):
        said = tagged(result, name, "AWS")
        assert said["endpoint"] == "https://s3.us-west-2.amazonaws.com" and said["env"] == [], said
        assert said["account"].isdigit() and said["peer"], said
        assert (root / "job-bucket" / "from" / name).read_text() == name


def test_a_fast_writer_s_log_has_every_byte_and_its_unterminated_last_line(engine: Engine) -> None:
    spec = make_spec(
        engine,
        '''
        if HOST == "algo-2":
            sys.exit(0)
        out = sys.stdout.buffer
        for block in range(64):
            out.write(b"".join(b"%06d-%02d " % (i, block) + b"x" * 60 + b"\\n" for i in range(1000)))
        out.write(b"the last line has no newline")
        out.flush()
        ''',
        job_name("ct-logs"),
        instance_groups=groups(("writer", 1), ("quiet", 1)),
    )
    result = run(engine, spec)

    assert result.status == "Completed", result.failure_reason
    written = b"".join(b"".join(b"%06d-%02d " % (i, block) + b"x" * 60 + b"\n" for i in range(1000))
                       for block in range(64)) + b"the last line has no newline"
    log = log_of(result, "algo-1")
    assert (len(log), hashlib.sha256(log).hexdigest()) == (len(written), hashlib.sha256(written).hexdigest())
    assert log_of(result, "algo-2") == b""


# --------------------------------------------------------------------------------------------------
# What is left: nothing, unless kept


def test_nothing_of_a_finished_job_is_left_on_the_engine(engine: Engine) -> None:
    job = job_name("ct-clean")
    spec = make_spec(engine, 'print(HOST, flush=True)\n', job, instance_groups=groups(("ga", 1), ("gb", 2)))
    result = run(engine, spec)

    assert result.status == "Completed", result.failure_reason
    assert engine.leftovers(job) == []


def test_a_kept_job_is_found_by_its_labels_and_clean_removes_it(engine: Engine) -> None:
    job = job_name("ct-keep")
    spec = make_spec(engine, 'print(HOST, flush=True)\n', job, instance_groups=groups(("ga", 1), ("gb", 1)))
    try:
        result = run(engine, spec, keep=True)
        assert result.status == "Completed", result.failure_reason
        assert result.kept

        found = [r for r in api.ps(engine_name=engine.name) if r.job == job]
        containers = sorted((r.name, r.labels.get(LABEL_JOB), r.labels.get(LABEL_HOST))
                            for r in found if r.kind == "container")
        assert containers == [(f"{job}-algo-1", job, "algo-1"), (f"{job}-algo-2", job, "algo-2")]
        assert [r.kind for r in found if r.kind == "network"] == ["network"]

        removed, skipped = api.clean(job, engine_name=engine.name)
        assert sorted(r.name for r in removed) == sorted(r.name for r in found)
        assert skipped == []
        assert engine.leftovers(job) == []
    finally:
        api.clean(job, engine_name=engine.name)


# Serial on this machine's engine: for the seconds its watcher takes, the killed driver's job is a
# leftover to any test beside it (the no_leftovers check, a run's warning about earlier jobs).
@pytest.mark.parametrize("engine", [pytest.param("docker", marks=pytest.mark.serial), "swarm"], indirect=True)
def test_a_killed_driver_s_watcher_removes_everything(engine: Engine) -> None:
    job, driver = sleeping_job_driver(engine, "ct-reap")
    try:
        assert engine.leftovers(job) != []  # the job is there to be removed
        driver.proc.kill()
        driver.proc.wait(30)
        killed = time.monotonic()
        left = engine.leftovers(job)
        while left and time.monotonic() - killed < REAP_BOUND:
            time.sleep(0.5)
            left = engine.leftovers(job)
        assert left == [], f"left {REAP_BOUND:.0f} s after the driver was killed"
    finally:
        driver.kill()
        api.clean(job, engine_name=engine.name)
