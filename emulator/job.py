"""The Python front end: a job built with the SageMaker SDK's argument names, validated as a YAML spec
is, and run as `hetero-emu run` runs it.

It lives outside `emulator.jobspec` because it runs jobs: the runner imports the spec package, and the
spec package never imports the runner, so the two no longer form an import cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from emulator import api
from emulator.defaults import DEFAULT_ENGINE
from emulator.jobspec import InstanceGroup, JobSpec, TrainingInput, validate
from emulator.jobspec.probes import DISK
from emulator.options import RunOptions
from emulator.reports.console import Reporter
from emulator.result import JobResult


class Job:
    """A job built in Python with the SDK's argument names; `run()` runs it like `hetero-emu run`.

    Keyword arguments are the YAML spec's keys; `InstanceGroup` and `TrainingInput` objects are
    accepted where the SDK takes them, and relative paths resolve against `base_dir` (default: cwd).

    >>> Job(entry_point="train.py", source_dir="code",
    ...     instance_groups=[InstanceGroup("data_group", "ml.c5.xlarge", 2),
    ...                      InstanceGroup("dnn_group", "ml.p3.2xlarge", 1)],
    ...     inputs={"training": TrainingInput("./data", instance_groups=("data_group",))})
    """

    def __init__(self, *, base_dir: Path | str | None = None, **kwargs: Any) -> None:
        self.base_dir = Path(base_dir) if base_dir is not None else Path.cwd()
        self.raw = _to_raw(kwargs)

    def spec(self) -> JobSpec:
        return validate(self.raw, base_dir=self.base_dir.resolve(), source="Job(...)", probes=DISK)

    def run(self, options: RunOptions | None = None, *, engine_name: str = DEFAULT_ENGINE,
            placement: api.GroupPlacement | None = None, reporter: Reporter | None = None) -> JobResult:
        """Validate, plan and run through `emulator.api.run`, as `options` say (an
        `emulator.options.RunOptions`: `job.run(RunOptions(keep=True))`; default: `hetero-emu run`'s
        defaults), on the engine called `engine_name`, with `placement`'s node labels added to the
        groups'; `reporter` prints the run. Returns its result."""
        return api.run(self.spec(), options, engine_name=engine_name, placement=placement, reporter=reporter)


def _to_raw(value: Any) -> Any:
    """Turn SDK-style objects (InstanceGroup, TrainingInput) into the YAML spec's plain mapping."""
    if isinstance(value, InstanceGroup):
        group: dict[str, Any] = {
            "instance_group_name": value.instance_group_name,
            "instance_type": value.instance_type,
            "instance_count": value.instance_count,
        }
        if value.placement:
            group["placement"] = dict(value.placement)
        return group
    if isinstance(value, TrainingInput):
        out: dict[str, Any] = {"s3_data": value.s3_data, "distribution": value.distribution,
                               "s3_data_type": value.s3_data_type}
        if value.input_mode:
            out["input_mode"] = value.input_mode
        if value.content_type:
            out["content_type"] = value.content_type
        if value.record_wrapping != "None":
            out["record_wrapping"] = value.record_wrapping
        if value.instance_groups:
            out["instance_groups"] = list(value.instance_groups)
        return out
    if isinstance(value, Mapping):
        return {k: _to_raw(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [_to_raw(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value
