"""How long a new user waits for the demo's result on a bare engine, part by part (docs/benchmarks.md,
The first job on a bare engine).

The engine of the machine it runs on is not wiped (other work may use its images): each part that
`bash scripts/demo.sh` does on a fresh clone is measured on its own, as it would run there.

- **venv**: `scripts/setup-demo.sh` in a copy of the checkout (its tracked files) without `.venv`:
  Python's venv and `pip install -e .`, with pip's cache as it is and with an empty one;
- **image**: the default recipe built under another tag (`hetero-emu-bench/training:py311`, base
  `hetero-emu/base:first-job-bench`) with empty caches (`XDG_CACHE_HOME`, `PIP_CACHE_DIR`): the rootfs
  bootstrap, the import, the wheels and the `docker build`, each step's seconds from its line;
- **demo**: `hetero-emu demo` in an empty folder with the default image up to date.

The two bench images are removed at the end. Run it from a checkout, the default image built:

    .venv/bin/python benchmarks/first_job.py
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import docker

ROOT = Path(__file__).resolve().parents[1]
BENCH_VARIANT = "first-job-bench"
BENCH_TAG = "hetero-emu-bench/training:py311"
#: A finished step's line: `✓ [first-job-bench 1/4] base rootfs: ... (142.4 s)`.
STEP = re.compile(r"(?m)^✓ \[\S+ (\d)/4\] .*\(([\d.]+) s\)$")
STEPS = {"1": "rootfs", "2": "import", "3": "wheels", "4": "docker build"}


def timed(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    started = time.monotonic()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return time.monotonic() - started, done.stdout + done.stderr


def load() -> str:
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> int:
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    with tempfile.TemporaryDirectory(prefix="hetero-emu-first-job-") as folder:
        tmp = Path(folder)
        clone = tmp / "clone"
        tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
        for name in filter(None, tracked.decode().split("\0")):
            if (ROOT / name).is_file():
                (clone / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / name, clone / name)
        setup = ["bash", "-c", "set -euo pipefail; source scripts/setup-demo.sh"]
        for label, extra in (("pip's cache as it is", {}), ("an empty pip cache", {"PIP_CACHE_DIR": str(tmp / "pip")})):
            shutil.rmtree(clone / ".venv", ignore_errors=True)
            seconds, _ = timed(setup, clone, {**env, **extra})
            print(f"venv ({label}): {seconds:.1f} s (load {load()})")

        images = tmp / "images"
        shutil.copytree(ROOT / "images" / "training", images / BENCH_VARIANT)
        recipe = images / BENCH_VARIANT / "recipe.yaml"
        recipe.write_text(re.sub(r"(?m)^tag: .*$", f"tag: {BENCH_TAG}", recipe.read_text()))
        build_env = {**env, "HETERO_EMU_IMAGES_DIR": str(images), "XDG_CACHE_HOME": str(tmp / "cache"),
                     "PIP_CACHE_DIR": str(tmp / "cache" / "pip")}
        hetero_emu = str(clone / ".venv" / "bin" / "hetero-emu")
        try:
            seconds, output = timed([hetero_emu, "image", "build", "--variant", BENCH_VARIANT], tmp, build_env)
            steps = ", ".join(f"{STEPS[m[1]]} {float(m[2]):.0f} s" for m in STEP.finditer(output))
            print(f"image, empty caches: {seconds:.1f} s ({steps}; load {load()})")
        finally:
            client = docker.from_env()
            for tag in (BENCH_TAG, f"hetero-emu/base:{BENCH_VARIANT}"):
                with contextlib.suppress(docker.errors.ImageNotFound):
                    client.images.remove(tag, force=True)

        empty = tmp / "empty"
        empty.mkdir()
        seconds, _ = timed([hetero_emu, "demo"], empty, {**env, "HETERO_EMU_STATE_DIR": str(tmp / "state")})
        print(f"demo, the image up to date: {seconds:.1f} s (load {load()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
