"""Secrets in `environment`: which names are secrets, masking by name and by value, and that host logs
(file, console, tail) and job.json never show a secret's value. No Docker: the runner runs on the
FakeBackend."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fake_backend import FakeBackend, exits, runs_until_stopped

from emulator.jobspec import JobSpec, validate
from emulator.options import RunOptions
from emulator.planning.plan import Plan, make_plan
from emulator.planning.secrets import MASK, MIN_SECRET_LENGTH, Masker, is_secret, mask_environment, masked_names
from emulator.reports.console import RecordingReporter
from emulator.run import runner
from emulator.run.logs import LogCollector
from emulator.run.runner import run_job

SECRET = "s3cr3t-value-123"


@pytest.mark.parametrize("name", [
    "MY_API_KEY", "api_key", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "DB_PASSWORD", "Password",
    "KEY", "SECRETS_DIR", "HF_TOKEN_PATH", "MONKEY", "KEYBOARD_LAYOUT",  # substrings, on purpose
])
def test_secret_names(name: str) -> None:
    assert is_secret(name)


@pytest.mark.parametrize("name", ["MY_VAR", "AWS_REGION", "TRAINING_JOB_NAME", "PASSWD", "TOKE", "K_E_Y", ""])
def test_other_names(name: str) -> None:
    assert not is_secret(name)


def test_mask_environment_by_name_and_by_value() -> None:
    env = {
        "MY_API_KEY": SECRET,
        "DB_PASSWORD": "hunter22",
        "DB_URL": "postgres://me:hunter22@db:5432/x",
        "SHORT_TOKEN": "ab",  # too short to search for, still masked where listed by name
        "EMPTY_SECRET": "",
        "MY_VAR": "plain",
    }
    assert mask_environment(env) == {
        "MY_API_KEY": MASK,
        "DB_PASSWORD": MASK,
        "DB_URL": f"postgres://me:{MASK}@db:5432/x",
        "SHORT_TOKEN": MASK,
        "EMPTY_SECRET": MASK,
        "MY_VAR": "plain",
    }
    assert env["MY_API_KEY"] == SECRET  # a copy: the caller's mapping is untouched
    assert masked_names(env) == ["MY_API_KEY", "DB_PASSWORD", "DB_URL", "SHORT_TOKEN", "EMPTY_SECRET"]


def test_masker_replaces_every_occurrence_of_secret_values_only() -> None:
    masker = Masker({"MY_API_KEY": SECRET, "MY_VAR": "plain-but-long"})
    assert masker
    assert masker.mask(f"key={SECRET} again {SECRET}!") == f"key={MASK} again {MASK}!"
    assert masker.mask("plain-but-long is not a secret") == "plain-but-long is not a secret"
    assert masker.mask("S3CR3T-VALUE-123") == "S3CR3T-VALUE-123"  # values are compared exactly


def test_values_shorter_than_the_minimum_are_not_searched_for() -> None:
    short = "x" * (MIN_SECRET_LENGTH - 1)
    exact = "y" * MIN_SECRET_LENGTH
    masker = Masker({"A_KEY": "1", "B_TOKEN": short, "C_SECRET": exact, "D_PASSWORD": ""})
    assert masker.values == (exact,)
    assert masker.mask(f"epoch 1 loss 0.1 {short} {exact}") == f"epoch 1 loss 0.1 {short} {MASK}"
    assert not Masker({"A_KEY": "1", "MY_VAR": "whatever"})


def test_nothing_to_mask_is_a_no_op() -> None:
    masker = Masker({})
    assert not masker
    assert masker.mask("a") == "a"
    assert masker.mask_bytes(b"\xff") == b"\xff"
    assert masker.mask_truncated("abc") == "abc"


def test_longer_secret_wins_over_one_it_contains() -> None:
    masker = Masker({"OUTER_KEY": "abcd-efgh-ijkl", "INNER_KEY": "efgh"})
    assert masker.mask("x abcd-efgh-ijkl y efgh z") == f"x {MASK} y {MASK} z"


def test_multi_line_value_is_masked_whole_and_line_by_line() -> None:
    pem = "-----BEGIN KEY-----\nMIIBOgIBAAJBAKj34\n-----END KEY-----"
    masker = Masker({"PRIVATE_KEY": pem})
    assert masker.mask(f"got {pem} ok") == f"got {MASK} ok"
    assert masker.mask("MIIBOgIBAAJBAKj34") == MASK
    # the JSON-escaped form, as a script logging json.dumps(...) prints it
    assert masker.mask(json.dumps({"k": pem})) == '{"k": "' + MASK + '"}'


def test_json_escaped_value_is_masked() -> None:
    value = 'pa"ss\\wörd'
    masker = Masker({"DB_PASSWORD": value})
    assert masker.mask(json.dumps({"p": value})) == '{"p": "' + MASK + '"}'
    assert masker.mask(json.dumps({"p": value}, ensure_ascii=False)) == '{"p": "' + MASK + '"}'


def test_mask_bytes_keeps_other_bytes_as_they_are() -> None:
    masker = Masker({"TOKEN": "tök-3n-value"})
    raw = b"\xff\xfe bad " + "tök-3n-value".encode() + b"\r\n\x00"
    assert masker.mask_bytes(raw) == b"\xff\xfe bad " + MASK.encode() + b"\r\n\x00"


def test_mask_truncated_masks_a_secret_cut_off_at_the_end() -> None:
    masker = Masker({"MY_API_KEY": SECRET})
    assert masker.mask_truncated(f"failed: {SECRET[:7]}") == f"failed: {MASK}"
    assert masker.mask_truncated(f"failed: {SECRET} and {SECRET[:9]}") == f"failed: {MASK} and {MASK}"
    # fewer than MIN_SECRET_LENGTH characters of it are left as they are
    assert masker.mask_truncated(f"failed: {SECRET[:MIN_SECRET_LENGTH - 1]}") == f"failed: {SECRET[:3]}"
    assert masker.mask_truncated("failed: nothing secret") == "failed: nothing secret"


# --------------------------------------------------------------------------------------------------
# Logs


def one_host_plan(tmp_path: Path, environment: dict[str, str]) -> Plan:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "t.py").write_text("")
    spec = validate({"job_name": "j", "entry_point": "t.py", "source_dir": "code", "instance_type": "ml.c5.xlarge",
                     "instance_count": 1, "environment": environment}, base_dir=tmp_path)
    plan = make_plan(spec, "j")
    (Path(plan.job_dir) / "logs").mkdir(parents=True)
    return plan


def test_log_collector_masks_file_console_and_tail_even_when_a_chunk_splits_the_secret(tmp_path: Path) -> None:
    plan = one_host_plan(tmp_path, {"MY_API_KEY": SECRET, "MY_VAR": "visible"})
    reporter = RecordingReporter()
    logs = LogCollector(plan, reporter)
    chunks = [b"key is s3cr3t-", b"value-123 ok\r\nbad \xff ", b"s3cr3t-value-123\nvisible\nlast ", b"s3cr3t",
              b"-value-123"]
    for chunk in chunks:
        logs("j-algo-1", chunk)
    logs.close()

    assert (Path(plan.job_dir) / "logs" / "algo-1.log").read_bytes() == (
        b"key is *** ok\r\nbad \xff ***\nvisible\nlast ***"
    )
    assert [line for _, _, line in reporter.lines] == [
        f"key is {MASK} ok", f"bad \ufffd {MASK}", "visible", f"last {MASK}",
    ]
    assert logs.tail("algo-1") == [line for _, _, line in reporter.lines]


def test_log_collector_without_secrets_keeps_the_bytes(tmp_path: Path) -> None:
    plan = one_host_plan(tmp_path, {"MY_VAR": "x"})
    reporter = RecordingReporter()
    logs = LogCollector(plan, reporter)
    chunks = [b"a\r", b"\nb \xff\xfe", b"\n\nno newline"]
    for chunk in chunks:
        logs("j-algo-1", chunk)
    logs.close()
    assert (Path(plan.job_dir) / "logs" / "algo-1.log").read_bytes() == b"".join(chunks)
    assert [line for _, _, line in reporter.lines] == ["a", "b \ufffd\ufffd", "", "no newline"]


def test_a_line_reaches_the_file_when_it_ends(tmp_path: Path) -> None:
    plan = one_host_plan(tmp_path, {"MY_API_KEY": SECRET})
    logs = LogCollector(plan, RecordingReporter())
    path = Path(plan.job_dir) / "logs" / "algo-1.log"
    logs("j-algo-1", b"done\npartial s3cr3t-va")
    assert path.read_bytes() == b"done\n"  # the rest may be the start of a secret: held back
    logs("j-algo-1", b"lue-123\n")
    assert path.read_bytes() == b"done\npartial ***\n"
    logs.close()


# --------------------------------------------------------------------------------------------------
# job.json and the FailureReason (the runner on the FakeBackend)


@pytest.fixture(autouse=True)
def fast_polling(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "POLL_SECONDS", 0.01)


@pytest.fixture
def spec_with(tmp_path: Path) -> Callable[..., JobSpec]:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("")

    def make(environment: dict[str, str], output_path: str = "out") -> JobSpec:
        return validate({
            "job_name": "secret-job", "entry_point": "train.py", "source_dir": "code", "output_path": output_path,
            "instance_groups": [
                {"instance_group_name": "data_group", "instance_type": "ml.c5.xlarge", "instance_count": 1},
                {"instance_group_name": "dnn_group", "instance_type": "ml.p3.2xlarge", "instance_count": 1},
            ],
            "environment": environment,
        }, base_dir=tmp_path)

    return make


def job_json_text(job_dir: Path) -> tuple[str, dict[str, Any]]:
    text = (job_dir / "job.json").read_text()
    return text, json.loads(text)


def test_job_json_masks_environment_and_failure_file(spec_with: Callable[..., JobSpec]) -> None:
    spec = spec_with({"MY_API_KEY": SECRET, "DB_URL": f"https://u:{SECRET}@h", "MY_VAR": "plain"})
    fake = FakeBackend({
        "algo-1": runs_until_stopped(logs=[f"using {SECRET}\n"]),
        "algo-2": exits(1, 0.05, files={"output/failure": f"bad key {SECRET}\n"}, logs=[f"key={SECRET}\n"]),
    })
    reporter = RecordingReporter()
    result = run_job(spec, RunOptions(grace=1), backend=fake, reporter=reporter)

    assert result.status == "Failed"
    text, doc = job_json_text(result.job_dir)
    assert SECRET not in text
    assert doc["Environment"] == {"MY_API_KEY": MASK, "DB_URL": f"https://u:{MASK}@h", "MY_VAR": "plain"}
    assert doc["FailureReason"].endswith(f"bad key {MASK}, exit code: 1")
    assert next(h for h in doc["Hosts"] if h["Host"] == "algo-2")["FailureReason"] == doc["FailureReason"]
    for log in (result.job_dir / "logs").glob("*.log"):
        assert SECRET.encode() not in log.read_bytes()
    assert all(SECRET not in line for _, _, line in reporter.lines)
    assert ("algo-2", "dnn_group", f"key={MASK}") in reporter.lines


def test_job_json_masks_the_log_tail_and_a_secret_cut_at_1024_chars(
    spec_with: Callable[..., JobSpec],
) -> None:
    spec = spec_with({"MY_API_KEY": SECRET})
    fake = FakeBackend({"algo-1": exits(0), "algo-2": exits(3, 0.0, logs=[f"boom {SECRET}\n"])})
    result = run_job(spec, RunOptions(grace=1), backend=fake, reporter=RecordingReporter())
    text, doc = job_json_text(result.job_dir)
    assert SECRET not in text
    assert doc["FailureReason"].endswith(f"boom {MASK}")

    # a failure file whose 1024-character cut falls inside the secret
    prefix = "AlgorithmError: "
    detail = "x" * (1024 - len(prefix) - 9) + SECRET  # the cut leaves SECRET[:9]
    fake = FakeBackend({"algo-1": exits(0), "algo-2": exits(1, 0.0, files={"output/failure": detail})})
    result = run_job(spec_with({"MY_API_KEY": SECRET}, "out2"), RunOptions(grace=1), backend=fake,
                     reporter=RecordingReporter())
    text, doc = job_json_text(result.job_dir)
    assert doc["FailureReason"].startswith(prefix + "xxx")
    assert SECRET[:MIN_SECRET_LENGTH] not in text
    assert "x" + MASK in doc["FailureReason"]  # masked whole, then cut (its exit code is past the cut)


def test_the_python_repr_of_a_secret_is_masked_too() -> None:
    # print(settings) shows reprs: quotes and backslashes come out escaped.
    value = "it's\\a-secret"
    masker = Masker({"DB_PASSWORD": value})
    line = f"settings: {{'db': {value!r}}}"
    assert "a-secret" in line and "\\\\a" in line  # the repr doubles the backslash: not the raw value
    masked = masker.mask(line)
    assert "a-secret" not in masked and "it's" not in masked
    assert masked == 'settings: {\'db\': "***"}'
