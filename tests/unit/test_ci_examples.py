"""examples/ci/: the GitHub workflow and the GitLab job agree with themselves (the cache holds the folder
the commands save into, the artifact is the folder pytest keeps failed tests in) and name only options
hetero-emu has. tests/integration/test_ci_workflow.py runs the GitHub workflow for real."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import yaml
from testkit import invoke

CI = Path(__file__).resolve().parents[2] / "examples" / "ci"


def load(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((CI / name).read_text())
    return doc


def hetero_emu_commands(script: str) -> list[list[str]]:
    """The `hetero-emu image ...` commands of a script, as argument lists (variables left as written)."""
    found = re.findall(r"hetero-emu (image [^;|&)}\n]*)", script)
    return [shlex.split(command.replace("$(", "")) for command in found]


def test_the_github_workflow_caches_the_folder_it_saves_into_and_keeps_the_failed_tests() -> None:
    doc = load("github-actions.yml")
    env, steps = doc["env"], doc["jobs"]["test"]["steps"]
    uses = {step["uses"].split("@")[0]: step for step in steps if "uses" in step}
    assert uses["actions/cache/restore"]["with"]["path"] == env["HETERO_EMU_IMAGES"]
    assert uses["actions/cache/save"]["with"]["path"] == env["HETERO_EMU_IMAGES"]
    assert "steps.images.outputs.key" in uses["actions/cache/restore"]["with"]["key"]
    assert uses["actions/upload-artifact"]["if"] == "failure()"
    assert uses["actions/upload-artifact"]["with"]["path"].rstrip("/") == env["HETERO_EMU_JOBS"]
    script = "\n".join(step.get("run", "") for step in steps)
    assert '--basetemp="$HETERO_EMU_JOBS" -o tmp_path_retention_policy=failed' in script
    assert {step.get("id") for step in steps} >= {"images", "cache"}


def test_the_gitlab_job_caches_the_folder_it_saves_into_and_keeps_the_failed_tests() -> None:
    job = load("gitlab-ci.yml")["training-tests"]
    variables = job["variables"]
    assert any(cache["paths"] == [variables["HETERO_EMU_IMAGES"] + "/"] and cache["when"] == "always"
               for cache in job["cache"])
    assert job["artifacts"] == {"when": "on_failure", "paths": [variables["HETERO_EMU_JOBS"] + "/"],
                                "expire_in": "1 week"}
    assert '--basetemp="$HETERO_EMU_JOBS" -o tmp_path_retention_policy=failed' in "\n".join(job["script"])


def test_every_hetero_emu_command_of_the_examples_is_one_it_has() -> None:
    scripts = ["\n".join(step.get("run", "") for step in load("github-actions.yml")["jobs"]["test"]["steps"]),
               "\n".join(load("gitlab-ci.yml")["training-tests"]["script"])]
    for script in scripts:
        commands = hetero_emu_commands(script)
        assert {c[1] for c in commands} == {"key", "load", "build", "save"}
        for command in commands:
            result = invoke(*command[:2], "--help")
            assert result.returncode == 0, command
            for option in (arg for arg in command[2:] if arg.startswith("--")):
                assert option in result.stdout, command
