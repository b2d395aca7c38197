"""Where an instance group's hosts may run: its `placement`, node label key -> value, which the swarm
engine turns into one placement constraint `node.labels.<key>==<value>` per label. Not a SageMaker field:
the service places instances itself; the other engines run every host on one machine and ignore it.

The label rules are swarmkit's, which parses a service's constraints
(https://github.com/moby/swarmkit/blob/master/manager/constraint/constraint.go, `Parse`): the key
`node.labels.<key>` must match `^(?i)[a-z_][a-z0-9\\-_.]+$`, and the value `valuePattern`, here without
the whitespace that pattern lets through (Parse trims it away, so `role= cpu` would ask for `cpu`).
A label that breaks them would fail only when the engine creates the service, after the job started.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace

from emulator.errors import UsageError
from emulator.jobspec.model import InstanceGroup, JobSpec
from emulator.jobspec.wording import did_you_mean, preview

# `node.labels.` already starts the constraint's key with a letter: the label's own part only needs the
# characters of swarmkit's `alphaNumeric`.
LABEL_KEY_PATTERN = re.compile(r"[A-Za-z0-9_.\-]+")
LABEL_VALUE_PATTERN = re.compile(r"[A-Za-z0-9:\-_.*()?+\[\]\\^$|/]+")
LABEL_KEY_HINT = "letters, digits, '_', '.' and '-', e.g. role"
LABEL_VALUE_HINT = "letters, digits and : - _ . / (no '=', '!' or whitespace), e.g. cpu"

Placement = tuple[tuple[str, str], ...]


def key_problem(key: str) -> str | None:
    """Why `key` cannot be a node label key in a constraint, or None."""
    return _problem("key", key, LABEL_KEY_PATTERN)


def value_problem(value: str) -> str | None:
    """Why `value` cannot be a node label value in a constraint, or None."""
    return _problem("value", value, LABEL_VALUE_PATTERN)


def _problem(part: str, text: str, pattern: re.Pattern[str]) -> str | None:
    if not text:
        return f"the label {part} is empty"
    if not pattern.fullmatch(text):
        return f"label {part} {preview(text)} has characters a swarm constraint refuses"
    return None


def constraints(placement: Placement) -> tuple[str, ...]:
    """The swarm placement constraints of a group's labels, sorted: `node.labels.role==cpu`."""
    return tuple(sorted(f"node.labels.{key}=={value}" for key, value in placement))


def parse_option(text: str) -> tuple[str, str, str]:
    """`GROUP:KEY=VALUE` (the CLI's --placement) as (group, key, value). A key holds neither ':' nor '='
    and a value no '=', so the last '=' and the last ':' before it split it, whatever the group's name
    holds (a group name may have both). Raises UsageError naming the option."""
    left, equals, value = text.rpartition("=")
    group, colon, key = left.rpartition(":")
    if not equals or not colon or not group:
        raise UsageError(f"--placement {preview(text)} is not GROUP:KEY=VALUE",
                         hint="e.g. --placement data_group:role=cpu (a node label of the swarm's nodes)")
    problem = key_problem(key) or value_problem(value)
    if problem is not None:
        raise UsageError(f"--placement {preview(text)}: {problem}",
                         hint=LABEL_KEY_HINT if key_problem(key) else LABEL_VALUE_HINT)
    return group, key, value


def with_placement(spec: JobSpec, placement: Mapping[str, Mapping[str, str]]) -> JobSpec:
    """The spec with each named group's labels added to its own (a label the spec has already takes the
    given value): the command line's --placement over the spec's `placement`. Pure. Raises UsageError
    for a group the spec has not, or a label a swarm constraint refuses."""
    if not placement:
        return spec
    names = [g.instance_group_name for g in spec.instance_groups]
    for name, labels in placement.items():
        if name not in names:
            raise UsageError(f"--placement: the job has no instance group named {name!r}",
                             hint=" ".join(filter(None, (did_you_mean(name, names),
                                                         f"its groups: {', '.join(names)}"))))
        for key, value in labels.items():
            problem = key_problem(key) or value_problem(value)
            if problem is not None:
                raise UsageError(f"--placement {name}:{key}={value}: {problem}",
                                 hint=LABEL_KEY_HINT if key_problem(key) else LABEL_VALUE_HINT)
    return replace(spec, instance_groups=tuple(_merged(g, placement.get(g.instance_group_name, {}))
                                               for g in spec.instance_groups))


def _merged(group: InstanceGroup, labels: Mapping[str, str]) -> InstanceGroup:
    if not labels:
        return group
    return replace(group, placement=tuple(sorted({**dict(group.placement), **labels}.items())))
