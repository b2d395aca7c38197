"""Values as written (issue 7, part 5): what the user typed in the spec is what the container gets.

Environment values are strings of the scalar's source text; a hyperparameter whose YAML 1.1 reading
differs from its text in a way users do not expect is refused with a hint to quote it; YAML 1.2
floats (`1e-3`) are numbers. The container side is checked on the plan's files: the exact bytes of
hyperparameters.json and the environment each host's container is created with.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from emulator import Job
from emulator.errors import Problem
from emulator.jobspec import JobSpec, parse_yaml
from emulator.planning.plan import make_plan

HEAD = """\
job_name: values-as-written
entry_point: train.py
source_dir: code
instance_type: ml.c5.xlarge
instance_count: 2
"""

# The issue's table: what YAML 1.1 made of each environment value before.
ENVIRONMENT_TABLE = {
    "PY": ("3.10", "3.1"),
    "AT": ("12:30", "750"),
    "MODE": ("0755", "493"),
    "MASK": ("0x1F", "31"),
    "DEBUG": ("no", "false"),
    "CACHE": ("off", "false"),
    "LR": ("1e-3", None),
    "FLAG": ("true", None),
}


def _spec(env: dict[str, str] | None = None, hps: dict[str, str] | None = None) -> str:
    text = HEAD
    if env is not None:
        text += "environment:\n" + "".join(f"  {k}: {v}\n" for k, v in env.items())
    if hps is not None:
        text += "hyperparameters:\n" + "".join(f"  {k}: {v}\n" for k, v in hps.items())
    return text


def _container_view(spec: JobSpec) -> tuple[dict[str, str], dict[str, Any]]:
    """What algo-1's container gets: its environment, and hyperparameters.json decoded as the toolkit
    decodes it (json.loads of the file, then json.loads of each value: sagemaker_training/mapping.py)."""
    host = make_plan(spec, "values-as-written").hosts[0]
    document = json.loads(host.files["input/config/hyperparameters.json"])
    return dict(host.container.environment), {k: json.loads(v) for k, v in document.items()}


# --------------------------------------------------------------------------------------------------
# Environment


def test_the_issue_table_of_environment_values_reaches_the_container_as_written(
    load: Callable[[str], JobSpec],
) -> None:
    spec = load(_spec(env={name: text for name, (text, _) in ENVIRONMENT_TABLE.items()}))
    env, _ = _container_view(spec)
    for name, (text, before) in ENVIRONMENT_TABLE.items():
        assert env[name] == text, f"{name}: {env[name]!r}, written {text!r} (YAML 1.1 made it {before!r})"


@pytest.mark.parametrize(
    "text",
    ["True", "TRUE", "yes", "ON", "y", "n", "~x", "1_000", "+5", "-0", "0o17", "0b101", "1:2:3", ".5", ".inf",
     "-.inf", ".NaN", "2024-1-2", "2024-01-02 10:00:00", "1.", "007", "0.10", "1e+3", "12:30:00.5", "00"],
)
def test_any_plain_scalar_in_the_environment_is_its_source_text(text: str, load: Callable[[str], JobSpec]) -> None:
    assert load(_spec(env={"V": text})).environment["V"] == text


def test_quoted_and_block_environment_values_are_the_strings_they_denote(load: Callable[[str], JobSpec]) -> None:
    spec = load(HEAD + "environment:\n  A: '3.10'\n  B: \"tab\\there\"\n  C: |\n    two\n    lines\n  D: \"\"\n")
    assert dict(spec.environment) == {"A": "3.10", "B": "tab\there", "C": "two\nlines\n", "D": ""}


def test_explicitly_tagged_environment_value_is_still_its_text(load: Callable[[str], JobSpec]) -> None:
    assert load(_spec(env={"V": "!!int 0700"})).environment["V"] == "0700"


def test_environment_value_through_an_alias_and_a_merge_is_its_text(load: Callable[[str], JobSpec]) -> None:
    """An alias shares the node with another field: that field keeps its YAML reading."""
    text = HEAD.replace("instance_count: 2", "instance_count: &n 2") + (
        "environment:\n  <<: {PY: 3.10, MODE: 0755}\n  COUNT: *n\n")
    spec = load(text)
    assert dict(spec.environment) == {"PY": "3.10", "MODE": "0755", "COUNT": "2"}
    assert spec.instance_groups[0].instance_count == 2


@pytest.mark.parametrize(("value", "kind"), [("[a, b]", "list"), ("{a: 1}", "mapping"), ("null", "null"),
                                             ("", "null")])
def test_non_scalar_or_null_environment_value_is_still_an_error(
    value: str, kind: str, expect_problem: Callable[..., Problem]
) -> None:
    expect_problem(_spec(env={"V": value}), "environment.V", f"must be a string, number or boolean, got {kind}")


def test_python_api_environment_values_are_str_of_the_python_value(tmp_path: Path) -> None:
    """A Python value has no source text: numbers are str(), booleans lower-case as before."""
    (tmp_path / "train.py").write_text("")
    spec = Job(entry_point="train.py", instance_type="ml.c5.xlarge", base_dir=tmp_path,
               environment={"A": 3.10, "B": True, "C": "3.10"}).spec()
    assert dict(spec.environment) == {"A": "3.1", "B": "true", "C": "3.10"}


# --------------------------------------------------------------------------------------------------
# Hyperparameters: refused when YAML 1.1 reads them as something their text does not say


@pytest.mark.parametrize(
    ("text", "reading"),
    [
        ("3.10", "the number 3.1, which JSON writes without the trailing zero"),  # the issue's `version`
        ("0700", "the octal number 448"),  # the issue's `port`
        ("12:30", "the sexagesimal (base 60) number 750"),
        ("1:30.5", "the sexagesimal (base 60) number 90.5"),
        ("0755", "the octal number 493"),
        ("-010", "the octal number -8"),
        ("00", "the octal number 0"),
        ("0x1F", "the hexadecimal number 31"),
        ("0b101", "the binary number 5"),
        ("no", "the boolean false"),
        ("off", "the boolean false"),
        ("yes", "the boolean true"),
        ("On", "the boolean true"),
        ("NO", "the boolean false"),
        ("1.00", "the number 1.0, which JSON writes without the trailing zero"),
        ("0.50", "the number 0.5, which JSON writes without the trailing zero"),
        ("-2.10", "the number -2.1, which JSON writes without the trailing zero"),
    ],
)
def test_surprising_hyperparameter_is_refused_with_a_hint_to_quote_it(
    text: str, reading: str, expect_problem: Callable[..., Problem]
) -> None:
    problem = expect_problem(_spec(hps={"v": text}), "hyperparameters.v", f"{text} is read by YAML 1.1 as {reading}",
                             hint=f"quote it ('{text}')")
    assert "not as written" in problem.message


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1e-3", 0.001),  # the issue's: was the string "1e-3"
        ("1E5", 100000.0),
        ("-2e-3", -0.002),
        ("1.0e5", 100000.0),
        ("2.5E+2", 250.0),
        (".5", 0.5),
        ("-.5", -0.5),
        ("+.5", 0.5),
        ("1.0", 1.0),  # one zero after the point: json.dumps writes 1.0 back
        ("10.0", 10.0),
        ("1.", 1.0),
        ("0.1", 0.1),
        ("2.50e3", 2500.0),  # exponent notation: the text is not a version number
        ("1_000", 1000),  # as in Python: the number the text means
        ("0", 0),
        ("-7", -7),
        ("true", True),
        ("False", False),
        ("TRUE", True),
        ("y", "y"),  # PyYAML never read y/n as booleans: the text, as written
        ("n", "n"),
        ("09:30", "09:30"),  # not YAML 1.1 sexagesimal (leading zero): a string
        ("08", "08"),  # not octal: a string
        ("0099", "0099"),
        ("0o17", "0o17"),  # YAML 1.2 octal, a string in YAML 1.1: the text, as written
        ("'3.10'", "3.10"),
        ("'0700'", "0700"),
        ("\"no\"", "no"),
        ("!!int 0700", 448),  # an explicit tag asks for YAML's reading
        ("!!float 3.10", 3.1),
        ("null", None),
    ],
)
def test_hyperparameter_reaches_the_container_as_the_value_written(
    text: str, value: Any, load: Callable[[str], JobSpec]
) -> None:
    _, hps = _container_view(load(_spec(hps={"v": text})))
    assert hps["v"] == value and type(hps["v"]) is type(value)


def test_1e_minus_3_is_written_as_the_json_number(load: Callable[[str], JobSpec]) -> None:
    host = make_plan(load(_spec(hps={"lr": "1e-3", "version": "'3.10'", "port": "'0700'"})), "j").hosts[0]
    document = json.loads(host.files["input/config/hyperparameters.json"])
    assert document["lr"] == "0.001"  # the SDK's json.dumps(0.001)
    assert document["version"] == '"3.10"' and document["port"] == '"0700"'


def test_the_issue_table_of_hyperparameters_reports_every_problem_at_once(
    problems: Callable[[str], list[Problem]],
) -> None:
    found = problems(_spec(hps={"version": "3.10", "port": "0700", "lr": "1e-3"}))
    assert sorted(p.path for p in found) == ["hyperparameters.port", "hyperparameters.version"]


def test_surprise_nested_in_a_list_or_mapping_names_its_place(problems: Callable[[str], list[Problem]]) -> None:
    found = problems(_spec(hps={"layers": "[64, 0700, {act: off, keep: 'no'}]", "opts": "{v: 3.10, ok: 1.0}"}))
    assert sorted(p.path for p in found) == ["hyperparameters.layers[1]", "hyperparameters.layers[2].act",
                                             "hyperparameters.opts.v"]


def test_alias_shared_with_another_field_keeps_that_fields_reading(load: Callable[[str], JobSpec],
                                                                    problems: Callable[[str], list[Problem]]) -> None:
    """`max_run: &t 0700` is 448 seconds there (an integer field); the same node as a hyperparameter
    is refused, and refusing it does not change max_run."""
    found = problems(HEAD + "max_run: &t 0700\nhyperparameters: {timeout: *t}\n")
    assert [p.path for p in found] == ["hyperparameters.timeout"]
    assert load(HEAD + "max_run: &t 0700\n").max_run == 448


def test_yaml12_floats_are_numbers_outside_hyperparameters_too() -> None:
    assert parse_yaml("a: 1e-3\nb: [1E5, -.5]\nc: 1e3x\nd: e5\n", "t") == {
        "a": 0.001, "b": [100000.0, -0.5], "c": "1e3x", "d": "e5"}


def test_loader_change_does_not_leak_into_pyyaml() -> None:
    import yaml

    assert yaml.safe_load("a: 1e-3") == {"a": "1e-3"}
