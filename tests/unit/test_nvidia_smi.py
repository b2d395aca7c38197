"""The emulated nvidia-smi (emulator/data/instance/nvidia-smi), run as a host runs it: a POSIX sh script
under every shell this machine has of dash, bash and busybox (images differ in /bin/sh), answering
what the toolkits and scripts ask in the real one's formats."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from emulator import hardware, hooks

SCRIPT = hooks.SOURCES["nvidia-smi"]
UUIDS = hardware.emulated_uuids("job", "algo-2", 4)
ENV = {hardware.GPUS_VARIABLE: ",".join(UUIDS), hardware.GPU_MODEL_VARIABLE: "NVIDIA A10G",
       hardware.GPU_MEMORY_VARIABLE: "24576", "PATH": "/usr/bin:/bin"}
SHELLS = [shell for shell in (["dash"], ["bash", "--posix"], ["busybox", "sh"]) if shutil.which(shell[0])]


@pytest.fixture(params=SHELLS, ids=[shell[0] for shell in SHELLS])
def smi(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*request.param, str(SCRIPT), *args], capture_output=True, text=True, timeout=30,
                              env=ENV if env is None else env)
    return run


def test_there_is_a_posix_shell_to_test_with() -> None:
    assert shutil.which("dash") or shutil.which("busybox")


def test_list_gpus_is_one_line_per_gpu_as_the_toolkit_counts_them(smi) -> None:  # type: ignore[no-untyped-def]
    out = smi("--list-gpus")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [f"GPU {i}: NVIDIA A10G (UUID: {u})" for i, u in enumerate(UUIDS)]
    # sagemaker_training/environment.py num_gpus(): sum of the lines that start with "GPU ".
    assert sum(1 for line in out.stdout.split("\n") if line.startswith("GPU ")) == 4
    assert smi("-L").stdout == out.stdout


def test_query_gpu_csv_has_the_real_header_units_and_values(smi) -> None:  # type: ignore[no-untyped-def]
    out = smi("--query-gpu=index,name,memory.total,memory.used,utilization.gpu,power.draw", "--format=csv")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "index, name, memory.total [MiB], memory.used [MiB], utilization.gpu [%], power.draw [W]"
    assert lines[1] == "0, NVIDIA A10G, 24576 MiB, 0 MiB, 0 %, 60.00 W"
    assert len(lines) == 5


def test_noheader_nounits_and_the_two_argument_forms(smi) -> None:  # type: ignore[no-untyped-def]
    out = smi("--query-gpu", "index, uuid ,memory.free", "--format", "csv,noheader,nounits")
    assert out.stdout.splitlines() == [f"{i}, {u}, 24576" for i, u in enumerate(UUIDS)]
    assert smi("--query-gpu=count", "--format=csv,noheader").stdout.splitlines() == ["4"] * 4


def test_i_selects_gpus_by_index_and_by_uuid(smi) -> None:  # type: ignore[no-untyped-def]
    out = smi("--query-gpu=index", "--format=csv,noheader", "-i", f"1,{UUIDS[3]}")
    assert out.stdout.splitlines() == ["1", "3"]
    assert smi("-L", "--id=2").stdout.startswith("GPU 2: ")


def test_an_unknown_field_fails_as_the_real_one(smi) -> None:  # type: ignore[no-untyped-def]
    out = smi("--query-gpu=index,bogus.field", "--format=csv")
    assert out.returncode == 2
    assert out.stdout.splitlines()[0] == 'Field "bogus.field" is not a valid field to query.'
    assert "--help-query-gpu" in out.stdout


def test_query_without_csv_and_an_unknown_option_exit_2_naming_the_emulation(smi) -> None:  # type: ignore[no-untyped-def]
    assert smi("--query-gpu=index").returncode == 2
    out = smi("topo", "-m")
    assert out.returncode == 2 and "emulated nvidia-smi" in out.stderr and "topo" in out.stderr


def test_no_running_processes_on_an_emulated_gpu(smi) -> None:  # type: ignore[no-untyped-def]
    out = smi("--query-compute-apps=pid,used_memory", "--format=csv")
    assert out.stdout.splitlines() == ["pid, used_memory"]
    assert smi("--query-compute-apps=pid", "--format=csv,noheader").stdout == ""


def test_the_table_lists_every_gpu_and_says_they_are_emulated(smi) -> None:  # type: ignore[no-untyped-def]
    out = smi()
    assert out.returncode == 0
    rows = [line for line in out.stdout.splitlines() if "NVIDIA A10G" in line]
    assert len(rows) == 4 and "0MiB / 24576MiB" in out.stdout
    assert {len(line) for line in out.stdout.splitlines()[:12]} == {89}  # the real table's width
    assert out.stdout.splitlines()[-1].startswith("These GPUs are emulated by hetero-emu")


def test_without_gpus_it_fails_as_on_a_machine_without_a_driver(smi) -> None:  # type: ignore[no-untyped-def]
    out = smi("--list-gpus", env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 9
    assert "couldn't communicate with the NVIDIA driver" in out.stdout


def test_it_ships_executable() -> None:
    assert SCRIPT.stat().st_mode & 0o111
    assert SCRIPT.read_text().startswith("#!/bin/sh\n")


def test_staged_copies_keep_the_shebang_so_any_image_runs_it(tmp_path: Path) -> None:
    # A host runs the mounted file directly (the toolkit calls `nvidia-smi --list-gpus`).
    copy = tmp_path / "nvidia-smi"
    shutil.copyfile(SCRIPT, copy)
    copy.chmod(0o755)
    out = subprocess.run([str(copy), "-L"], capture_output=True, text=True, env=ENV, timeout=30)
    assert out.returncode == 0 and out.stdout.count("GPU ") == 4
