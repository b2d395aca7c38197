"""A requirements.txt on a framework stand-in of another Python, resolved as pip would for the Python
the job names (emulator/run/wheelhouse.py, emulator/backend/index_container.py; docs/images.md).

Which jobs ask for it (a stand-in whose Python was substituted, never the default image, a real AWS
image or a mapped one); the cache key and the hosts' PIP_CONSTRAINT; and the resolving script's
decisions, run here by this Python against a fake `pip` module that answers from a scenario (its
reports are pip's `--report` JSON): the versions chosen for the named Python kept as constraints, a
chosen version that does not install on the image's Python dropped and said with what pip took
instead, no resolution for the named Python, a conflict and a failed build each falling back to the
image's Python, said. Then how the script's lines are said to the user.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from emulator.backend import pip_output
from emulator.backend.index_container import _RESOLVE
from emulator.defaults import DEFAULT_IMAGE
from emulator.jobspec import JobSpec
from emulator.planning import wheelhouse_mount
from emulator.planning.plan import make_plan
from emulator.run import wheelhouse
from emulator.training_images.ecr_images import python_note, with_image

PY38 = "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:1.11.0-gpu-py38"
STAND_IN = "hetero-emu/pytorch-training:1.11.0-py39"
KEEP = ("torch==1.11.0", "torchaudio==0.11.0", "torchvision==0.12.0")


@pytest.fixture
def with_requirements(project: Path) -> Path:
    requirements = project / "code" / "requirements.txt"
    requirements.write_text("transformers\n")
    return requirements


def stand_in_spec(spec: JobSpec, image: str = PY38, table: dict[str, str] | None = None,
                  present: Callable[[str], bool] = lambda name: False) -> JobSpec:
    return with_image(replace(spec, image_uri=image), table or {}, present)


# --------------------------------------------------------------------------------------------------
# Which jobs resolve as for another Python


def test_a_py38_stand_in_resolves_its_requirements_as_for_python_3_8(
    load: Callable[[dict[str, Any]], JobSpec], valid_raw: dict[str, Any], with_requirements: Path
) -> None:
    spec = stand_in_spec(load(valid_raw))
    assert spec.image_uri == STAND_IN and spec.requirements is not None
    assert (spec.requirements.as_python, spec.requirements.keep, spec.requirements.core) == ("3.8", KEEP, KEEP)
    note = "pytorch 1.11.0 py38: running on Python 3.9 (Debian has no 3.8); requirements.txt resolved as for Python 3.8"
    assert spec.image_notes[1] == note and python_note(spec) == note
    # Its own wheelhouse (the file resolved for 3.9 is another), and the hosts' pip honours the choice.
    plan = make_plan(spec, "job-1", wheel_cache=Path("/cache"))
    assert plan.wheelhouse is not None and "-as-py38-" in plan.wheelhouse
    assert plan.hosts[0].container.environment["PIP_CONSTRAINT"] == "/opt/hetero-emu/wheelhouse/constraints.txt"


def test_without_a_requirements_txt_the_note_says_only_the_python(
    load: Callable[[dict[str, Any]], JobSpec], valid_raw: dict[str, Any]
) -> None:
    spec = stand_in_spec(load(valid_raw))
    assert spec.requirements is None
    assert python_note(spec) == spec.image_notes[1] == "pytorch 1.11.0 py38: running on Python 3.9 (Debian has no 3.8)"


@pytest.mark.parametrize("case", ["default image", "real image", "mapped", "same python", "bare py3"])
def test_other_images_resolve_for_their_own_python(
    load: Callable[[dict[str, Any]], JobSpec], valid_raw: dict[str, Any], with_requirements: Path, case: str
) -> None:
    base = load(valid_raw)
    spec = {
        "default image": lambda: stand_in_spec(base, DEFAULT_IMAGE),
        # The engine has AWS's own image under that name: it runs as it is, on its own Python 3.8.
        "real image": lambda: stand_in_spec(base, present=lambda name: name == PY38),
        "mapped": lambda: stand_in_spec(base, table={"pytorch-training": "mine/torch:1"}),
        "same python": lambda: stand_in_spec(base, PY38.replace("pytorch", "tensorflow").replace("1.11.0-gpu-py38",
                                                                                                  "2.9.2-gpu-py39")),
        "bare py3": lambda: stand_in_spec(base, PY38.replace("1.11.0-gpu-py38", "1.8.1-gpu-py3")),
    }[case]()
    assert spec.requirements is not None
    assert (spec.requirements.as_python, spec.requirements.keep) == (None, ())
    plan = make_plan(spec, "job-1", wheel_cache=Path("/cache"))
    assert "PIP_CONSTRAINT" not in plan.hosts[0].container.environment
    assert plan.wheelhouse is not None and "-as-py" not in plan.wheelhouse
    assert (python_note(spec) is None) == (case != "bare py3")


def test_the_cache_key_names_the_python_resolved_for() -> None:
    digest = hashlib.sha256(b"transformers\n").hexdigest()
    key = wheelhouse_mount.cache_key(digest, STAND_IN)
    assert wheelhouse_mount.cache_key(digest, STAND_IN, as_python="3.8") == f"{key}-as-py38"
    # What it was resolved keeping is part of it: a layer allowed to move is another resolution.
    held = wheelhouse_mount.cache_key(digest, STAND_IN, as_python="3.8", kept=(*KEEP, "", *KEEP))
    assert held.startswith(f"{key}-as-py38-") and held != wheelhouse_mount.cache_key(
        digest, STAND_IN, as_python="3.8", kept=(*KEEP, "datasets==1.16.1", "", *KEEP))


def test_ensure_asks_the_build_to_resolve_as_for_and_routes_its_warnings(tmp_path: Path) -> None:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "requirements.txt").write_text("transformers\n")
    requirements = wheelhouse.Requirements(str(tmp_path / "code"), False, "0" * 64, as_python="3.8", keep=KEEP)
    asked: list[dict[str, Any]] = []

    def build(code: Path, out: Path, progress: Callable[[str], None], shown: str) -> None:
        asked.append(json.loads((out / wheelhouse.AS_FOR_FILE).read_text()))
        progress("requirements.txt: for Python 3.8 pip chooses transformers==4.46.3")
        progress(pip_output.WARNING + "requirements.txt: x==1, pip's choice for Python 3.8, does not install")
        (out / wheelhouse_mount.CONSTRAINTS).write_text("transformers==4.46.3\n")

    infos: list[str] = []
    warnings: list[str] = []
    target = tmp_path / "cache" / "key"
    assert wheelhouse.ensure(requirements, target, "sha256:x", infos.append, build, warn=warnings.append)
    assert asked == [{"python": "3.8", "keep": list(KEEP), "core": []}]
    assert "requirements.txt: for Python 3.8 pip chooses transformers==4.46.3" in infos
    assert warnings == ["requirements.txt: x==1, pip's choice for Python 3.8, does not install"]
    infos.clear()
    assert not wheelhouse.ensure(requirements, target, "sha256:x", infos.append, build, warn=warnings.append)
    assert infos == [f"requirements.txt: wheels cached in {target} (resolved as for Python 3.8)"]


# --------------------------------------------------------------------------------------------------
# The resolving script's decisions, against a fake pip

FAKE_PIP = r'''
import json, os, sys
scenario = json.load(open(os.environ["FAKE_PIP"]))
args = [a for a in sys.argv[1:] if a != "--disable-pip-version-check"]
lines = open(os.environ["PIP_CONSTRAINT"]).read().split()
pinned = dict(line.split("==") for line in lines if "==" in line)
with open(os.environ["FAKE_PIP_LOG"], "a") as log:
    log.write(json.dumps({"args": args, "constraints": lines}) + "\n")

def item(name, version):
    sdist = "%s==%s" % (name, version) in scenario.get("sdist", [])
    return {"metadata": {"name": name, "version": version},
            "download_info": {"url": "https://files.example/%s-%s.%s" % (name, version, "tar.gz" if sdist else "whl")}}

if args[0] == "install" and "--no-deps" in args:  # does this one version install here at all?
    sys.exit(1 if args[-1] in scenario.get("not_here", []) else 0)
if args[0] == "install":
    if "--python-version" in args:
        if scenario.get("as_for") is None or set(scenario.get("as_for_fails_holding", [])) & set(lines):
            print("ERROR: No matching distribution found for onlysdist")
            sys.exit(1)
        versions = scenario["as_for"]
    else:
        chosen = {n: v for n, v in pinned.items() if n in scenario["here"]}
        if any("%s==%s" % p in scenario.get("not_here", []) for p in chosen.items()) or (
                chosen and scenario.get("conflict")):
            print("ERROR: ResolutionImpossible")
            sys.exit(1)
        versions = {**scenario["here"], **chosen}
    report = args[args.index("--report") + 1]
    json.dump({"install": [item(n, v) for n, v in versions.items()]}, open(report, "w"))
    sys.exit(0)
if args[0] == "wheel":
    out = args[args.index("-w") + 1]
    wanted = args[args.index("-w") + 2:]
    if any(w in scenario.get("build_fails", []) for w in wanted):
        print("ERROR: Failed building wheel for " + wanted[0])
        sys.exit(1)
    for w in wanted:
        open(os.path.join(out, "%s-%s-py3-none-any.whl" % tuple(w.split("=="))), "w").close()
    sys.exit(0)
sys.exit(0)
'''


def resolve(tmp_path: Path, scenario: dict[str, Any], as_for: bool = True,
            core: tuple[str, ...] | None = None) -> tuple[int, list[str], Path]:
    """Run the resolving script as the image's Python would, with the fake pip: its exit code, its
    lines, the wheelhouse it wrote."""
    fake = tmp_path / "fake"
    (fake / "pip").mkdir(parents=True)
    (fake / "pip" / "__init__.py").write_text("")
    (fake / "pip" / "__main__.py").write_text(FAKE_PIP)
    (tmp_path / "scenario.json").write_text(json.dumps(scenario))
    code, out = tmp_path / "code", tmp_path / "out"
    code.mkdir()
    out.mkdir()
    (code / "requirements.txt").write_text("transformers\n")
    if as_for:
        keep = list(KEEP) + (["datasets==1.16.1"] if core is not None else [])
        (out / wheelhouse.AS_FOR_FILE).write_text(json.dumps({"python": "3.8", "keep": keep,
                                                              **({"core": list(core)} if core is not None else {})}))
    env = {**os.environ, "PYTHONPATH": str(fake), "FAKE_PIP": str(tmp_path / "scenario.json"),
           "FAKE_PIP_LOG": str(tmp_path / "pip.log")}
    done = subprocess.run([sys.executable, "-c", _RESOLVE, str(out), "0"], cwd=code, env=env, capture_output=True,
                          text=True, timeout=60)
    return done.returncode, done.stdout.splitlines(), out


def pip_calls(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp_path / "pip.log").read_text().splitlines()]


def wheels(out: Path) -> list[str]:
    return sorted(p.name for p in out.glob("*.whl"))


def constraints(out: Path) -> list[str]:
    return [line for line in (out / wheelhouse_mount.CONSTRAINTS).read_text().splitlines() if not line.startswith("#")]


FOR_38 = {"transformers": "4.46.3", "tokenizers": "0.20.3"}
FOR_39 = {"transformers": "4.57.1", "tokenizers": "0.22.1"}


def test_the_versions_chosen_for_the_named_python_are_installed_and_honoured(tmp_path: Path) -> None:
    code, lines, out = resolve(tmp_path, {"as_for": FOR_38, "here": FOR_39})
    assert code == 0, lines
    assert "ASFOR 3.8 " + " ".join(KEEP) in lines
    assert "ASFOR_CHOSEN transformers==4.46.3 tokenizers==0.20.3" in lines
    first, second = pip_calls(tmp_path)[:2]
    # pip chose for 3.8 from wheels alone, the framework pins kept; then on this Python with the choices.
    assert first["args"][first["args"].index("--python-version") + 1] == "3.8"
    assert "--only-binary=:all:" in first["args"]
    assert set(KEEP) <= set(first["constraints"])
    assert {"transformers==4.46.3", "tokenizers==0.20.3"} <= set(second["constraints"])
    assert wheels(out) == ["tokenizers-0.20.3-py3-none-any.whl", "transformers-4.46.3-py3-none-any.whl"]
    assert constraints(out) == [*KEEP, "transformers==4.46.3", "tokenizers==0.20.3"]


def test_a_chosen_version_that_does_not_install_here_is_chosen_for_this_python(tmp_path: Path) -> None:
    code, lines, out = resolve(tmp_path, {"as_for": FOR_38, "here": FOR_39, "not_here": ["tokenizers==0.20.3"]})
    assert code == 0, lines
    assert "ASFOR_NOT_HERE tokenizers==0.20.3 0.22.1" in lines
    assert wheels(out) == ["tokenizers-0.22.1-py3-none-any.whl", "transformers-4.46.3-py3-none-any.whl"]
    assert constraints(out) == [*KEEP, "transformers==4.46.3"]


def test_a_layer_pin_the_file_needs_moved_moves_the_framework_pins_stay(tmp_path: Path) -> None:
    # A Hugging Face image's datasets==1.16.1 held, the file's datasets==2.12.0 has no resolution for 3.8:
    # pip on the service would upgrade datasets, so it may move; torch and its companions stay.
    code, lines, out = resolve(tmp_path, {"as_for": FOR_38, "here": FOR_39,
                                          "as_for_fails_holding": ["datasets==1.16.1"]}, core=KEEP)
    assert code == 0, lines
    assert "ASFOR_LAYER_MOVES datasets==1.16.1" in lines and "ASFOR_NONE" not in lines
    first, second = pip_calls(tmp_path)[:2]
    assert "datasets==1.16.1" in first["constraints"] and "datasets==1.16.1" not in second["constraints"]
    assert set(KEEP) <= set(second["constraints"])
    assert constraints(out) == [*KEEP, "transformers==4.46.3", "tokenizers==0.20.3"]
    said = pip_output.ResolveLines("img", lambda _: None)
    said("ASFOR 3.8 x")
    assert said._said("ASFOR_LAYER_MOVES", ["datasets==1.16.1"]) == (
        "requirements.txt: with datasets==1.16.1 kept, pip finds no resolution for Python 3.8; it lets them move, "
        "as pip on the service upgrades what the file asks to")


def test_no_resolution_for_the_named_python_falls_back_to_this_one(tmp_path: Path) -> None:
    code, lines, out = resolve(tmp_path, {"as_for": None, "here": FOR_39})
    assert code == 0, lines
    assert lines.index("ASFOR_NONE") < lines.index("RESOLVE")
    assert wheels(out) == ["tokenizers-0.22.1-py3-none-any.whl", "transformers-4.57.1-py3-none-any.whl"]
    assert constraints(out) == []  # the hosts' pip is held to nothing it was not resolved with


def test_choices_that_conflict_here_fall_back_to_this_python(tmp_path: Path) -> None:
    code, lines, out = resolve(tmp_path, {"as_for": FOR_38, "here": FOR_39, "conflict": True})
    assert code == 0, lines
    assert lines.index("ASFOR_CONFLICT") < lines.index("RESOLVE")
    assert wheels(out) == ["tokenizers-0.22.1-py3-none-any.whl", "transformers-4.57.1-py3-none-any.whl"]
    assert constraints(out) == []


def test_a_chosen_version_that_does_not_build_here_falls_back_to_this_python(tmp_path: Path) -> None:
    scenario = {"as_for": FOR_38, "here": FOR_39, "sdist": ["tokenizers==0.20.3"],
                "build_fails": ["tokenizers==0.20.3"]}
    code, lines, out = resolve(tmp_path, scenario)
    assert code == 0, lines
    assert "SDIST tokenizers==0.20.3 as-for" in lines
    assert lines.index("ASFOR_BUILD_FAILED") < lines.index("RESOLVE")
    assert wheels(out) == ["tokenizers-0.22.1-py3-none-any.whl", "transformers-4.57.1-py3-none-any.whl"]
    assert constraints(out) == []


def test_without_the_request_the_script_resolves_for_its_own_python_only(tmp_path: Path) -> None:
    code, lines, out = resolve(tmp_path, {"as_for": FOR_38, "here": FOR_39}, as_for=False)
    assert code == 0, lines
    assert not any(line.startswith("ASFOR") for line in lines)
    assert all("--python-version" not in call["args"] for call in pip_calls(tmp_path))
    assert wheels(out) == ["tokenizers-0.22.1-py3-none-any.whl", "transformers-4.57.1-py3-none-any.whl"]
    assert not (out / wheelhouse_mount.CONSTRAINTS).exists()


# --------------------------------------------------------------------------------------------------
# What the user reads of it


def test_the_scripts_lines_are_said_with_the_pythons_named() -> None:
    said: list[str] = []
    lines = pip_output.ResolveLines(STAND_IN, said.append)
    for text in ["PYTHON 3.9", "ASFOR 3.8 torch==1.11.0", "Collecting transformers",
                 "ASFOR_CHOSEN transformers==4.46.3 tokenizers==0.20.3", "ASFOR_NOT_HERE tokenizers==0.20.3 0.22.1",
                 "ASFOR_NOT_HERE backports.zoneinfo==0.2.1 -", "SDIST regex==2024.11.6 as-for", "FETCH 2"]:
        lines(text)
    warning = pip_output.WARNING
    assert said == [
        f"requirements.txt: pip of {STAND_IN} (Python 3.9) decides what the image lacks",
        "requirements.txt: pip chooses the versions as for Python 3.8, the job's (the image runs 3.9), keeping "
        "torch==1.11.0",
        "  Collecting transformers",
        "requirements.txt: for Python 3.8 pip chooses transformers==4.46.3, tokenizers==0.20.3",
        f"{warning}requirements.txt: tokenizers==0.20.3, pip's choice for Python 3.8, does not install on Python 3.9: "
        "tokenizers==0.22.1, pip's choice for Python 3.9, instead",
        f"{warning}requirements.txt: backports.zoneinfo==0.2.1, pip's choice for Python 3.8, does not install on "
        "Python 3.9: Python 3.9 needs no backports.zoneinfo",
        "requirements.txt: regex==2024.11.6 (pip's choice for Python 3.8) has no wheel for Python 3.9: pip builds it "
        "from its source package (this can take minutes)",
        "requirements.txt: 2 package(s) to fetch",
    ]
    assert lines.lines == ["Collecting transformers"]
    for marker, words in [("ASFOR_NONE", "no resolution for Python 3.8 from wheels alone"),
                          ("ASFOR_CONFLICT", "do not resolve together on Python 3.9"),
                          ("ASFOR_BUILD_FAILED", "does not build on Python 3.9")]:
        lines(marker)
        assert said[-1].startswith(warning) and words in said[-1]
        assert said[-1].endswith("resolved for Python 3.9, the image's, instead")
    # What failed is the last resolution's: pip's lines before it are not a failure's.
    lines("RESOLVE")
    assert lines.lines == []
