"""The emulated nvidia-smi (emulator/data/instance/nvidia-smi), run as a host runs it: a POSIX sh script
under every shell this machine has of sh, dash, bash and busybox (images differ in /bin/sh), answering
what the toolkits, launchers and scripts ask in the real one's formats."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

import pytest

import emulator
from emulator.planning import hardware

SCRIPT = Path(emulator.__file__).parent / "data" / "instance" / "nvidia-smi"
UUIDS = (
    "GPU-3f2a9c1e-0b7d-4e55-9a61-2c8d0e4f7a10",
    "GPU-8b1c0d2e-4f5a-4b6c-8d7e-9f0a1b2c3d4e",
    "GPU-c0ffee00-1111-4222-8333-444455556666",
    "GPU-deadbeef-aaaa-4bbb-8ccc-ddddeeeeffff",
)
ENV = {"HETERO_EMU_GPUS": ",".join(UUIDS), "HETERO_EMU_GPU_MODEL": "NVIDIA A10G",
       "HETERO_EMU_GPU_MEMORY_MIB": "24576", "PATH": "/usr/bin:/bin"}
NO_GPU = {"PATH": "/usr/bin:/bin"}
NO_DRIVER = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
             "Make sure that the latest NVIDIA driver is installed and running.")


def _shell(command: str) -> object:
    argv = shlex.split(command)
    return pytest.param(argv, id=argv[0], marks=pytest.mark.skipif(shutil.which(argv[0]) is None,
                                                                    reason=f"no {argv[0]} here"))


# `sh` is whatever /bin/sh is here; the others are the shells images have as theirs.
SHELLS = [_shell("sh"), _shell("dash"), _shell("bash --posix"), _shell("busybox sh")]


class Smi(Protocol):
    def __call__(self, *args: str, env: Mapping[str, str] = ...) -> subprocess.CompletedProcess[str]: ...


@pytest.fixture(params=SHELLS)
def smi(request: pytest.FixtureRequest) -> Smi:
    shell: list[str] = request.param

    def run(*args: str, env: Mapping[str, str] = ENV) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*shell, str(SCRIPT), *args], capture_output=True, text=True, timeout=30,
                              env=dict(env))
    return run


def csv(smi: Smi, query: str, fmt: str = "csv", *more: str) -> list[str]:
    out = smi(f"--query-gpu={query}", f"--format={fmt}", *more)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout.splitlines()


def test_the_emulator_sets_the_variables_this_reads() -> None:
    assert (hardware.GPUS_VARIABLE, hardware.GPU_MODEL_VARIABLE, hardware.GPU_MEMORY_VARIABLE) == (
        "HETERO_EMU_GPUS", "HETERO_EMU_GPU_MODEL", "HETERO_EMU_GPU_MEMORY_MIB")
    assert all(re.fullmatch(r"GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", uuid)
               for uuid in hardware.emulated_uuids("job", "algo-2", 3))


def test_list_gpus_is_one_line_per_gpu_in_the_real_format(smi: Smi) -> None:
    out = smi("--list-gpus")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [f"GPU {i}: NVIDIA A10G (UUID: {uuid})" for i, uuid in enumerate(UUIDS)]
    assert smi("-L").stdout == out.stdout


def test_the_toolkits_gpu_count_is_the_types(smi: Smi) -> None:
    # sagemaker-training-toolkit src/sagemaker_training/environment.py num_gpus():
    #     output = subprocess.check_output(shlex.split("nvidia-smi --list-gpus")).decode("utf-8")
    #     return sum([1 for x in output.split("\n") if x.startswith("GPU ")])
    # and 0 on CalledProcessError: that count is SM_NUM_GPUS and the processes per host.
    def num_gpus(env: Mapping[str, str]) -> int:
        out = smi("--list-gpus", env=env)
        if out.returncode != 0:
            return 0
        return sum([1 for x in out.stdout.split("\n") if x.startswith("GPU ")])

    assert num_gpus(ENV) == 4
    assert num_gpus({**ENV, "HETERO_EMU_GPUS": UUIDS[0]}) == 1
    assert num_gpus(NO_GPU) == 0


def test_query_gpu_csv_has_the_real_header_units_and_values(smi: Smi) -> None:
    lines = csv(smi, "index,name,uuid,count,memory.total,memory.used,memory.free,memory.reserved,"
                     "utilization.gpu,utilization.memory,temperature.gpu,power.draw")
    assert lines[0] == ("index, name, uuid, count, memory.total [MiB], memory.used [MiB], memory.free [MiB], "
                        "memory.reserved [MiB], utilization.gpu [%], utilization.memory [%], temperature.gpu, "
                        "power.draw [W]")
    assert lines[1:] == [f"{i}, NVIDIA A10G, {uuid}, 4, 24576 MiB, 0 MiB, 24576 MiB, 0 MiB, 0 %, 0 %, 30, 25.00 W"
                         for i, uuid in enumerate(UUIDS)]


def test_the_other_fields_and_the_aliases_under_their_real_names(smi: Smi) -> None:
    lines = csv(smi, "driver_version,pci.bus_id,compute_cap,persistence_mode,pstate,gpu_name,gpu_uuid,serial")
    assert lines[0] == "driver_version, pci.bus_id, compute_cap, persistence_mode, pstate, name, uuid, serial"
    driver, bus, cap, persistence, pstate, name, uuid, serial = lines[2].split(", ")
    assert re.fullmatch(r"\d+\.\d+\.\d+", driver) and cap == "8.6"  # the A10G's compute capability
    assert (bus, persistence, pstate, name, uuid) == ("00000000:11:00.0", "Enabled", "P0", "NVIDIA A10G", UUIDS[1])
    assert re.fullmatch(r"\d{13}", serial)
    assert len({line.split(", ")[1] for line in lines[1:]}) == 4  # a bus id per GPU
    # Repeated fields are repeated, in the order asked.
    assert csv(smi, "index,index,name", "csv,noheader")[0] == "0, 0, NVIDIA A10G"


def test_noheader_nounits_and_the_two_argument_forms(smi: Smi) -> None:
    out = smi("--query-gpu", "index, uuid ,memory.free,utilization.gpu,power.draw", "--format", "csv,noheader,nounits")
    assert out.stdout.splitlines() == [f"{i}, {uuid}, 24576, 0, 25.00" for i, uuid in enumerate(UUIDS)]
    assert csv(smi, "memory.total,utilization.gpu", "csv,nounits")[0] == "memory.total, utilization.gpu"
    assert csv(smi, "count", "csv,noheader") == ["4"] * 4


def test_i_selects_gpus_by_index_and_by_uuid(smi: Smi) -> None:
    assert csv(smi, "index", "csv,noheader", "-i", f"1,{UUIDS[3]}") == ["1", "3"]
    assert csv(smi, "index,uuid", "csv,noheader", f"--id={UUIDS[2]}") == [f"2, {UUIDS[2]}"]
    assert csv(smi, "index", "csv", "--id=0") == ["index", "0"]
    assert smi("-L", "-i", "2").stdout.splitlines() == [f"GPU 2: NVIDIA A10G (UUID: {UUIDS[2]})"]
    out = smi("--query-gpu=index", "--format=csv", "-i", "7")
    assert (out.returncode, out.stdout) == (6, "No devices were found\n")


def test_an_unknown_field_fails_as_the_real_one(smi: Smi) -> None:
    out = smi("--query-gpu=index,bogus.field", "--format=csv")
    assert out.returncode == 2
    lines = [line for line in out.stdout.splitlines() if line]
    assert lines == ['Field "bogus.field" is not a valid field to query.',
                     "Please run 'nvidia-smi --help-query-gpu' for more info."]


def test_a_query_without_csv_and_an_unknown_option_exit_2_naming_the_emulation(smi: Smi) -> None:
    for args in (["--query-gpu=index"], ["--query-gpu=index", "--format=xml"], ["--query-gpu"]):
        out = smi(*args)
        assert out.returncode == 2 and out.stdout == "" and "emulated nvidia-smi" in out.stderr, args
    out = smi("topo", "-m")
    assert out.returncode == 2 and "emulated nvidia-smi" in out.stderr and "'topo'" in out.stderr
    assert "--list-gpus" in out.stderr  # what it does answer


def test_no_running_processes_on_an_emulated_gpu(smi: Smi) -> None:
    out = smi("--query-compute-apps=pid,process_name,used_memory", "--format=csv")
    assert (out.returncode, out.stdout) == (0, "pid, process_name, used_gpu_memory [MiB]\n")
    assert smi("--query-compute-apps=pid", "--format=csv,noheader").stdout == ""
    assert smi("--query-compute-apps=nope", "--format=csv").returncode == 2


def test_the_table_lists_every_gpu_and_says_they_are_emulated(smi: Smi) -> None:
    out = smi()
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "Driver Version: " in lines[1] and "CUDA Version: " in lines[1]
    rows = [line for line in lines if "NVIDIA A10G" in line]
    assert [row.split()[1] for row in rows] == ["0", "1", "2", "3"]
    assert out.stdout.count("0MiB / 24576MiB") == 4 and "No running processes found" in out.stdout
    # The real table's boxes are 89 characters wide.
    assert {len(line) for line in lines if line[:1] in ("|", "+")} == {89}
    assert lines[-1].startswith("These GPUs are emulated by hetero-emu")


def test_without_gpus_it_fails_as_on_a_machine_without_a_driver(smi: Smi) -> None:
    for env in (NO_GPU, {**ENV, "HETERO_EMU_GPUS": ""}):
        for args in ([], ["--list-gpus"], ["--query-gpu=index", "--format=csv,noheader"]):
            out = smi(*args, env=env)
            assert (out.returncode, out.stdout) == (9, NO_DRIVER + "\n"), args


def test_help_says_what_is_emulated_even_without_gpus(smi: Smi) -> None:
    for flag in ("-h", "--help"):
        out = smi(flag, env=NO_GPU)
        assert out.returncode == 0 and "emulated nvidia-smi" in out.stdout and "--query-gpu" in out.stdout
    assert "compute_cap" in smi("--help-query-gpu").stdout


def test_it_ships_executable_and_runs_from_a_staged_copy(tmp_path: Path) -> None:
    assert SCRIPT.stat().st_mode & 0o755 == 0o755
    assert SCRIPT.read_text().startswith("#!/bin/sh\n")
    # A host runs the mounted file directly (the toolkit calls `nvidia-smi --list-gpus`).
    copy = tmp_path / "nvidia-smi"
    shutil.copyfile(SCRIPT, copy)
    copy.chmod(0o755)
    out = subprocess.run([str(copy), "-L"], capture_output=True, text=True, env=ENV, timeout=30)
    assert out.returncode == 0 and out.stdout.count("GPU ") == 4
