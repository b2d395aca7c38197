"""Vendor each notebook of the set from a git copy of aws/amazon-sagemaker-examples: its code cells
into `cells.json` and the files its estimators upload into `files/`, taken from the commit its
`notebook.yaml` names, byte for byte. `--check` compares what is vendored with that git copy instead
of writing.

    python acceptance/vendor.py --git-dir PATH [--check] [NAME ...]

PATH is a clone's `.git` folder or a bare copy (`git clone --bare https://github.com/aws/amazon-sagemaker-examples`).
"""

from __future__ import annotations

import argparse
import json
import posixpath
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from notebook_set import CELLS, FILES, Notebook, every, git_blob_id, named  # noqa: E402


def show(git_dir: str, commit: str, path: str) -> bytes:
    return subprocess.run(["git", "--git-dir", git_dir, "show", f"{commit}:{path}"],
                          check=True, capture_output=True).stdout


def extracted(git_dir: str, notebook: Notebook) -> tuple[dict[str, object], dict[str, bytes]]:
    """cells.json's content and the files' bytes, from the git copy."""
    raw = show(git_dir, notebook.commit, notebook.path)
    cells = json.loads(raw)["cells"]
    code = {str(i): "".join(cell["source"]) for i, cell in enumerate(cells) if cell["cell_type"] == "code"}
    folder = posixpath.dirname(notebook.path)
    files = {name: show(git_dir, notebook.commit, posixpath.join(folder, name)) for name in notebook.files}
    vendored = {
        "repo": notebook.repo, "commit": notebook.commit, "path": notebook.path,
        "notebook_blob": git_blob_id(raw),
        "files": {name: git_blob_id(data) for name, data in files.items()},
        "cells": code,
    }
    return vendored, files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--git-dir", required=True)
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    parser.add_argument("names", nargs="*")
    args = parser.parse_args()
    notebooks = [named(n) for n in args.names] if args.names else every()
    differ = 0
    for notebook in notebooks:
        vendored, files = extracted(args.git_dir, notebook)
        text = json.dumps(vendored, indent=1, ensure_ascii=False) + "\n"
        if args.check:
            same = (notebook.folder / CELLS).read_text(encoding="utf-8") == text and all(
                (notebook.folder / FILES / name).read_bytes() == data for name, data in files.items())
            print(f"{notebook.name}: {'same as' if same else 'DIFFERS from'} {notebook.source}")
            differ += not same
            continue
        (notebook.folder / CELLS).write_text(text, encoding="utf-8")
        for name, data in files.items():
            target = notebook.folder / FILES / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        print(f"{notebook.name}: {len(vendored['cells'])} code cells, {len(files)} files from {notebook.source}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
