"""The YAML spec as input: a spec file, or its mapping built in Python, checked by the service's rules
with the spec's own field names (`instance_groups[1].instance_count`) and turned into the `JobSpec`.
Both loaders hand the rules the real filesystem (`probes.DISK`) unless a caller gives other probes."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from emulator.errors import Problem, SpecError
from emulator.jobspec.model import JobSpec
from emulator.jobspec.probes import DISK, Probes
from emulator.jobspec.rules import Validator
from emulator.jobspec.wording import type_name, with_article
from emulator.jobspec.yaml_loader import parse_yaml, read_spec_text


def load_spec_file(path: Path | str, overrides: Mapping[str, Any] | None = None, probes: Probes = DISK) -> JobSpec:
    """Read a YAML spec and validate it; relative paths resolve against the spec file's folder."""
    path = Path(path)
    raw = parse_yaml(read_spec_text(path), str(path))
    if overrides:
        raw = {**raw, **overrides}
    return validate(raw, base_dir=path.resolve().parent, source=str(path), probes=probes)


def validate(raw: Mapping[str, Any], base_dir: Path, source: str | None = None, probes: Probes = DISK) -> JobSpec:
    """Check a raw spec mapping against every rule at once; return the JobSpec or raise SpecError."""
    if not isinstance(raw, Mapping):
        kind = with_article(type_name(raw))
        raise SpecError([Problem("", f"the spec must be a mapping of keys to values, got {kind}",
                                 "see docs/spec.md")], source)
    unencodable = list(_unencodable(raw, ""))
    if unencodable:
        # Only the Python API can pass these (a YAML file is UTF-8): every file the plan writes would fail.
        raise SpecError([Problem(field or "(top level)", "holds text UTF-8 cannot encode (a lone surrogate)",
                                 "pass text decoded from a real encoding") for field in unencodable], source)
    v = Validator(base_dir, probes)
    spec = v.job(raw)
    if v.problems or spec is None:
        raise SpecError(v.problems, source)
    return spec


def _unencodable(value: Any, field: str) -> Iterator[str]:
    """The fields (in the spec's own notation) whose key or text holds a lone surrogate."""
    if isinstance(value, str):
        if not _encodable(value):
            yield field
    elif isinstance(value, Mapping):
        for key, item in value.items():
            name = f"{field}.{key}" if field else str(key)
            if isinstance(key, str) and not _encodable(key):
                yield field or "(top level)"
            else:
                yield from _unencodable(item, name)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _unencodable(item, f"{field}[{i}]")


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
