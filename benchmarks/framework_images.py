"""How long a framework image takes to build, cold and warm, and how big it is (images/README.md).

For each framework image named (default: the three the tests run), in one process:

- **cold**: a cache folder of its own (no rootfs tarball, no pip cache, no Horovod wheel) and neither
  the image nor its base rootfs image in the engine: everything is fetched and built;
- **up to date**: the same build again, which finds the image with its recipe label;
- **rebuild**: `--rebuild` with the caches warm (as after a change to the recipe): the rootfs and the
  downloads (and Horovod's wheel) are reused, the install runs and the container is committed again;
- the image's size.

The rootfs step is shown apart (it is shared by every image of one Python). Prints one table; run it
on a quiet machine:

    .venv/bin/python benchmarks/framework_images.py [pytorch:1.11.0:py38 ...]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import docker

from emulator.backend import image as images
from emulator.backend.framework_build import base_recipe, build_framework_image
from emulator.frameworks import choose

DEFAULT = ("pytorch:1.11.0:py38", "pytorch:2.1.0:py310", "tensorflow:2.9.2:py39")


def main(argv: list[str]) -> int:
    client = docker.from_env(timeout=600)
    rows = []
    for item in argv or DEFAULT:
        framework, version, py_version = item.split(":")
        target = choose(framework, version, py_version)
        base = images.base_image(base_recipe(target.suite))
        for tag in (target.tag, base):
            if images.image_present(client, tag):
                client.images.remove(tag, force=True)
        with tempfile.TemporaryDirectory(prefix="hetero-emu-bench-") as cache:
            steps: list[tuple[float, str]] = []
            started = time.monotonic()

            def note(line: str, t0: float = started, seen: list[tuple[float, str]] = steps) -> None:
                seen.append((time.monotonic() - t0, line))

            cold = build_framework_image(client, target, progress=note, cache_dir=Path(cache))
            rootfs = next((s for s, line in steps if "base rootfs" in line and "✓" in line), float("nan"))
            again = build_framework_image(client, target, progress=lambda line: None, cache_dir=Path(cache))
            rebuilt = build_framework_image(client, target, rebuild=True, progress=lambda line: None,
                                            cache_dir=Path(cache))
        rows.append((target.tag, cold.seconds, rootfs, again.seconds, rebuilt.seconds, rebuilt.size_bytes))
        print(f"{target.tag}: cold {cold.seconds:.0f} s (rootfs done at {rootfs:.0f} s), up to date "
              f"{again.seconds:.2f} s, rebuild {rebuilt.seconds:.0f} s, {rebuilt.size_bytes / 1e9:.2f} GB",
              flush=True)
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")
    print("| image | cold build | of it, the rootfs | up to date | rebuild, caches warm | size |")
    print("| --- | --- | --- | --- | --- | --- |")
    for tag, cold_s, rootfs_s, again_s, rebuild_s, size in rows:
        print(f"| {tag} | {cold_s:.0f} s | {rootfs_s:.0f} s | {again_s:.2f} s | {rebuild_s:.0f} s | "
              f"{size / 1e9:.2f} GB |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
