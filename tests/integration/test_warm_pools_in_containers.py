"""Warm pools with real jobs (docs/service-features.md, Warm pools): a job with a keep-alive leaves its
hosts' persistent cache; a later job of the same cluster reuses the pool on new containers and finds
the cache as the first left it; `describe` and `ps` show the pools, `clean` ends them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from testkit import hetero_emu, unique

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image", "no_leftovers")]

# Each host says what its cache held when it started, and leaves its own job's name there.
SCRIPT = '''
import json, os
host = json.loads(os.environ["SM_RESOURCE_CONFIG"])["current_host"]
job = os.environ["TRAINING_JOB_NAME"]
cache = "/opt/ml/sagemaker/warmpoolcache"
found = open(f"{cache}/left-by").read() if os.path.exists(f"{cache}/left-by") else "nothing"
print(f"{host} found {found} in the cache", flush=True)
open(f"{cache}/left-by", "w").write(f"{job}/{host}")
'''


def test_a_matching_job_reuses_the_pool_and_its_cache_and_clean_ends_it(tmp_path: Path) -> None:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text(SCRIPT)

    def spec(name: str) -> Path:
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump({
            "job_name": name, "entry_point": "train.py", "source_dir": "code", "output_path": "out",
            "keep_alive_period_in_seconds": 600,
            "instance_groups": [
                {"instance_group_name": "pool-a", "instance_type": "ml.c5.xlarge", "instance_count": 1},
                {"instance_group_name": "pool-b", "instance_type": "ml.m5.large", "instance_count": 1}]}))
        return path

    first, second = unique("pool-first"), unique("pool-second")
    run = hetero_emu("run", spec(first))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "no Available pool matches this job" in run.stdout + run.stderr
    log = (tmp_path / "out" / first / "logs" / "algo-2.log").read_text()
    assert "algo-2 found nothing in the cache" in log
    assert "warm pool: Available" in hetero_emu("describe", first).stdout
    listed = json.loads(hetero_emu("ps", "--json").stdout)
    assert [row["job"] for row in listed if row["kind"] == "warm-pool"] == [first]

    again = hetero_emu("run", spec(second))
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"reusing the pool of {first}" in again.stdout + again.stderr
    for host in ("algo-1", "algo-2"):
        log = (tmp_path / "out" / second / "logs" / f"{host}.log").read_text()
        assert f"{host} found {first}/{host} in the cache" in log
    assert "warm pool: Reused, retained" in hetero_emu("describe", first).stdout
    assert f"reused by {second}" in hetero_emu("describe", first).stdout
    assert "warm pool: Available" in hetero_emu("describe", second).stdout

    cleaned = hetero_emu("clean")
    assert cleaned.returncode == 0 and f"ended 1 warm pool(s): {second}" in cleaned.stdout
    assert "warm pool: Terminated" in hetero_emu("describe", second).stdout
    assert not (tmp_path / "out" / second / "warm-pool").exists()
    assert not [row for row in json.loads(hetero_emu("ps", "--json").stdout) if row["kind"] == "warm-pool"]
