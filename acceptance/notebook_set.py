"""The notebook acceptance set: AWS's example notebooks, each run with its estimator cells as written.

Each notebook is a folder of `acceptance/notebooks/`:

- `notebook.yaml`: where the notebook is (repository, commit, path), which of its code cells run and
  in what order, why each other code cell does not, the overrides (each one a literal replacement in
  one cell, of a kind the set allows), the synthetic data, what is checked after the run;
- `cells.json`: every code cell of the notebook at that commit, extracted by `vendor.py` (never
  retyped), with the notebook's git blob id;
- `files/`: the files the notebook's estimators upload (its `source_dir`, an `entry_point` beside
  it), copied byte for byte from that commit by `vendor.py`. They are AWS's, under the Apache
  License 2.0 (`notebooks/LICENSE-amazon-sagemaker-examples.txt`, `notebooks/NOTICE-amazon-sagemaker-examples`).

Pure: reads the folder, runs nothing.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
NOTEBOOKS = HERE / "notebooks"
MANIFEST, CELLS, FILES = "notebook.yaml", "cells.json", "files"

#: What an override may change, and nothing else: the session, the role, how much work the
#: hyperparameters ask for, and where the data is.
OVERRIDE_KINDS = {
    "session": "the session swapped for emulator.sagemaker.EmulatorSession()",
    "role": "a fake role ARN for get_execution_role(), which asks the notebook instance",
    "hyperparameters": "epochs, steps, batch sizes and workers scaled down for two CPU cores",
    "data": "a data location pointed at the synthetic data's s3:// URI",
}
#: How a notebook's run ends (acceptance/run.py; docs/notebooks.md#results).
RESULTS = ("ran", "failed: emulator", "failed: notebook itself offline", "failed: notebook itself", "not runnable here")
ROLE = "arn:aws:iam::111122223333:role/SageMakerRole"
# A line IPython would run and Python cannot: `!pip ...`, `%store x`, `%%bash`.
_MAGIC = re.compile(r"^\s*[!%]", re.MULTILINE)


@dataclass(frozen=True)
class Override:
    cell: int
    kind: str
    old: str
    new: str


@dataclass(frozen=True)
class Data:
    """Synthetic data: `make` names a function of `synthetic.py`, written `into` a folder of the
    notebook's working directory or an s3:// URI; `replaces` the cell that downloads the real data."""

    make: str
    into: str
    args: dict[str, Any]
    replaces: int | None


@dataclass(frozen=True)
class Notebook:
    name: str
    folder: Path
    title: str
    repo: str
    commit: str
    path: str
    framework: str
    cells: tuple[int, ...]
    skipped: dict[int, str]
    overrides: tuple[Override, ...]
    data: tuple[Data, ...]
    files: tuple[str, ...]
    checks: dict[str, Any]
    timeout: int
    known: tuple[dict[str, str], ...]
    #: Names a skipped cell would have bound to a data location (a `data` override): name -> value,
    #: where `{default_bucket}` is the session's default bucket.
    bind: dict[str, str]

    @property
    def source(self) -> str:
        return f"{self.repo}@{self.commit[:10]}:{self.path}"

    def bindings(self, default_bucket: str) -> dict[str, str]:
        return {name: value.format(default_bucket=default_bucket) for name, value in self.bind.items()}

    def vendored(self) -> dict[str, Any]:
        vendored: dict[str, Any] = json.loads((self.folder / CELLS).read_text(encoding="utf-8"))
        return vendored

    def code_cells(self) -> dict[int, str]:
        """Every code cell of the notebook as vendored, by its index among all the notebook's cells."""
        return {int(index): source for index, source in self.vendored()["cells"].items()}

    def cell_source(self, index: int) -> str:
        """One cell as the set runs it: the notebook's text with this notebook's overrides applied."""
        text = self.code_cells()[index]
        for override in self.overrides:
            if override.cell == index:
                text = text.replace(override.old, override.new)
        return text

    def problems(self) -> list[str]:
        """What is inconsistent in this notebook's folder (empty when it is whole)."""
        found: list[str] = []
        vendored = self.vendored()
        for key, want in (("repo", self.repo), ("commit", self.commit), ("path", self.path)):
            if vendored.get(key) != want:
                found.append(f"cells.json {key} is {vendored.get(key)!r}, notebook.yaml says {want!r}")
        code = self.code_cells()
        for index in self.cells:
            if index not in code:
                found.append(f"cell {index} is not a code cell of the notebook")
        for index in sorted(set(code) - set(self.cells)):
            if index not in self.skipped:
                found.append(f"code cell {index} neither runs nor says why it is skipped")
        for override in self.overrides:
            if override.kind not in OVERRIDE_KINDS:
                found.append(f"override of cell {override.cell}: kind {override.kind!r} is not one of "
                             f"{', '.join(OVERRIDE_KINDS)}")
            if override.cell not in self.cells:
                found.append(f"override of cell {override.cell}, which does not run")
            elif (count := code[override.cell].count(override.old)) != 1:
                found.append(f"override of cell {override.cell}: {override.old!r} occurs {count} times, not once")
        for index in self.cells:
            if index in code:
                text = self.cell_source(index)
                if _MAGIC.search(text):
                    found.append(f"cell {index} has an IPython magic line")
                try:
                    compile(text, f"cell {index}", "exec")
                except SyntaxError as err:
                    found.append(f"cell {index} does not compile: {err}")
        for known in self.known:
            if known.get("result") not in RESULTS or not known.get("match") or not known.get("why"):
                found.append(f"known failure {known}: needs match, why and a result of {', '.join(RESULTS)}")
        for data in self.data:
            if data.replaces is not None and data.replaces in self.cells:
                found.append(f"data {data.make} replaces cell {data.replaces}, which still runs")
        if not any(self.framework.split()[1] in code.get(i, "") for i in self.cells):
            found.append(f"framework {self.framework!r}: its version is in no cell that runs")
        blobs = vendored.get("files", {})
        for name in self.files:
            if not (self.folder / FILES / name).is_file():
                found.append(f"file {name} is not vendored under files/")
            elif name not in blobs:
                found.append(f"file {name} has no blob id in cells.json")
            elif git_blob_id((self.folder / FILES / name).read_bytes()) != blobs[name]:
                found.append(f"file {name} differs from the notebook's commit")
        return found


def git_blob_id(data: bytes) -> str:
    """The id git gives a file's bytes, so a vendored copy can be checked against the commit."""
    import hashlib

    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def load(folder: Path) -> Notebook:
    raw: dict[str, Any] = yaml.safe_load((folder / MANIFEST).read_text(encoding="utf-8"))
    source = raw["source"]
    return Notebook(
        name=folder.name,
        folder=folder,
        title=raw["title"],
        repo=source["repo"],
        commit=source["commit"],
        path=source["path"],
        framework=raw["framework"],
        cells=tuple(raw["cells"]),
        skipped={int(k): v for k, v in (raw.get("skipped") or {}).items()},
        overrides=tuple(Override(o["cell"], o["kind"], o["old"], o["new"]) for o in raw.get("overrides") or ()),
        data=tuple(Data(d["make"], d["into"], d.get("args") or {}, d.get("replaces")) for d in raw.get("data") or ()),
        files=tuple(raw.get("files") or ()),
        checks=raw.get("checks") or {},
        timeout=int(raw.get("timeout", 900)),
        known=tuple(raw.get("known") or ()),
        bind={str(k): str(v) for k, v in (raw.get("bind") or {}).items()},
    )


def every() -> list[Notebook]:
    return [load(folder) for folder in sorted(NOTEBOOKS.iterdir()) if (folder / MANIFEST).is_file()]


def named(name: str) -> Notebook:
    folder = NOTEBOOKS / name
    if not (folder / MANIFEST).is_file():
        known = ", ".join(n.name for n in every())
        raise SystemExit(f"no notebook {name!r} in acceptance/notebooks (there are: {known})")
    return load(folder)
