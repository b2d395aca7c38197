"""The files a host may mount from the job folder that are not the job's: the Python start-up hook
(`emulator/data/startup/sitecustomize.py`: the toolkit's vCPU count, debugpy for `--debug-host`) and
the emulated nvidia-smi (`emulator/data/instance/nvidia-smi`, `--gpus emulate`).

They are copied into the job folder when it is staged, not mounted from the package: a swarm node
sees the job folder, not this machine's installation. Both are mounted read-only.
"""

from __future__ import annotations

import shutil
from pathlib import Path

_DATA = Path(__file__).resolve().parents[1] / "data"  # emulator/data
# Each staged file and where it comes from.
SOURCES = {"sitecustomize.py": _DATA / "startup" / "sitecustomize.py", "nvidia-smi": _DATA / "instance" / "nvidia-smi"}
# Inside the job folder (under .staging/, removed with the other staged files after the job).
FOLDER = ".staging/hooks"
# Where a host mounts the folder (first on its PYTHONPATH, for the start-up hook).
TARGET = "/opt/hetero-emu/hooks"
# Where NVIDIA's container runtime puts the real nvidia-smi.
NVIDIA_SMI_TARGET = "/usr/bin/nvidia-smi"


def stage(folder: Path) -> None:
    """Copy the hook files into `folder` (made if missing), executable."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, source in SOURCES.items():
        shutil.copyfile(source, folder / name)
        (folder / name).chmod(0o755)


def on_pythonpath(environment: dict[str, str]) -> dict[str, str]:
    """`environment` with the hook folder first on PYTHONPATH (before the spec's own, which stays), once."""
    given = environment.get("PYTHONPATH")
    if given is not None and given.split(":")[0] == TARGET:
        return environment
    return {**environment, "PYTHONPATH": f"{TARGET}:{given}" if given else TARGET}
