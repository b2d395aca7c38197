"""SageMaker Debugger's output: where each host's tensors and profiler files are, and where they go
(docs/service-features.md#sagemaker-debugger).

A request's DebugHookConfig (which SDK v2 sends for every framework estimator unless told not to)
and ProfilerConfig reach each host as `/opt/ml/input/config/debughookconfig.json` and
`profilerconfig.json` (emulator/planning/contract.py). What the hosts write under the hook's LocalPath
(default `/opt/ml/output/tensors`) is uploaded to `<S3OutputPath>/<job name>/debug-output/`, and
what they write under the profiler's (default `/opt/ml/output/profiler`) to
`<S3OutputPath>/<job name>/profiler-output/`: the service "takes this path and appends
training_job_name and "debug-output" to it" (awslabs/sagemaker-debugger docs/analysis.md:56), and
the SDK reads both back there (sagemaker/estimator.py `latest_job_debugger_artifacts_path`,
`latest_job_profiler_artifacts_path`). The service uploads while the job runs, since Debugger's rules
read the tensors as they arrive, so here they go as TensorBoard's files do (emulator/run/checkpoints.py).
Every host's files go to the one prefix, as on the service: smdebug names its files per worker
(`<step>_<worker>.tfevents`, `<worker>_collections.json`).

Pure: the plan mounts the folders outside /opt/ml (`mounted`); the run stages and uploads them
(`uploads`, emulator/run/staging.py and emulator/run/checkpoints.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from emulator.jobspec import JobSpec
from emulator.jobspec.model import DebuggerOutput

OPT_ML = "/opt/ml"


class Upload(NamedTuple):
    """One folder of every host's, uploaded to `target` while the job runs."""

    folder: str  # in the host's folder (`hosts/algo-N/...`)
    local_path: str  # where the host sees it
    target: Path | None  # None: written, never uploaded (a ProfilerConfig without S3OutputPath)
    what: str


def _folder(config: DebuggerOutput, outside: str) -> str:
    """A local path under /opt/ml is that folder of the host's own /opt/ml; one outside it is the
    host folder `outside`, mounted there."""
    local = os.path.normpath(config.local_path)
    return local[len(OPT_ML) + 1:] if local.startswith(OPT_ML + "/") else outside


def uploads(spec: JobSpec, job_name: str) -> list[Upload]:
    """The job's Debugger folders, each with where its files go."""
    found: list[Upload] = []
    for config, outside, suffix, what in ((spec.debug_hook, "tensors", "debug-output", "Debugger tensors"),
                                          (spec.profiler, "profiler", "profiler-output", "profiler files")):
        if config is not None:
            target = config.output_path / job_name / suffix if config.output_path is not None else None
            found.append(Upload(_folder(config, outside), config.local_path, target, what))
    return found


def mounted(spec: JobSpec) -> list[Upload]:
    """The Debugger folders outside /opt/ml, which the host mounts from its own folder."""
    return [u for u in uploads(spec, "") if not u.local_path.startswith(OPT_ML + "/")]
