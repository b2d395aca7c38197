"""compose-templates/: the template `render` fills, a user's own (`--compose-template FILE`), and the
errors a broken one gives.

The files under tests/unit/golden/compose/<case>.yaml are the compose.yaml the code wrote before the
template existed (when compose.py built the document itself), for the plans of `CASES`, with the
test's folders written as <tmp> and the package's as <emulator>. The default template must give
exactly those bytes.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

import emulator
from emulator import api
from emulator import cli as cli_module
from emulator.cli import app
from emulator.errors import UsageError
from emulator.jobspec import JobSpec
from emulator.planning.compose import HOST_BLOCK, compose_yaml, default_template_path, load_template
from emulator.planning.debug_host import DebugTarget
from emulator.planning.hardware import Machine, resolve
from emulator.planning.plan import Plan, make_plan

GOLDEN = Path(__file__).parent / "golden" / "compose"
ROOT = Path(__file__).resolve().parents[2]
Load = Callable[[dict[str, Any]], JobSpec]


def _mpi(raw: dict[str, Any]) -> dict[str, Any]:
    raw["distribution"] = {"mpi": {"enabled": True, "processes_per_host": 2}, "instance_groups": ["dnn_group"]}
    # A secret (listed by name only, with the comment above it) and a `$` compose must take literally.
    raw["environment"] = {"API_TOKEN": "s3cr3t-value", "GREETING": "cost $5 or ${HOME}"}
    return {}


def _pipes(raw: dict[str, Any]) -> dict[str, Any]:
    raw["inputs"]["training"]["input_mode"] = "Pipe"
    return {}


def _debug(raw: dict[str, Any]) -> dict[str, Any]:
    return {"debug": DebugTarget("algo-2", 6000, wait=True)}


def _sharded(raw: dict[str, Any]) -> dict[str, Any]:
    raw["inputs"]["training"]["distribution"] = "ShardedByS3Key"
    raw["shm_size"] = "1g"
    return {"memory": "none"}


def _isolation(raw: dict[str, Any]) -> dict[str, Any]:
    raw["enable_network_isolation"] = True
    raw["container_entry_point"] = ["python3", "/opt/ml/code/train.py"]
    raw["container_arguments"] = ["--epochs", "2"]
    raw["checkpoint_local_path"] = "/checkpoints"
    return {"memory": 2 * 1024**3}


def _gpus(raw: dict[str, Any]) -> dict[str, Any]:
    # Real GPUs by device id on a machine with two: the p3.2xlarge host gets one; the vCPU hook on
    # every host.
    hosts = [("algo-1", "ml.c5.xlarge"), ("algo-2", "ml.c5.xlarge"), ("algo-3", "ml.p3.2xlarge")]
    machine = Machine(8, 64 * 1024**3, gpu_runtime=True, gpus=("0", "1"))
    return {"hardware": resolve("real", "instance", "hetero-test", hosts, machine)}


# case -> edits the spec's mapping in place and returns make_plan's extra arguments
CASES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "mpi": _mpi, "pipes": _pipes, "debug": _debug, "sharded": _sharded, "isolation": _isolation, "gpus": _gpus,
}


def case_plan(case: str, load: Load, valid_raw: dict[str, Any], tmp_path: Path) -> Plan:
    raw = copy.deepcopy(valid_raw)
    extra = CASES[case](raw)
    return make_plan(load(raw), "hetero-test", job_dir=tmp_path / "job", **extra)


def normalized(text: str, tmp_path: Path) -> str:
    """The file with the folders that differ per run (the test's, the package's) as fixed words."""
    return text.replace(str(tmp_path), "<tmp>").replace(str(Path(emulator.__file__).parent), "<emulator>")


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_default_template_gives_the_file_the_code_wrote(
    case: str, load: Load, valid_raw: dict[str, Any], tmp_path: Path
) -> None:
    written = normalized(compose_yaml(case_plan(case, load, valid_raw, tmp_path)), tmp_path)
    assert written == (GOLDEN / f"{case}.yaml").read_text()


def test_the_golden_files_cover_what_the_template_leaves_out_or_fills() -> None:
    # Guards the cases themselves: each optional key is both present and absent somewhere.
    services = {case: yaml.safe_load((GOLDEN / f"{case}.yaml").read_text())["services"] for case in CASES}
    every = [service for found in services.values() for service in found.values()]
    for key in ("entrypoint", "mem_limit", "ports", "deploy"):
        assert any(key in s for s in every) and any(key not in s for s in every), key
    networks = [yaml.safe_load((GOLDEN / f"{case}.yaml").read_text())["networks"]["job"] for case in CASES]
    assert any("driver_opts" in n for n in networks) and any("driver_opts" not in n for n in networks)
    texts = [(GOLDEN / f"{case}.yaml").read_text() for case in CASES]
    assert any("export API_TOKEN" in t for t in texts) and any("streamed by `hetero-emu run` only" in t for t in texts)
    assert any("$$5 or $${HOME}" in t for t in texts)


def test_the_default_template_is_the_top_level_file_of_the_checkout() -> None:
    assert default_template_path() == ROOT / "compose-templates" / "compose.yaml"
    assert load_template().source == str(ROOT / "compose-templates" / "compose.yaml")


def _user_template(tmp_path: Path, edit: Callable[[str], str]) -> Path:
    path = tmp_path / "my-compose.yaml"
    path.write_text(edit((ROOT / "compose-templates" / "compose.yaml").read_text()))
    return path


def test_a_user_templates_extra_keys_appear_in_the_output(
    load: Load, valid_raw: dict[str, Any], tmp_path: Path
) -> None:
    def edit(text: str) -> str:
        text = text.replace("    image: !host image\n",
                            "    image: !host image\n    restart: \"no\"\n    working_dir: /opt/ml/code\n"
                            "    logging: {driver: json-file, options: {max-size: 10m}}\n")
        text = text.replace("services:\n", "x-common: {owner: me}\nservices:\n  tensorboard:\n"
                            "    image: tensorflow/tensorflow\n    environment: {LOGDIR: \"${LOGDIR}\"}\n    "
                            "labels: {job: !plan job_name}\n")
        return text + "volumes:\n  scratch: {}\n"

    template = load_template(_user_template(tmp_path, edit))
    plan = case_plan("debug", load, valid_raw, tmp_path)
    document = yaml.safe_load(compose_yaml(plan, template))
    assert list(document["services"]) == ["tensorboard", "algo-1", "algo-2", "algo-3"]
    for host in ("algo-1", "algo-2", "algo-3"):
        service = document["services"][host]
        assert service["restart"] == "no" and service["working_dir"] == "/opt/ml/code"
        assert service["logging"] == {"driver": "json-file", "options": {"max-size": "10m"}}
        assert service["hostname"] == host
    # The user's own text is copied as written: their ${LOGDIR} stays for docker-compose to fill.
    assert document["services"]["tensorboard"] == {"image": "tensorflow/tensorflow",
                                                   "environment": {"LOGDIR": "${LOGDIR}"},
                                                   "labels": {"job": "hetero-test"}}
    assert document["x-common"] == {"owner": "me"} and document["volumes"] == {"scratch": {}}
    # Everything else is what the default template gives.
    default = yaml.safe_load(compose_yaml(plan))
    for host, service in default["services"].items():
        assert {k: v for k, v in document["services"][host].items()
                if k not in ("restart", "working_dir", "logging")} == service
    assert document["networks"] == default["networks"]


def test_a_user_template_may_leave_optional_keys_out(load: Load, valid_raw: dict[str, Any], tmp_path: Path) -> None:
    path = _user_template(tmp_path, lambda text: text.replace("    ulimits: !host ulimits\n", "")
                          .replace("    extra_hosts: !host extra_hosts\n", ""))
    document = yaml.safe_load(compose_yaml(case_plan("mpi", load, valid_raw, tmp_path), load_template(path)))
    assert all("ulimits" not in s and "extra_hosts" not in s for s in document["services"].values())


@pytest.mark.parametrize(("edit", "problem"), [
    (lambda text: text + "  bad: [unclosed\n", "not valid YAML"),
    (lambda text: text.replace("    image: !host image\n", ""), "lacks the required placeholder(s) !host image"),
    (lambda text: text.replace("    image: !host image\n", "    image: !host imgae\n"),
     "services.x-host.image: unknown placeholder !host imgae (did you mean 'image'?)"),
    (lambda text: text.replace("  x-host:\n", "  x-hosts:\n"), "no `x-host` service under `services`"),
    (lambda text: text.replace("    name: !plan network\n", "    name: !host hostname\n"),
     "networks.job.name: !host hostname outside `services.x-host`"),
    (lambda text: text.replace("    name: !plan network\n", "    name: !plan [network]\n"), "not valid YAML"),
    (lambda text: "- a list\n", "no `x-host` service under `services`"),
])
def test_a_broken_template_is_one_usage_error_naming_the_file_and_the_problem(
    edit: Callable[[str], str], problem: str, tmp_path: Path
) -> None:
    path = _user_template(tmp_path, edit)
    with pytest.raises(UsageError) as raised:
        load_template(path)
    assert raised.value.message.startswith(f"compose template {path}: ")
    assert problem in raised.value.message


def test_a_missing_template_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=f"compose template {tmp_path / 'nope.yaml'}: cannot be read"):
        load_template(tmp_path / "nope.yaml")


def test_render_writes_the_users_template_and_refuses_a_broken_one_before_writing(
    load: Load, valid_raw: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")  # render needs no engine
    spec = load(valid_raw)
    good = _user_template(tmp_path, lambda text: text.replace("    image: !host image\n",
                                                              "    image: !host image\n    restart: \"no\"\n"))
    api.render(spec, tmp_path / "out", compose_template=good)
    services = yaml.safe_load((tmp_path / "out" / "compose.yaml").read_text())["services"]
    assert {s["restart"] for s in services.values()} == {"no"}
    bad = _user_template(tmp_path, lambda text: text.replace(HOST_BLOCK, "x-nothing"))
    with pytest.raises(UsageError, match="no `x-host` service"):
        api.render(spec, tmp_path / "out2", compose_template=bad)
    assert not (tmp_path / "out2").exists()


def test_the_cli_takes_compose_template(
    write_spec: Callable[[dict[str, Any]], Path], valid_raw: dict[str, Any], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    spec = write_spec(valid_raw)
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")  # render needs no engine
    monkeypatch.setattr(cli_module.signal, "signal", lambda *args: None)  # leave pytest's handlers alone

    def render(template: Path, out: Path) -> tuple[int | str | None, str]:
        monkeypatch.setattr(sys, "argv", ["hetero-emu", "render", str(spec), "-o", str(out),
                                          "--compose-template", str(template)])
        with pytest.raises(SystemExit) as info:
            cli_module.main()
        return info.value.code, capsys.readouterr().err

    good = _user_template(tmp_path, lambda text: text.replace("    image: !host image\n",
                                                              "    image: !host image\n    restart: \"no\"\n"))
    code, err = render(good, tmp_path / "out")
    assert code in (0, None), err
    assert "restart: 'no'" in (tmp_path / "out" / "compose.yaml").read_text()
    bad = _user_template(tmp_path, lambda text: text + "  bad: [unclosed\n")
    code, err = render(bad, tmp_path / "out2")
    assert code == 2
    assert f"compose template {bad}: not valid YAML: line " in err
    assert not (tmp_path / "out2").exists()
    help_text = " ".join(CliRunner().invoke(app, ["render", "--help"], terminal_width=200).output.split())
    assert "--compose-template FILE" in help_text
