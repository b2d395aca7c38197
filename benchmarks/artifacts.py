"""Packing speed of model.tar.gz, against the method it replaced, measured in one process.

Two trees, as a job's hosts leave them under hosts/algo-N/model:
- large: one file of random bytes (incompressible: the worst case for deflate), 1 GiB by default;
- small: 2 hosts x 50,000 files of 512 bytes (hex text) in folders of 1,000, the issue's case.
For each it times `emulator.run.artifacts.merge_tree` (tarfile headers into isal's threaded gzip), the
old method (`tarfile.open(archive, "w:gz")` with gettarinfo/addfile per file, zlib level 9), and
`merge_copy` (disable_output_compression), then prints MB/s (of file data) and the speed-up. Each
archive is checked to unpack to the same bytes (sha256). The page cache is warm for every method
alike: each tree is read once before the first timing.

    python benchmarks/artifacts.py [--big-mib 1024] [--small-files 50000] [--repeat 1] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from emulator.planning.plan import Plan
from emulator.run import artifacts, hostfiles


def old_merge_tree(plan: Any, relative: str, archive: Path) -> Path:
    """merge_tree as it was before issue 7 (tarfile "w:gz", zlib level 9, gettarinfo per file)."""
    chosen: dict[str, Path] = {}
    for host in plan.hosts:
        root = hostfiles.host_path(Path(host.host_dir), relative)
        if root is None:
            continue
        for name, path in hostfiles.regular_files(root):
            chosen[name] = path
    with tarfile.open(archive, "w:gz") as tar:
        for name in sorted(chosen):
            file = hostfiles.open_regular(chosen[name])
            if file is None:
                continue
            with file:
                tar.addfile(tar.gettarinfo(arcname=name, fileobj=file), file)
    return archive


def make_large(root: Path, mib: int) -> None:
    model = root / "hosts" / "algo-1" / "model"
    model.mkdir(parents=True)
    with open(model / "weights.bin", "wb") as f:
        for _ in range(mib):
            f.write(os.urandom(1 << 20))


def make_small(root: Path, per_host: int) -> None:
    for host in (1, 2):
        for i in range(per_host):
            folder = root / "hosts" / f"algo-{host}" / "model" / f"shard-{host}-{i // 1000:03d}"
            if i % 1000 == 0:
                folder.mkdir(parents=True)
            (folder / f"part-{i:06d}.json").write_bytes(os.urandom(256).hex().encode())


def plan_of(root: Path) -> Plan:
    hosts = [SimpleNamespace(host_dir=str(d), name=d.name) for d in sorted((root / "hosts").iterdir())]
    return cast(Plan, SimpleNamespace(hosts=hosts))


def digest_tree(plan: Plan) -> dict[str, str]:
    files = artifacts.chosen_files(plan, "model")
    return {name: hashlib.sha256(Path(path).read_bytes()).hexdigest() for name, path, _ in files}


def digest_archive(archive: Path) -> dict[str, str]:
    out = {}
    with tarfile.open(archive) as tar:
        for member in tar:
            data = tar.extractfile(member)
            assert data is not None
            digest = hashlib.sha256()
            while chunk := data.read(1 << 20):
                digest.update(chunk)
            out[member.name] = digest.hexdigest()
    return out


def timed(action: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench(label: str, root: Path, repeat: int) -> None:
    plan = plan_of(root)
    files = artifacts.chosen_files(plan, "model")
    size = sum(s for _, _, s in files)
    expected = digest_tree(plan)  # also warms the page cache for every method alike
    new_archive, old_archive = root / "new.tar.gz", root / "old.tar.gz"
    copies = iter(range(repeat))

    def copy() -> None:
        # A new folder each time, as a job's is: removing 100,000 files just before (ext4 with
        # discard) slows the next creations several-fold, which a real run never pays.
        artifacts.merge_copy(plan, "model", root / f"copied-{next(copies)}" / "model")

    new = timed(lambda: artifacts.merge_tree(plan, "model", new_archive), repeat)
    old = timed(lambda: old_merge_tree(plan, "model", old_archive), repeat)
    copied = timed(copy, repeat)
    assert digest_archive(new_archive) == expected, "the new archive does not unpack to the same bytes"
    assert digest_archive(old_archive) == expected
    print(f"{label}: {len(files):,} files, {size / 1e6:,.0f} MB")
    for name, seconds, archive in (("isal (new)", new, new_archive), ("tarfile w:gz (old)", old, old_archive)):
        print(f"  {name:20} {seconds:7.2f} s  {size / 1e6 / seconds:7.0f} MB/s  {len(files) / seconds:9,.0f} files/s"
              f"  archive {archive.stat().st_size / size:.3f} of the data")
    print(f"  {'copy (NONE)':20} {copied:7.2f} s  {size / 1e6 / copied:7.0f} MB/s  {len(files) / copied:9,.0f} files/s")
    print(f"  speed-up over the old method: {old / new:.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--big-mib", type=int, default=1024, help="size of the large file (MiB)")
    parser.add_argument("--small-files", type=int, default=50_000, help="small files per host (2 hosts)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each method; the median is printed")
    parser.add_argument("--workdir", type=Path, default=None, help="where the trees are made (default: a temp dir)")
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs; isal level {artifacts.GZIP_LEVEL}, {artifacts.GZIP_THREADS} compression threads")
    with tempfile.TemporaryDirectory(dir=args.workdir, prefix="bench-artifacts-") as tmp:
        large, small = Path(tmp) / "large", Path(tmp) / "small"
        make_large(large, args.big_mib)
        bench(f"{args.big_mib} MiB of random data, 1 file", large, args.repeat)
        shutil.rmtree(large)
        make_small(small, args.small_files)
        bench(f"2 hosts x {args.small_files:,} small files", small, args.repeat)


if __name__ == "__main__":
    main()
