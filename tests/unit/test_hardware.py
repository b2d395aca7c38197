"""GPUs and vCPUs as the instance types have them (emulator/planning/hardware.py), through the plan, both
engines' translations, the compose file, the runner's checks and the CLI. No engine: the machine is
a `Machine` value, so the real-GPU path (this machine has no GPU) is tested through what the engine
would be asked."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from fake_backend import FakeBackend
from testkit import invoke

from emulator.backend.docker import container_options
from emulator.backend.docker_parts import machine_of
from emulator.backend.swarm import GPU_RESOURCE, Node, node_gpus, service_options, spread
from emulator.errors import EnvironmentProblem, SpecError
from emulator.jobspec import JobSpec, hardware_modes, instance_types, validate
from emulator.options import RunOptions
from emulator.planning import hardware, hooks
from emulator.planning.compose import compose_project
from emulator.planning.hardware import Hardware, Machine, resolve
from emulator.planning.plan import make_plan
from emulator.planning.prepare import choose_hardware
from emulator.reports.console import RecordingReporter
from emulator.run.mpi_wait import WorkerWait
from emulator.run.runner import run_job

GIB = 1024**3
NO_GPU = Machine(cpus=2, memory_bytes=24 * GIB)
FOUR_GPUS = Machine(cpus=64, memory_bytes=512 * GIB, gpu_runtime=True, gpus=("0", "1", "2", "3"))
# The guide's shape: CPU hosts beside GPU hosts.
HOSTS = [("algo-1", "ml.c5.18xlarge"), ("algo-2", "ml.g5.12xlarge"), ("algo-3", "ml.g5.12xlarge")]


def hetero_spec(tmp_path: Path, **fields: object) -> JobSpec:
    (tmp_path / "code").mkdir(exist_ok=True)
    (tmp_path / "code" / "train.py").write_text("print('hi')\n")
    raw: dict[str, object] = {
        "job_name": "gpu-job", "entry_point": "train.py", "source_dir": "code", "output_path": "out",
        "instance_groups": [
            {"instance_group_name": "data", "instance_type": "ml.c5.18xlarge", "instance_count": 1},
            {"instance_group_name": "dnn", "instance_type": "ml.g5.12xlarge", "instance_count": 2}],
        **fields,
    }
    return validate(raw, base_dir=tmp_path)


# --------------------------------------------------------------------------------------------------
# Choosing: modes, device ids, shortage


def test_auto_gives_no_gpu_on_a_machine_without_a_gpu_runtime() -> None:
    chosen = resolve("auto", "instance", "j", HOSTS, NO_GPU)
    assert chosen.gpus == "none" and chosen.devices == {}


def test_auto_gives_real_gpus_where_the_engine_has_them() -> None:
    chosen = resolve("auto", "instance", "j", HOSTS[:2], FOUR_GPUS)
    assert chosen.gpus == "real" and chosen.devices == {"algo-2": ("0", "1", "2", "3")}


def test_real_gives_each_gpu_host_its_types_count_in_host_order_and_no_id_twice() -> None:
    machine = Machine(96, 1024 * GIB, gpu_runtime=True, gpus=tuple(str(i) for i in range(8)))
    chosen = resolve("real", "instance", "j", HOSTS, machine)
    assert chosen.devices == {"algo-2": ("0", "1", "2", "3"), "algo-3": ("4", "5", "6", "7")}
    assert "algo-1" not in chosen.devices  # a CPU type never gets a GPU


def test_real_with_too_few_gpus_names_how_many_are_needed_and_present() -> None:
    with pytest.raises(hardware.GpuShortage) as info:
        resolve("real", "instance", "j", HOSTS, FOUR_GPUS)
    assert (info.value.needed, info.value.present) == (8, 4)


def test_share_hands_out_too_few_gpus_round_robin_and_says_so() -> None:
    two = Machine(16, 64 * GIB, gpu_runtime=True, gpus=("0", "1"))
    chosen = resolve("share", "instance", "j", HOSTS, two)
    assert chosen.devices == {"algo-2": ("0", "1"), "algo-3": ("0", "1")}
    assert any("share them round robin" in note for note in chosen.warnings)


def test_share_with_enough_gpus_shares_none() -> None:
    machine = Machine(96, 1024 * GIB, gpu_runtime=True, gpus=tuple(str(i) for i in range(8)))
    shared, real = resolve("share", "instance", "j", HOSTS, machine), resolve("real", "instance", "j", HOSTS, machine)
    assert shared.devices == real.devices and shared.warnings == real.warnings == ()


@pytest.mark.parametrize("mode", ["real", "share"])
def test_real_gpus_without_a_runtime_are_refused(mode: hardware_modes.GpuMode) -> None:
    with pytest.raises(ValueError, match="no GPU runtime"):
        resolve(mode, "instance", "j", HOSTS, NO_GPU)


def test_emulate_gives_each_gpu_host_its_types_count_of_uuids_and_cpu_hosts_none() -> None:
    chosen = resolve("emulate", "instance", "j", HOSTS, NO_GPU)
    assert set(chosen.devices) == {"algo-2", "algo-3"}
    assert all(len(ids) == 4 for ids in chosen.devices.values())
    every = [u for ids in chosen.devices.values() for u in ids]
    assert len(set(every)) == 8
    assert all(re.fullmatch(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", u) for u in every)


def test_unknown_gpu_and_cpu_words_are_refused_naming_the_choices() -> None:
    with pytest.raises(ValueError, match="auto, none, emulate, real, share"):
        hardware_modes.parse_gpu_mode("fake")
    with pytest.raises(ValueError, match="instance, machine"):
        hardware_modes.parse_cpu_mode("72")


# --------------------------------------------------------------------------------------------------
# What a host gets


def test_an_emulated_gpu_host_gets_nvidia_smi_its_figures_and_the_cpu_hook(tmp_path: Path) -> None:
    spec = hetero_spec(tmp_path)
    chosen = resolve("emulate", "instance", "gpu-job", HOSTS, NO_GPU)
    plan = make_plan(spec, "gpu-job", hardware=chosen)
    cpu, gpu = plan.host("algo-1").container, plan.host("algo-2").container
    g5 = instance_types.lookup("ml.g5.12xlarge")
    assert g5 is not None
    assert gpu.environment[hardware.GPUS_VARIABLE] == ",".join(chosen.devices["algo-2"])
    assert gpu.environment[hardware.GPU_MODEL_VARIABLE] == g5.gpu_model
    assert gpu.environment[hardware.GPU_MEMORY_VARIABLE] == str(int(g5.gpu_memory_gib * 1024 // g5.gpus))
    assert gpu.environment[hardware.CPUS_VARIABLE] == str(g5.vcpus)
    assert gpu.environment["PYTHONPATH"] == hooks.TARGET
    assert {m.target for m in gpu.mounts} >= {hooks.NVIDIA_SMI_TARGET, hooks.TARGET}
    assert all(m.read_only for m in gpu.mounts if m.target in (hooks.NVIDIA_SMI_TARGET, hooks.TARGET))
    assert gpu.gpus == ()  # emulated: no device is asked of the engine
    # The CPU host: its vCPUs, no GPU.
    assert hardware.GPUS_VARIABLE not in cpu.environment
    assert hooks.NVIDIA_SMI_TARGET not in {m.target for m in cpu.mounts}
    assert cpu.environment[hardware.CPUS_VARIABLE] == "72"
    assert "CUDA_VISIBLE_DEVICES" not in gpu.environment  # the service leaves it unset


def test_the_cpu_hook_goes_before_the_specs_own_pythonpath(tmp_path: Path) -> None:
    spec = hetero_spec(tmp_path, environment={"PYTHONPATH": "/opt/mine"})
    plan = make_plan(spec, "gpu-job", hardware=Hardware(cpus="instance"))
    assert plan.host("algo-1").container.environment["PYTHONPATH"] == f"{hooks.TARGET}:/opt/mine"


def test_cpus_machine_and_no_gpus_add_nothing(tmp_path: Path) -> None:
    spec = hetero_spec(tmp_path)
    plain = make_plan(spec, "gpu-job")
    chosen = make_plan(spec, "gpu-job", hardware=Hardware(gpus="none", cpus="machine"))
    assert plain.hosts == chosen.hosts and chosen.hook_dir is None


def test_staging_copies_the_hook_files_the_hosts_mount(tmp_path: Path) -> None:
    from emulator.run import staging

    spec = hetero_spec(tmp_path)
    plan = make_plan(spec, "gpu-job", hardware=resolve("emulate", "instance", "gpu-job", HOSTS, NO_GPU))
    staging.stage(plan)
    assert plan.hook_dir is not None
    for mount in plan.host("algo-2").container.mounts:
        if mount.target == hooks.NVIDIA_SMI_TARGET:
            assert Path(mount.source).read_bytes() == hooks.SOURCES["nvidia-smi"].read_bytes()
            assert Path(mount.source).stat().st_mode & 0o111
    assert (Path(plan.hook_dir) / "sitecustomize.py").is_file()


# --------------------------------------------------------------------------------------------------
# Real GPUs: what the engines and compose are asked


def real_plan(tmp_path: Path, machine: Machine = FOUR_GPUS, mode: hardware_modes.GpuMode = "real") -> object:
    spec = hetero_spec(tmp_path, instance_groups=[
        {"instance_group_name": "data", "instance_type": "ml.c5.18xlarge", "instance_count": 1},
        {"instance_group_name": "dnn", "instance_type": "ml.g5.2xlarge", "instance_count": 2}])
    hosts = [("algo-1", "ml.c5.18xlarge"), ("algo-2", "ml.g5.2xlarge"), ("algo-3", "ml.g5.2xlarge")]
    return make_plan(spec, "gpu-job", hardware=resolve(mode, "instance", "gpu-job", hosts, machine))


def test_docker_is_asked_for_each_hosts_gpus_by_device_id(tmp_path: Path) -> None:
    plan = real_plan(tmp_path)
    asked = {}
    for host in plan.hosts:  # type: ignore[attr-defined]
        requests = container_options(host.container, "net", {}, "driver").host_config["device_requests"]
        asked[host.name] = None if requests is None else [(r["Driver"], r["DeviceIDs"], r["Capabilities"])
                                                          for r in requests]
    assert asked == {"algo-1": None,
                     "algo-2": [("nvidia", ["0"], [["gpu", "compute", "utility"]])],
                     "algo-3": [("nvidia", ["1"], [["gpu", "compute", "utility"]])]}


def test_the_compose_project_asks_for_the_same_device_ids(tmp_path: Path) -> None:
    plan = real_plan(tmp_path)
    services = compose_project(plan)["services"]  # type: ignore[arg-type]
    assert "deploy" not in services["algo-1"]
    devices = {name: services[name]["deploy"]["resources"]["reservations"]["devices"] for name in ("algo-2", "algo-3")}
    assert devices == {"algo-2": [{"driver": "nvidia", "device_ids": ["0"], "capabilities": ["gpu", "compute",
                                                                                              "utility"]}],
                       "algo-3": [{"driver": "nvidia", "device_ids": ["1"], "capabilities": ["gpu", "compute",
                                                                                              "utility"]}]}


def test_the_compose_file_of_a_shared_gpu_asks_for_it_on_both_hosts(tmp_path: Path) -> None:
    plan = real_plan(tmp_path, Machine(8, 64 * GIB, gpu_runtime=True, gpus=("0",)), mode="share")
    services = compose_project(plan)["services"]  # type: ignore[arg-type]
    ids = [services[n]["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] for n in ("algo-2", "algo-3")]
    assert ids == [["0"], ["0"]]


def test_a_swarm_service_reserves_its_hosts_gpu_count(tmp_path: Path) -> None:
    plan = real_plan(tmp_path)
    options = service_options(plan.host("algo-2").container, "net", "img", "driver", 10)  # type: ignore[attr-defined]
    resources = options["task_template"]["Resources"]["Reservations"]["GenericResources"]
    assert resources == [{"DiscreteResourceSpec": {"Kind": GPU_RESOURCE, "Value": 1}}]


def test_swarm_places_gpu_hosts_on_nodes_that_advertise_enough_gpus() -> None:
    nodes = [Node("n1", "cpu-node", {}), Node("n2", "gpu-node", {}, gpus=8)]
    chosen = spread([("a1", ()), ("a2", ()), ("a3", ())], nodes, {"a2": 4, "a3": 4})
    assert chosen["a2"] == chosen["a3"] == "n2"
    with pytest.raises(EnvironmentProblem, match="no ready node of the swarm has the 9 GPUs a2 needs") as info:
        spread([("a2", ())], nodes, {"a2": 9})
    assert "node-generic-resources" in (info.value.hint or "")


def test_a_swarm_node_advertises_its_gpus_as_generic_resources() -> None:
    node = {"ID": "abcdef1234567890", "Description": {"Resources": {"GenericResources": [
        {"NamedResourceSpec": {"Kind": "NVIDIA-GPU", "Value": "GPU-1"}},
        {"DiscreteResourceSpec": {"Kind": "NVIDIA-GPU", "Value": 2}},
        {"DiscreteResourceSpec": {"Kind": "SSD", "Value": 1}}]}}}
    assert node_gpus(node) == ("GPU-1", "abcdef123456:0", "abcdef123456:1")


def test_the_docker_engines_machine_comes_from_docker_info_and_nvidia_smi() -> None:
    info = {"NCPU": 2, "MemTotal": 24 * GIB, "Runtimes": {"runc": {}}}
    bare = machine_of(info, lambda name: None, lambda: ("0",))
    assert bare == Machine(2, 24 * GIB)  # no runtime: nvidia-smi is not even asked
    registered = machine_of({**info, "Runtimes": {"runc": {}, "nvidia": {}}}, lambda name: None, lambda: ("0", "1"))
    assert registered.gpu_runtime and registered.gpus == ("0", "1")
    hooked = machine_of(info, lambda name: "/usr/bin/" + name, lambda: ())
    assert hooked.gpu_runtime and hooked.gpus == ()


# --------------------------------------------------------------------------------------------------
# The runner: refusals before anything starts, and what the machine cannot give


def test_too_few_gpus_is_refused_before_any_host_is_created(tmp_path: Path) -> None:
    backend = FakeBackend(machine=Machine(8, 64 * GIB, gpu_runtime=True, gpus=("0", "1")))
    with pytest.raises(EnvironmentProblem) as info:
        run_job(hetero_spec(tmp_path), RunOptions(gpus="real"), backend=backend, reporter=RecordingReporter())
    assert info.value.message == "the job needs 8 GPUs (algo-2 4, algo-3 4); this machine has 2"
    assert "--gpus share" in (info.value.hint or "")
    assert "create_container" not in backend.call_names()
    assert not (tmp_path / "out" / "gpu-job").exists()


def test_real_gpus_on_an_engine_without_a_runtime_name_what_to_install(tmp_path: Path) -> None:
    backend = FakeBackend()
    with pytest.raises(EnvironmentProblem) as info:
        run_job(hetero_spec(tmp_path), RunOptions(gpus="real"), backend=backend, reporter=RecordingReporter())
    assert info.value.message == "--gpus real: the Docker engine has no GPU runtime (NVIDIA's container toolkit)"
    assert "nvidia-ctk runtime configure" in (info.value.hint or "")
    assert "create_container" not in backend.call_names()


def test_the_specs_gpus_is_used_unless_the_run_says_otherwise(tmp_path: Path) -> None:
    spec = hetero_spec(tmp_path, gpus="emulate")
    assert choose_hardware(spec, RunOptions(), "gpu-job", None, NO_GPU).gpus == "emulate"
    assert choose_hardware(spec, RunOptions(gpus="none"), "gpu-job", None, NO_GPU).gpus == "none"


def test_a_spec_with_an_unknown_gpus_word_is_invalid(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        hetero_spec(tmp_path, gpus="yes")
    assert [p.path for p in info.value.problems] == ["gpus"]


def test_what_the_machine_cannot_give_is_said_once_and_kept_in_job_json(tmp_path: Path) -> None:
    reporter = RecordingReporter()
    spec = hetero_spec(tmp_path, instance_groups=[
        {"instance_group_name": "data", "instance_type": "ml.c5.18xlarge", "instance_count": 1},
        {"instance_group_name": "dnn", "instance_type": "ml.p4d.24xlarge", "instance_count": 2}])
    result = run_job(spec, RunOptions(gpus="emulate"), backend=FakeBackend(), reporter=reporter)
    notes = [line for line in reporter.infos if line.startswith("this machine cannot give")]
    warned = [w for w in reporter.warnings if w.startswith("this machine cannot give")]
    assert len(notes) == 2 and len(warned) == 1, (notes, warned)
    (memory, cpus), (cuda,) = notes, warned
    assert "ml.c5.18xlarge 144, ml.p4d.24xlarge 1152 GiB per host; it has 24 GiB for every host" in memory
    assert "ml.c5.18xlarge 72" in cpus and "ml.p4d.24xlarge 96" in cpus and "2 cores" in cpus
    assert "CUDA" in cuda and "torch.cuda.is_available() is False" in cuda
    described = json.loads((result.job_dir / "job.json").read_text())["Emulator"]["Hardware"]
    assert described["Gpus"] == "emulate" and described["Cpus"] == "instance"
    assert described["Notes"] == [*notes, *warned]
    assert sorted(described["GpuDevices"]) == ["algo-2", "algo-3"]


def test_a_gpu_type_without_gpus_says_so_once_with_the_way_to_emulate(tmp_path: Path) -> None:
    reporter = RecordingReporter()
    run_job(hetero_spec(tmp_path), RunOptions(cpus="machine"), backend=FakeBackend(), reporter=reporter)
    gpu_notes = [line for line in reporter.infos + reporter.warnings if "GPU" in line]
    assert len(gpu_notes) == 1 and "--gpus emulate" in gpu_notes[0] and "ml.g5.12xlarge" in gpu_notes[0]


# --------------------------------------------------------------------------------------------------
# The command line


def test_the_cli_refuses_an_unknown_gpus_word_with_exit_code_2(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({"image_uri": "x", "instance_groups": [
        {"instance_group_name": "g", "instance_type": "ml.c5.xlarge", "instance_count": 1}]}))
    result = invoke("run", spec, "--gpus", "lots")
    assert result.returncode == 2
    assert "--gpus: 'lots' is not a GPU mode: use one of auto, none, emulate, real, share" in result.stderr
    assert "Traceback" not in result.stderr


def test_render_writes_the_emulated_gpus_into_plan_json_and_the_compose_file(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print(1)\n")
    spec.write_text(yaml.safe_dump({"entry_point": "train.py", "source_dir": "code", "job_name": "rendered",
                                    "instance_groups": [{"instance_group_name": "g", "instance_type": "ml.p3.8xlarge",
                                                         "instance_count": 1}]}))
    result = invoke("render", spec, "-o", tmp_path / "out", "--gpus", "emulate")
    assert result.returncode == 0, result.stderr
    assert "gpus     emulated GPUs (no CUDA): algo-1 4" in result.stdout
    composed = yaml.safe_load((tmp_path / "out" / "compose.yaml").read_text())["services"]["algo-1"]
    assert composed["environment"][hardware.GPUS_VARIABLE].count("GPU-") == 4
    assert any(v.endswith(":" + hooks.NVIDIA_SMI_TARGET + ":ro") for v in composed["volumes"])


# --------------------------------------------------------------------------------------------------
# The toolkit's MPI worker that misses orted


WAITING_LOG = b"... Starting MPI run as worker node.\n... Waiting for MPI process to finish.\n"


def test_a_worker_that_never_saw_orted_is_told_a_few_seconds_after_the_leader_succeeded() -> None:
    watch = WorkerWait("short-job", "algo-1", ["algo-2"])
    logs = {"algo-1": b"", "algo-2": WAITING_LOG}
    assert watch.poll(10.0, {}, logs.__getitem__) is None  # the leader still runs
    assert watch.poll(10.0, {"algo-1": 0}, logs.__getitem__) is None  # it just ended: give orted a moment
    told = watch.poll(13.5, {"algo-1": 0}, logs.__getitem__)
    assert told is not None
    assert told.startswith("algo-2 still waits for MPI's orted process, although mpirun on algo-1 has succeeded")
    for said in ("20 minutes", "TypeError: 'NoneType' object is not iterable", "the service runs the same",
                 "time.sleep(5)", "hetero-emu stop short-job"):
        assert said in told
    assert watch.poll(20.0, {"algo-1": 0}, logs.__getitem__) is None  # once


def test_a_worker_is_told_as_soon_as_mpirun_succeeded_not_when_the_leader_exits_30_s_later() -> None:
    watch = WorkerWait("j", "algo-1", ["algo-2"])
    logs = {"algo-1": b"... Begin writing status file from leader node to worker nodes (if any)\n",
            "algo-2": WAITING_LOG}
    assert watch.poll(5.0, {}, logs.__getitem__) is None
    assert watch.poll(8.5, {}, logs.__getitem__) is not None


def test_a_worker_that_found_orted_or_a_failed_leader_is_not_told() -> None:
    found = WAITING_LOG + b"... Orted process found [psutil.Process(pid=42, name='orted')]\n"
    assert WorkerWait("j", "algo-1", ["algo-2"]).poll(60.0, {"algo-1": 0}, lambda h: found) is None
    failed = WorkerWait("j", "algo-1", ["algo-2"])
    assert failed.poll(0.0, {"algo-1": 1}, lambda h: WAITING_LOG) is None
    assert failed.poll(60.0, {"algo-1": 1}, lambda h: WAITING_LOG) is None
