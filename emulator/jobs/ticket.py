"""The driver ticket: what a job asked for with CreateTrainingJob hands to the process that runs it.

On the service a training job runs on its own, whatever becomes of the program that asked for it, so
a session's job runs in a driver process of its own (`python -m emulator.driver TICKET`). The
ticket holds the request and how to read it (the folder relative paths resolve against, the S3 root,
the engine, what the service sets beside the request such as its region, which local paths a
request may name) and the run's options (`RunOptions`: its CreationTime, the session's image table,
`gpus`, `cpus` and injected faults), written as JSON by the service and read back by the driver.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from emulator.jobspec.faults import parse_injection
from emulator.jobspec.hardware_modes import parse_cpu_mode, parse_gpu_mode
from emulator.options import RunOptions


@dataclass(frozen=True)
class DriverTicket:
    request: Mapping[str, Any]  # the CreateTrainingJob request, in plain JSON types
    base_dir: Path  # where relative local paths in the request resolve
    s3_root: Path
    s3_origin: str  # what problems with the S3 root call it ("the session's s3_root", "serve(s3_root=...)")
    engine: str
    options: RunOptions  # created, images, gpus, cpus, inject: the session's; the rest RunOptions' defaults
    overrides: Mapping[str, Any] = field(default_factory=dict)  # what the service sets beside the request
    host_paths: list[str] | None = None  # emulator.jobspec.request.HostPaths.to_json()

    @property
    def job_name(self) -> str:
        return str(self.request.get("TrainingJobName"))

    def write(self, path: Path) -> None:
        options = self.options
        doc = {"Request": self.request, "BaseDir": str(self.base_dir), "S3Root": str(self.s3_root),
               "S3Origin": self.s3_origin, "Engine": self.engine, "Overrides": dict(self.overrides),
               "HostPaths": self.host_paths,
               "Options": {"CreationTime": options.created.isoformat() if options.created else None,
                           "Images": dict(options.images or {}), "Gpus": options.gpus, "Cpus": options.cpus,
                           "Inject": [str(i) for i in options.inject or ()]}}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, sort_keys=True))

    @classmethod
    def read(cls, path: Path) -> DriverTicket:
        doc = json.loads(path.read_text())
        given = doc["Options"]
        options = RunOptions(
            created=datetime.fromisoformat(given["CreationTime"]) if given.get("CreationTime") else None,
            images=given.get("Images") or {},
            gpus=None if given.get("Gpus") is None else parse_gpu_mode(given["Gpus"]),
            cpus=parse_cpu_mode(given.get("Cpus") or "instance"),
            inject=tuple(parse_injection(word) for word in given.get("Inject") or ()) or None)
        return cls(doc["Request"], Path(doc["BaseDir"]), Path(doc["S3Root"]), doc["S3Origin"], doc["Engine"], options,
                   doc.get("Overrides") or {}, doc.get("HostPaths"))
