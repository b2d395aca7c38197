"""What an engine learnt about itself and keeps across runs: small JSON files in one folder, each a
table keyed by the engine's address (the ulimits it refuses, backend/ulimits.py; the subnet it picked
last for a job network, backend/docker.py). An engine is handed one (`memory=`; a test gives a folder
of its own); by default it is the emulator's state folder, found through `emulator.state.state_folder` (a
leaf module), not through the job records of the front ends.

Best effort both ways: a file that cannot be read is an empty table, one that cannot be written
(a read-only home) only costs asking the engine again next time.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emulator.state.state_folder import state_dir, write_atomically


@dataclass(frozen=True)
class EngineMemory:
    """The tables in `folder` (None: the emulator's state folder, `emulator.state.state_folder`, looked up
    at each use, as $HETERO_EMU_STATE_DIR may change between runs of one process)."""

    folder: Path | None = None

    def path(self, table: str) -> Path:
        return (self.folder if self.folder is not None else state_dir()) / table

    def read(self, table: str) -> dict[str, Any]:
        try:
            data = json.loads(self.path(table).read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def write(self, table: str, data: dict[str, Any]) -> None:
        """Atomic (two runs may write at once), best effort."""
        with contextlib.suppress(OSError):
            write_atomically(self.path(table), json.dumps(data, indent=1, sort_keys=True))
