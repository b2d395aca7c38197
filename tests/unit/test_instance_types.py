"""The instance-type catalogue: coverage of the families, sane figures, lookups and suggestions."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import pytest

from emulator.jobspec.instance_types import InstanceType, catalog, lookup, suggest

REQUIRED_SIZES: dict[str, list[str]] = {
    "ml.c5": ["xlarge", "2xlarge", "4xlarge", "9xlarge", "18xlarge"],
    "ml.c6i": ["xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge", "32xlarge"],
    "ml.m5": ["large", "xlarge", "2xlarge", "4xlarge", "12xlarge", "24xlarge"],
    "ml.m6i": [
        "large",
        "xlarge",
        "2xlarge",
        "4xlarge",
        "8xlarge",
        "12xlarge",
        "16xlarge",
        "24xlarge",
        "32xlarge",
    ],
    "ml.r5": ["large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge"],
    "ml.g4dn": ["xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge"],
    "ml.g5": ["xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge", "48xlarge"],
    "ml.p3": ["2xlarge", "8xlarge", "16xlarge"],
    "ml.p3dn": ["24xlarge"],
    "ml.p4d": ["24xlarge"],
    "ml.p5": ["48xlarge"],
}

FIELDS = {"vcpus", "memory_gib", "gpus", "gpu_model", "gpu_memory_gib"}


def _raw() -> dict[str, Any]:
    text = resources.files("emulator").joinpath("data").joinpath("instance_types.json").read_text("utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def test_data_file_has_sorted_keys_and_exact_fields() -> None:
    raw = _raw()
    assert list(raw) == sorted(raw)
    for name, fields in raw.items():
        assert set(fields) == FIELDS, name
        assert list(fields) == sorted(fields), name


@pytest.mark.parametrize("family", sorted(REQUIRED_SIZES))
def test_every_required_family_has_its_full_size_range(family: str) -> None:
    present = {t.size for t in catalog().values() if t.family == family}
    missing = set(REQUIRED_SIZES[family]) - present
    assert not missing, f"{family} lacks {sorted(missing)}"


def test_names_are_ml_types_and_keyed_by_their_own_name() -> None:
    for name, itype in catalog().items():
        assert isinstance(itype, InstanceType)
        assert itype.name == name
        assert name.startswith("ml.") and name.count(".") == 2
        assert itype.family == name.rsplit(".", 1)[0]


def test_figures_are_sane() -> None:
    for name, t in catalog().items():
        assert isinstance(t.vcpus, int) and t.vcpus >= 2, name
        assert t.memory_gib >= t.vcpus, name  # at least 1 GiB per vCPU on every type listed
        assert t.memory_gib <= 32 * t.vcpus, name
        assert (t.gpus == 0) == (t.gpu_model is None), name
        assert (t.gpus == 0) == (t.gpu_memory_gib == 0), name
        assert t.gpus >= 0 and t.gpu_memory_gib >= 0, name


def test_sizes_grow_within_a_family() -> None:
    families: dict[str, list[InstanceType]] = {}
    for t in catalog().values():
        families.setdefault(t.family, []).append(t)
    for family, members in families.items():
        ordered = sorted(members, key=lambda t: (t.vcpus, t.memory_gib))
        memories = [t.memory_gib for t in ordered]
        assert memories == sorted(memories), family


@pytest.mark.parametrize(
    ("name", "vcpus", "memory_gib", "gpus", "model_part", "gpu_memory_gib"),
    [
        ("ml.c5.xlarge", 4, 8, 0, None, 0),
        ("ml.c5.18xlarge", 72, 144, 0, None, 0),
        ("ml.m5.large", 2, 8, 0, None, 0),
        ("ml.r5.24xlarge", 96, 768, 0, None, 0),
        ("ml.c6i.32xlarge", 128, 256, 0, None, 0),
        ("ml.m6i.32xlarge", 128, 512, 0, None, 0),
        ("ml.g4dn.xlarge", 4, 16, 1, "T4", 16),
        ("ml.g4dn.12xlarge", 48, 192, 4, "T4", 64),
        ("ml.g5.xlarge", 4, 16, 1, "A10G", 24),
        ("ml.g5.48xlarge", 192, 768, 8, "A10G", 192),
        ("ml.p3.2xlarge", 8, 61, 1, "V100", 16),
        ("ml.p3.16xlarge", 64, 488, 8, "V100", 128),
        ("ml.p3dn.24xlarge", 96, 768, 8, "V100", 256),
        ("ml.p4d.24xlarge", 96, 1152, 8, "A100", 320),
        ("ml.p5.48xlarge", 192, 2048, 8, "H100", 640),
    ],
)
def test_published_figures(
    name: str, vcpus: int, memory_gib: float, gpus: int, model_part: str | None, gpu_memory_gib: float
) -> None:
    t = lookup(name)
    assert t is not None
    assert (t.vcpus, t.memory_gib, t.gpus, t.gpu_memory_gib) == (vcpus, memory_gib, gpus, gpu_memory_gib)
    if model_part is None:
        assert t.gpu_model is None
    else:
        assert t.gpu_model is not None and model_part in t.gpu_model


def test_lookup_unknown_returns_none() -> None:
    assert lookup("ml.c5.xlarg") is None
    assert lookup("ml.nope.xlarge") is None
    assert lookup("") is None
    assert lookup("ML.C5.XLARGE") is None  # lookup is exact; suggest() handles case


def test_catalog_is_cached_and_read_only() -> None:
    assert catalog() is catalog()
    with pytest.raises(TypeError):
        catalog()["ml.x"] = catalog()["ml.c5.xlarge"]  # type: ignore[index]


def test_instance_type_is_frozen() -> None:
    t = lookup("ml.c5.xlarge")
    assert t is not None
    with pytest.raises(AttributeError):
        t.vcpus = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("typo", "first"),
    [
        ("ml.c5.xlarg", "ml.c5.xlarge"),
        ("c5.xlarge", "ml.c5.xlarge"),
        ("ML.C5.XLARGE", "ml.c5.xlarge"),
        ("ml.p3dn.24xlage", "ml.p3dn.24xlarge"),
        ("ml.g5.48xlarg", "ml.g5.48xlarge"),
        ("ml.m5.larg", "ml.m5.large"),
        ("p4d", "ml.p4d.24xlarge"),
        (" ml.p5.48xlarge ", "ml.p5.48xlarge"),
    ],
)
def test_suggest_puts_the_intended_name_first(typo: str, first: str) -> None:
    assert suggest(typo)[0] == first


def test_suggest_respects_limit_and_returns_known_unique_names() -> None:
    for limit in (0, 1, 3, 5):
        got = suggest("ml.c5.2xlarg", limit=limit)
        assert len(got) <= limit
        assert len(set(got)) == len(got)
        assert all(name in catalog() for name in got)
    assert len(suggest("ml.c5.2xlarg", limit=5)) == 5


def test_suggest_nothing_for_garbage() -> None:
    assert suggest("zzzzzzzzzzzzzzzzzz") == []
