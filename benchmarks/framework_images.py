"""How long the framework images take to build, cold and warm, and how big they are (images/README.md).

For the framework images named (default: the three the tests run), in one process, as a fresh machine
would meet them:

- **cold**: every framework image, stage image and framework rootfs image is removed first, and the
  builds share one new cache folder (no rootfs tarball, no pip cache, no Horovod wheel): each image
  is built in turn, so the first one of a Python pays for its rootfs and the next reuse it, as in CI;
- **up to date**: the same build again, which finds the image with its recipe label;
- **rebuild**: `--rebuild` with the caches warm (as after a change to the pins or venv.sh): the rootfs
  and the downloads (and Horovod's wheel) are reused, both stages run and are committed again;
- the image's size.

Prints one line per image as it goes, then a table; run it on a quiet machine:

    .venv/bin/python benchmarks/framework_images.py [pytorch:1.11.0:py38 ...]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import docker

from emulator.backend import image_build
from emulator.backend.framework_build import base_recipe, build_framework_image, stage_tag
from emulator.training_images.frameworks import choose

DEFAULT = ("pytorch:1.11.0:py38", "pytorch:2.1.0:py310", "tensorflow:2.9.2:py39")


def main(argv: list[str]) -> int:
    client = docker.from_env(timeout=600)
    targets = [choose(*item.split(":")) for item in argv or DEFAULT]
    suites = {t.suite for t in targets}
    # Children before parents: the images, their stage images, then the rootfs images under them.
    for tag in [t.tag for t in targets] + [stage_tag(t) for t in targets] + [
            image_build.base_image(base_recipe(suite)) for suite in sorted(suites)]:
        if image_build.image_present(client, tag):
            client.images.remove(tag, force=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="hetero-emu-bench-") as folder:
        cache = Path(folder)
        for target in targets:
            steps: list[tuple[float, str]] = []
            started = time.monotonic()

            def note(line: str, t0: float = started, seen: list[tuple[float, str]] = steps) -> None:
                seen.append((time.monotonic() - t0, line))

            cold = build_framework_image(client, target, progress=note, cache_dir=cache)
            rootfs = next((s for s, line in steps if "base rootfs" in line and "✓" in line), 0.0)
            again = build_framework_image(client, target, progress=lambda line: None, cache_dir=cache)
            rebuilt = build_framework_image(client, target, rebuild=True, progress=lambda line: None, cache_dir=cache)
            rows.append((target.tag, cold.seconds, rootfs, again.seconds, rebuilt.seconds, rebuilt.size_bytes))
            print(f"{target.tag}: cold {cold.seconds:.0f} s (rootfs {rootfs:.0f} s of it), up to date "
                  f"{again.seconds:.2f} s, rebuild {rebuilt.seconds:.0f} s, {rebuilt.size_bytes / 1e9:.2f} GB",
                  flush=True)
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")
    print("| image | cold build | of it, the rootfs | up to date | rebuild, caches warm | size |")
    print("| --- | --- | --- | --- | --- | --- |")
    for tag, cold_s, rootfs_s, again_s, rebuild_s, size in rows:
        print(f"| {tag} | {cold_s:.0f} s | {rootfs_s:.0f} s | {again_s:.2f} s | {rebuild_s:.0f} s | "
              f"{size / 1e9:.2f} GB |")
    print(f"| all {len(rows)}, cold | {sum(r[1] for r in rows):.0f} s | | | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
