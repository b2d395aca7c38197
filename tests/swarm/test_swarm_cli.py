"""The swarm engine's answers to a machine that cannot run it: one readable line, the documented
exit code, nothing created (docs/swarm.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import docker

REPO = Path(__file__).resolve().parents[2]


def _run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "emulator", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HETERO_EMU_SWARM_")}
    env.pop("DOCKER_HOST", None)
    return {**env, "PYTHONPATH": str(REPO), **extra}


def test_an_engine_that_is_no_swarm_manager_is_exit_3_naming_it(docker_client: docker.DockerClient,
                                                                  tmp_path: Path) -> None:
    # The machine's own engine, which the harness never puts in swarm mode.
    assert docker_client.info()["Swarm"]["LocalNodeState"] == "inactive"
    result = _run(["run", str(REPO / "examples/hello-hetero/job.yaml"), "--engine", "swarm", "--output-path",
                   str(tmp_path / "out")], _env(), tmp_path)
    assert result.returncode == 3, result.stderr
    assert "is not a swarm manager (swarm state: inactive)" in result.stderr
    assert "HETERO_EMU_SWARM_MANAGER" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()  # nothing staged


def test_a_malformed_node_list_is_exit_2_naming_the_variable(tmp_path: Path) -> None:
    result = _run(["run", str(REPO / "examples/hello-hetero/job.yaml"), "--engine", "swarm", "--output-path",
                   str(tmp_path / "out")], _env(HETERO_EMU_SWARM_NODES="node-2"), tmp_path)
    assert result.returncode == 2, result.stderr
    assert "HETERO_EMU_SWARM_NODES: 'node-2' is not NODE=URL" in result.stderr and "Traceback" not in result.stderr
