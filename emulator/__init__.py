"""hetero-emu: run SageMaker heterogeneous-cluster training jobs locally on Docker, offline.

The Python API uses the SageMaker SDK's names:

    from emulator import Job, InstanceGroup, RunOptions, Status, TrainingInput
    result = Job(entry_point="train.py", source_dir="code",
                 instance_groups=[InstanceGroup("data_group", "ml.c5.xlarge", 2),
                                  InstanceGroup("dnn_group", "ml.p3.2xlarge", 1)]).run(RunOptions(keep=True))
    assert result.status == Status.COMPLETED  # or == "Completed": a Status is its text
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from emulator.job import Job
    from emulator.jobspec import InstanceGroup, JobSpec, TrainingInput, load_spec_file
    from emulator.options import RunOptions
    from emulator.result import Status

__all__ = ["InstanceGroup", "Job", "JobSpec", "RunOptions", "Status", "TrainingInput", "load_spec_file"]
__version__ = "0.1.0"

# Imported when first named (PEP 562): every `emulator.x` module imports this package first, and the
# watcher process (backend/reaper.py) or `python -m emulator.driver` need none of the job API.
_LAZY = {"Job": "emulator.job", "InstanceGroup": "emulator.jobspec", "JobSpec": "emulator.jobspec",
         "RunOptions": "emulator.options", "Status": "emulator.result", "TrainingInput": "emulator.jobspec",
         "load_spec_file": "emulator.jobspec"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'emulator' has no attribute {name!r}")
