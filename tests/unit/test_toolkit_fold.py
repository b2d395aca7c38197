"""The training toolkit's environment dump is one console line per host; every byte stays in the log file.

The block below has the shape sagemaker_training's `log_script_invocation` logs (the logger's default
format, json.dumps(indent=4) of the training environment, one KEY=value line per variable, the
command, two blank lines): written here by hand, not copied.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emulator.jobspec import validate
from emulator.planning.plan import Plan, make_plan
from emulator.reports.console import RecordingReporter
from emulator.run.logs import STDERR, STDOUT, LogCollector
from emulator.run.toolkit_fold import MAX_LINES, EnvironmentFold

HEADER = "2026-12-01 13:00:00,123 sagemaker-training-toolkit INFO     Invoking user script"
COMMAND = "/opt/venv/bin/python3 train.py --epochs 2"


def toolkit_block(variables: int = 60, command: str = COMMAND) -> list[str]:
    env = {"channel_input_dirs": {"training": "/opt/ml/input/data/training"}, "current_host": "algo-1",
           "hosts": ["algo-1", "algo-2"], "hyperparameters": {"epochs": 2}, "user_entry_point": "train.py"}
    lines = [HEADER, "", "Training Env:", "", *json.dumps(env, indent=4).split("\n"), "",
             "Environment variables:", ""]
    lines += [f"SM_VAR_{i}={json.dumps({'i': i})}" for i in range(variables)]
    lines += ["PYTHONPATH=/opt/ml/code:/opt/venv/bin", "", "Invoking script with the following command:", "",
              command, "", ""]
    return lines


def fold_all(lines: list[str], fold: EnvironmentFold | None = None) -> list[str]:
    fold = fold or EnvironmentFold("logs/algo-1.log")
    shown = [out for line in lines for out in fold.feed(line)]
    return shown + fold.flush()


def test_the_toolkit_block_becomes_one_line_with_the_command() -> None:
    block = toolkit_block()
    shown = fold_all(["before", *block, "epoch 1 loss 0.5"])
    folded = len(block) - 2  # through the command; the two trailing blank lines are dropped
    assert shown == ["before", f"[toolkit environment: {folded} lines, in logs/algo-1.log] invoking: {COMMAND}",
                     "epoch 1 loss 0.5"]


def test_a_blank_line_of_the_script_after_the_two_trailing_ones_is_shown() -> None:
    shown = fold_all([*toolkit_block(), "", "after"])
    assert shown[1:] == ["", "after"]


def test_a_line_that_only_looks_like_the_header_loses_nothing() -> None:
    lines = [HEADER, "my own output", "more"]
    assert fold_all(lines) == lines


def test_a_block_broken_in_the_middle_is_shown_as_it_was() -> None:
    block = toolkit_block()
    cut = block.index("Environment variables:") + 3
    # A variable whose value holds a newline: its second line is no KEY=value line.
    lines = [*block[:cut], "continued value", *block[cut:]]
    shown = fold_all(lines)
    assert shown[: cut + 1] == lines[: cut + 1]
    assert "continued value" in shown
    assert not any(line.startswith("[toolkit environment") for line in shown)


def test_a_header_that_breaks_a_held_block_starts_a_fold_of_its_own() -> None:
    block = toolkit_block()
    shown = fold_all([*block[:5], *block])
    assert shown[:5] == block[:5]
    assert shown[5].startswith("[toolkit environment: ")
    assert len(shown) == 6


def test_output_that_ends_inside_a_block_is_shown_at_the_end() -> None:
    block = toolkit_block()[:20]
    assert fold_all(block) == block


def test_the_fold_is_bounded_in_lines() -> None:
    block = toolkit_block(variables=MAX_LINES + 10)
    shown = fold_all(block)
    # Past the bound nothing is held back any more: every line is shown, none is folded.
    assert shown == block
    assert not any(line.startswith("[toolkit environment") for line in shown)


def test_each_stream_of_each_host_folds_on_its_own() -> None:
    fold = EnvironmentFold("logs/algo-2.log")
    other = EnvironmentFold("logs/algo-2.log")
    block = toolkit_block()
    shown = [out for line in block[:10] for out in fold.feed(line)]
    shown += other.feed("a stdout line in the middle")
    shown += [out for line in block[10:] for out in fold.feed(line)]
    assert shown[0] == "a stdout line in the middle"
    assert shown[1].startswith("[toolkit environment: ") and "logs/algo-2.log" in shown[1]


# ------------------------------------------------------------------------------------------------
# Through the LogCollector: the console gets the fold, the file every byte.


def plan_with(tmp_path: Path, hosts: int = 2) -> Plan:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "t.py").write_text("")
    spec = validate({"job_name": "j", "entry_point": "t.py", "source_dir": "code", "instance_type": "ml.c5.xlarge",
                     "instance_count": hosts}, base_dir=tmp_path)
    plan = make_plan(spec, "j")
    (Path(plan.job_dir) / "logs").mkdir(parents=True)
    return plan


@pytest.mark.parametrize("chunk_size", [7, 4096, 1 << 20], ids=["tiny-chunks", "pipe-chunks", "one-chunk"])
def test_the_collector_folds_the_console_and_keeps_the_file_whole(tmp_path: Path, chunk_size: int) -> None:
    plan = plan_with(tmp_path)
    reporter = RecordingReporter()
    logs = LogCollector(plan, reporter)
    data = ("\n".join(toolkit_block()) + "\n").encode()
    for host in ("algo-1", "algo-2"):
        logs(f"j-{host}", b"hello from the script\n", STDOUT)
        for i in range(0, len(data), chunk_size):
            logs(f"j-{host}", data[i:i + chunk_size], STDERR)
        logs(f"j-{host}", b"epoch 1\n", STDERR)
    logs.close()
    for host in ("algo-1", "algo-2"):
        shown = [line for h, _, line in reporter.lines if h == host]
        assert shown == ["hello from the script",
                         f"[toolkit environment: {len(toolkit_block()) - 2} lines, in logs/{host}.log] "
                         f"invoking: {COMMAND}", "epoch 1"]
        file = (Path(plan.job_dir) / "logs" / f"{host}.log").read_bytes()
        assert file == b"hello from the script\n" + data + b"epoch 1\n"
