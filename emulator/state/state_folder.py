"""Where the emulator keeps what outlives a run, and how a file there is written.

`$HETERO_EMU_STATE_DIR`, else `$XDG_STATE_HOME/hetero-emu`, else `~/.local/state/hetero-emu` (the XDG
base directory spec's place for state). The job records (`emulator.state.job_records`) and what engines
learnt about themselves (`emulator.backend.engine_memory`) live there. A leaf module (the standard
library only), so that the engines below the front ends can be handed a place without importing them.
"""

from __future__ import annotations

import contextlib
import functools
import os
import tempfile
from pathlib import Path


def state_dir() -> Path:
    environ = os.environ
    return _state_dir(environ.get("HETERO_EMU_STATE_DIR", ""), environ.get("XDG_STATE_HOME", ""),
                      environ.get("HOME", ""))


@functools.lru_cache(maxsize=32)
def _state_dir(given: str, xdg_state: str, home: str) -> Path:
    # Kept per value of the variables it depends on: `hetero-emu serve` asks for it several times per
    # call, and building the Path is most of what that costs.
    if given:
        return Path(given)
    base = xdg_state or str(Path.home() / ".local" / "state")
    return Path(base) / "hetero-emu"


def write_atomically(path: Path, text: str) -> None:
    """Write the file whole and rename it into place: a reader (another run, too) never sees half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
