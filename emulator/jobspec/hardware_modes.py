"""How a job's hosts get their instance types' GPUs and vCPUs here, as a choice: the modes `--gpus`
(the spec's `gpus`, `EmulatorSession(gpus=...)`) and `--cpus` name, read from text.

A choice of the job's, so the spec's rules check its `gpus` here; what each mode gives a host on
this machine is emulator/planning/hardware.py.
"""

from __future__ import annotations

from typing import Literal

GpuMode = Literal["auto", "none", "emulate", "real", "share"]
GPU_MODES: tuple[GpuMode, ...] = ("auto", "none", "emulate", "real", "share")
CpuMode = Literal["instance", "machine"]
CPU_MODES: tuple[CpuMode, ...] = ("instance", "machine")


def parse_gpu_mode(text: str) -> GpuMode:
    """`--gpus` and the spec's `gpus`: one of GPU_MODES."""
    value = text.strip().lower()
    if value not in GPU_MODES:
        raise ValueError(f"{text!r} is not a GPU mode: use one of {', '.join(GPU_MODES)}")
    return value


def parse_cpu_mode(text: str) -> CpuMode:
    """`--cpus`: one of CPU_MODES."""
    value = text.strip().lower()
    if value not in CPU_MODES:
        raise ValueError(f"{text!r} is not a CPU mode: use one of {', '.join(CPU_MODES)}")
    return value
