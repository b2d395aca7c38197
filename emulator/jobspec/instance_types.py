"""The SageMaker training instance types the emulator knows, with the figures AWS publishes.

The data lives in ``emulator/data/instance_types.json`` (one object per type, sorted keys). The
figures are those of the EC2 instance behind each ``ml.`` type: vCPUs, memory in GiB, the number
and model of GPUs, and the *total* GPU memory of the instance in GiB (as in AWS's EC2 tables).
Every name is a member of the service's ``TrainingInstanceType`` enum, but not every member is here
(e.g. ml.trn1, ml.c8i or ml.p6 are not): callers should treat a name that
``lookup`` does not know as "unknown figures", and use ``suggest`` for a "did you mean" hint.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from types import MappingProxyType
from typing import Any

_PACKAGE = "emulator"
_DATA_DIR = "data"
_DATA_FILE = "instance_types.json"
_PREFIX = "ml."


@dataclass(frozen=True)
class InstanceType:
    """One SageMaker training instance type, e.g. ``ml.p3dn.24xlarge``."""

    name: str
    vcpus: int
    memory_gib: float
    gpus: int
    gpu_model: str | None
    gpu_memory_gib: float

    @property
    def family(self) -> str:
        """The type without its size: ``ml.c5.18xlarge`` -> ``ml.c5``."""
        return self.name.rsplit(".", 1)[0]

    @property
    def size(self) -> str:
        """The size part of the name: ``ml.c5.18xlarge`` -> ``18xlarge``."""
        return self.name.rsplit(".", 1)[-1]


def _parse(name: str, fields: Mapping[str, Any]) -> InstanceType:
    gpu_model = fields["gpu_model"]
    return InstanceType(
        name=name,
        vcpus=int(fields["vcpus"]),
        memory_gib=float(fields["memory_gib"]),
        gpus=int(fields["gpus"]),
        gpu_model=None if gpu_model is None else str(gpu_model),
        gpu_memory_gib=float(fields["gpu_memory_gib"]),
    )


@lru_cache(maxsize=1)
def catalog() -> Mapping[str, InstanceType]:
    """Every known instance type by name, read once from the package data file (read-only)."""
    text = resources.files(_PACKAGE).joinpath(_DATA_DIR).joinpath(_DATA_FILE).read_text(encoding="utf-8")
    raw: dict[str, Mapping[str, Any]] = json.loads(text)
    return MappingProxyType({name: _parse(name, fields) for name, fields in sorted(raw.items())})


def lookup(name: str) -> InstanceType | None:
    """The instance type called exactly ``name``, or None if the catalogue does not list it."""
    return catalog().get(name)


def suggest(name: str, limit: int = 3) -> list[str]:
    """Up to ``limit`` known names closest to ``name`` (for "did you mean" hints), best first.

    A case-insensitive exact match comes first, then the name with a missing ``ml.`` prefix added,
    then the types of a family named without a size (``p4d`` -> ``ml.p4d.24xlarge``), then the
    nearest names by :mod:`difflib` similarity.
    """
    if limit <= 0:
        return []
    names = list(catalog())
    by_lower = {n.lower(): n for n in names}
    wanted = name.strip().lower()
    result: list[str] = []

    def add(candidate: str | None) -> None:
        if candidate is not None and candidate not in result:
            result.append(candidate)

    add(by_lower.get(wanted))
    if not wanted.startswith(_PREFIX):
        wanted = _PREFIX + wanted
        add(by_lower.get(wanted))
    family = [t for t in catalog().values() if t.family.lower() == wanted]
    for member in sorted(family, key=lambda t: (t.vcpus, t.gpus, t.name)):
        add(member.name)
    for match in difflib.get_close_matches(wanted, list(by_lower), n=limit + len(result), cutoff=0.6):
        add(by_lower[match])
    return result[:limit]


def families() -> frozenset[str]:
    """Every family of the catalogue (`ml.p3`, `ml.c5`, ...)."""
    return frozenset(t.family for t in catalog().values())
