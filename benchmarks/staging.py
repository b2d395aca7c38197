"""What symlinks cost at validation and staging (no Docker): how long listing a channel (`spec.paths.scan`,
links followed) and staging its shares (`staging.stage`, hard links) take, for a channel of plain
files and for the same channel where every file is a symlink into a cache outside it (the DVC /
Hugging Face layout, which makes a FullyReplicated channel a share of hard links), with a data size
that shows whether any byte is copied. The last row is the same files as source_dir, which every
host gets a copy of (`staging.copy_code`).

    python benchmarks/staging.py [--files 20000] [--size 4096] [--hosts 4]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from emulator.jobspec import validate
from emulator.jobspec.paths import scan
from emulator.planning.plan import make_plan
from emulator.run import staging


def make_channel(root: Path, files: int, size: int, linked: bool) -> Path:
    """`files` files of `size` bytes in 100 folders; linked: each a relative link into ../cache."""
    data = root / ("linked" if linked else "plain")
    cache = root / "cache"
    cache.mkdir(exist_ok=True)
    payload = os.urandom(size)
    for i in range(files):
        path = data / f"part-{i % 100:02d}" / f"f{i:06d}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        if linked:
            blob = cache / f"b{i:06d}"
            if not blob.exists():
                blob.write_bytes(payload)
            path.symlink_to(os.path.relpath(blob, path.parent))
        else:
            path.write_bytes(payload)
    return data


def timed(step: object) -> float:
    start = time.perf_counter()
    step()  # type: ignore[operator]
    return time.perf_counter() - start


def measure(root: Path, data: Path, hosts: int, distribution: str | None,
            repeat: int) -> tuple[float, float, int, int]:
    """Median seconds to list the channel and to stage the job; hard links and copies in .staging.
    `distribution` None: `data` is the job's source_dir instead of a channel."""
    listing, stage = [], []
    links = copies = 0
    for n in range(repeat):
        listing.append(timed(lambda: scan(data)))
        code: dict[str, object] = {"container_entry_point": ["true"]}
        if distribution is None:
            code = {"source_dir": str(data), "entry_point": next(p for p in scan(data).files)}
        spec = validate({
            "job_name": f"bench-{n}", **code, "output_path": str(root / "out"),
            "instance_groups": [{"instance_group_name": "a", "instance_type": "ml.c5.xlarge",
                                 "instance_count": hosts}],
            "inputs": {} if distribution is None else {"training": {"s3_data": str(data),
                                                                   "distribution": distribution}},
        }, base_dir=root)
        plan = make_plan(spec, f"bench-{n}")
        stage.append(timed(lambda plan=plan: staging.stage(plan)))
        staged = [p.stat().st_nlink for p in (Path(plan.job_dir) / ".staging").rglob("*") if p.is_file()]
        links, copies = sum(n > 1 for n in staged), sum(n == 1 for n in staged)  # a copy has one name
        staging.unstage(plan)
        shutil.rmtree(plan.job_dir)
    return statistics.median(listing), statistics.median(stage), links, copies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=20000)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hetero-emu-bench-") as tmp:
        root = Path(tmp)
        plain = make_channel(root, args.files, args.size, linked=False)
        linked = make_channel(root, args.files, args.size, linked=True)
        print(f"{args.files} files of {args.size} B, {args.hosts} hosts, median of {args.repeat}")
        print(f"{'channel':<36} {'list s':>8} {'stage s':>8} {'hard links':>11} {'copies':>7}")
        for label, data, distribution in (
            ("plain, FullyReplicated (mount)", plain, "FullyReplicated"),
            ("links out, FullyReplicated", linked, "FullyReplicated"),
            ("plain, ShardedByS3Key", plain, "ShardedByS3Key"),
            ("links out, ShardedByS3Key", linked, "ShardedByS3Key"),
            ("plain, source_dir (copied per host)", plain, None),
        ):
            listed, staged, links, copies = measure(root, data, args.hosts, distribution, args.repeat)
            print(f"{label:<36} {listed:>8.3f} {staged:>8.3f} {links:>11} {copies:>7}")


if __name__ == "__main__":
    main()
