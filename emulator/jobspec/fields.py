"""Typed getters over an input mapping: each reads one field, records a `Problem` under that field's
path when the value has the wrong type, and returns None then, so that every problem is collected in
one pass.

Field paths are written in the internal vocabulary (the YAML spec's keys: `instance_groups[1].instance_count`).
`field_name` turns such a path into the input's own words when a problem is recorded: the YAML adapter
keeps it as is; an adapter whose input names fields otherwise (a CreateTrainingJob request:
`ResourceConfig.InstanceGroups[1].InstanceCount`) passes its own mapping, and the rules stay written once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from emulator.errors import Problem
from emulator.jobspec.model import MAX_INTEGER
from emulator.jobspec.wording import did_you_mean, preview, type_name, with_article


def as_written(path: str) -> str:
    """The YAML spec's field names: the internal path is the spec's own."""
    return path


class FieldReader:
    def __init__(self, field_name: Callable[[str], str] = as_written) -> None:
        self.field_name = field_name
        self.problems: list[Problem] = []

    def fail(self, path: str, message: str, hint: str | None = None) -> None:
        self.problems.append(Problem(self.field_name(path), message, hint))

    def unknown_keys(self, raw: Mapping[Any, Any], allowed: Sequence[str], prefix: str) -> None:
        for key in raw:
            if not isinstance(key, str):
                self.fail(f"{prefix}{preview(key)}", "keys must be strings")
            elif key not in allowed:
                self.fail(
                    f"{prefix}{key}",
                    "unknown key",
                    did_you_mean(key, allowed) or f"allowed: {', '.join(allowed)}",
                )

    def typed(self, raw: Mapping[str, Any], key: str, path: str, kind: type | tuple[type, ...]) -> Any:
        value = raw.get(key)
        if value is None:
            return None
        ok = isinstance(value, kind) and not (isinstance(value, bool) and bool not in _as_tuple(kind))
        if not ok:
            names = " or ".join(type_name(k()) if k is not type(None) else "null" for k in _as_tuple(kind))
            self.fail(path, f"must be {with_article(names)}, got {type_name(value)} {preview(value)}")
            return None
        return value

    def string(self, raw: Mapping[str, Any], key: str, path: str) -> str | None:
        value = self.typed(raw, key, path, str)
        if value is not None and not value.strip():
            self.fail(path, "must not be empty")
            return None
        return value  # type: ignore[no-any-return]

    def integer(self, raw: Mapping[str, Any], key: str, path: str) -> int | None:
        value: int | None = self.typed(raw, key, path, int)
        if value is not None and not -MAX_INTEGER - 1 <= value <= MAX_INTEGER:
            self.fail(path, f"{preview(value)} is out of range", "the service's integers have at most 64 bits")
            return None
        return value

    def boolean(self, raw: Mapping[str, Any], key: str, path: str) -> bool | None:
        return self.typed(raw, key, path, bool)  # type: ignore[no-any-return]

    def string_list(self, raw: Mapping[str, Any], key: str, path: str) -> tuple[str, ...] | None:
        value = raw.get(key)
        if value is None:
            return None
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.fail(path, f"must be a list of strings, got {type_name(value)}")
            return None
        return tuple(value)


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)
