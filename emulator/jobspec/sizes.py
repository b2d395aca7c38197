"""Byte sizes as people write them for Docker (512m, 2g, 1.5g, 1gib): `--memory`, `--shm-size` and the
spec's `shm_size`, and the bounds the spec's rules hold them to. Pure."""

from __future__ import annotations

import math

_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
# The engine stores sizes as signed 64-bit numbers; nothing real comes near this.
MAX_SIZE = 2**62
# Below this no process can use /dev/shm at all (one DataLoader batch, one NCCL/gloo buffer).
MIN_SHM = 1024**2


def parse_size(text: str) -> int:
    """A size in bytes: a number with an optional unit b, k, m, g or t (also kb/kib ...), powers of 1024
    as Docker reads them. ValueError saying what is wrong otherwise. A negative size is returned as
    such: each caller refuses what is below its own minimum, saying why."""
    value = text.strip().lower()
    number, unit = value.rstrip("bkmgti"), value[len(value.rstrip("bkmgti")):]
    unit = unit.removesuffix("ib").removesuffix("b") if len(unit) > 1 else unit
    try:
        amount = float(number)
    except ValueError:
        raise ValueError(f"{text!r} is not a size: use e.g. 512m or 2g") from None
    if unit not in _UNITS or not math.isfinite(amount):
        raise ValueError(f"{text!r} is not a size: use e.g. 512m or 2g")
    exact = amount * _UNITS[unit]
    if not math.isfinite(exact) or exact > MAX_SIZE:
        raise ValueError(f"{text!r} is too large: the engine takes at most {MAX_SIZE // 1024**4} TiB")
    return int(exact)
