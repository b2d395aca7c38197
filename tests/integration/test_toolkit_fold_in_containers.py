"""The real training toolkit's environment dump, folded on the console and whole in the log file: a job
whose entry point the default image's `train` (sagemaker-training) runs, on two hosts of two groups."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from emulator.jobspec import validate
from emulator.options import RunOptions
from emulator.reports.console import ConsoleReporter
from emulator.run.runner import run_job

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image", "no_leftovers")]


def test_the_toolkit_environment_is_one_console_line_per_host(tmp_path: Path) -> None:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print('script says hello')\n")
    spec = validate({
        "base_job_name": "fold", "entry_point": "train.py", "source_dir": "code", "output_path": "out",
        "hyperparameters": {"epochs": 2},
        "instance_groups": [
            {"instance_group_name": "data_group", "instance_type": "ml.c5.xlarge", "instance_count": 1},
            {"instance_group_name": "dnn_group", "instance_type": "ml.c5.xlarge", "instance_count": 1},
        ],
    }, base_dir=tmp_path)
    out, err = io.StringIO(), io.StringIO()
    result = run_job(spec, RunOptions(grace=5), reporter=ConsoleReporter(out=out, err=err, colour=False, live=False))
    assert result.status == "Completed", (result.failure_reason, out.getvalue())
    console = out.getvalue()
    for host, group in (("algo-1", "data_group"), ("algo-2", "dnn_group")):
        folded = re.findall(rf"^{host} \({group}\) *\| \[toolkit environment: (\d+) lines, in logs/{host}\.log\] "
                            r"invoking: \S*python\S*(?: --)? train\.py --epochs 2$", console, re.MULTILINE)
        assert len(folded) == 1, console
        assert int(folded[0]) > 50  # the whole block: the training environment's JSON and the variables
        assert re.search(rf"^{host} \({group}\) *\| script says hello$", console, re.MULTILINE), console
        log = (result.job_dir / "logs" / f"{host}.log").read_text()
        # The file keeps every line of it.
        assert "Training Env:" in log and "Environment variables:" in log and "SM_CURRENT_HOST=" in log
        assert "Invoking script with the following command:" in log
        assert int(folded[0]) == len(log[log.index("Invoking user script"):].split("train.py --epochs 2")[0]
                                     .split("\n"))
    assert "Training Env:" not in console and "SM_CURRENT_HOST=" not in console
