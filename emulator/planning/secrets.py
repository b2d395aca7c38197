"""Which `environment` variables are secrets, and how their values are kept out of what we write.

The job's containers need the real values, so the plan and the Docker backend keep them. Everything
the emulator *prints or writes* for people to read -- `plan.json`, `compose.yaml`, `job.json`, the
host logs on disk and on the console, FailureReason -- goes through this module first.

Two rules, deliberately simple so that a user can predict them:

- **By name** (`is_secret`): a variable whose name contains KEY, SECRET, TOKEN or PASSWORD, in any
  case, is a secret. Substrings, not words: `MONKEY` and `KEYBOARD_LAYOUT` count too. A false alarm
  costs a `***` in a listing; a missed secret costs a leak, so the rule errs on masking. Wherever a
  variable is listed with its name (job.json's Environment, plan.json), a secret's value is shown as
  `MASK` whatever it is, even when it is short or empty.
- **By value** (`Masker`): in free text (log lines, FailureReason, other variables' values such as a
  URL with the password in it) every occurrence of a secret's value is replaced by `MASK`. Values
  shorter than `MIN_SECRET_LENGTH` characters are not searched for: a secret "1" or "on" would
  otherwise turn every digit or word of every log line into `***`, which ruins the logs and, by
  where the stars appear, gives the value away anyway. A value that short is no secret worth the
  name (GitLab refuses to mask values under 8 characters; we stop at 4 so short PINs are still
  caught). Also searched for: each line of a multi-line value (a PEM key is printed line by line)
  and the value's JSON-escaped form (scripts often log JSON). Encodings other than these (base64,
  URL-encoding, the value split across two log lines) are not recognised.

Everything here is pure: no I/O, no global state.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

# Substrings of a variable name (compared upper-case) that make its value a secret.
SECRET_MARKERS = ("KEY", "SECRET", "TOKEN", "PASSWORD")
# What a secret value is replaced with. Fixed width: the mask does not reveal the value's length.
MASK = "***"
# Shorter values are masked by name but not searched for in free text (see the module docstring).
MIN_SECRET_LENGTH = 4


def is_secret(name: str) -> bool:
    """True when the variable's name contains KEY, SECRET, TOKEN or PASSWORD (any case, any place)."""
    upper = name.upper()
    return any(marker in upper for marker in SECRET_MARKERS)


def _forms(value: str) -> set[str]:
    """The strings to search for for one secret value: itself, each of its lines, its JSON-escaped
    form, and its Python repr (a script that prints a dict or a list of settings shows reprs)."""
    forms = {value, *value.splitlines()}
    for ensure_ascii in (False, True):
        forms.add(json.dumps(value, ensure_ascii=ensure_ascii)[1:-1])
    forms.add(repr(value)[1:-1])
    return {form for form in forms if len(form) >= MIN_SECRET_LENGTH}


class Masker:
    """Replaces every occurrence of the secret values of one or more environments with `MASK`.

    Built once per job from the environments its containers get; `mask` works on text (console
    lines, FailureReason), `mask_bytes` on the raw bytes of a log file, so bytes that are not
    UTF-8 pass through unchanged. Longer values are matched first, so a secret that contains
    another is masked whole.
    """

    def __init__(self, *environments: Mapping[str, str]) -> None:
        values: set[str] = set()
        for environment in environments:
            for name, value in environment.items():
                if is_secret(name):
                    values |= _forms(value)
        # Longest first: the regex alternation takes the first alternative that matches.
        self.values: tuple[str, ...] = tuple(sorted(values, key=lambda v: (-len(v), v)))
        self._text: re.Pattern[str] | None = None
        self._bytes: re.Pattern[bytes] | None = None
        if self.values:
            self._text = re.compile("|".join(re.escape(v) for v in self.values))
            self._bytes = re.compile(b"|".join(re.escape(v.encode("utf-8")) for v in self.values))

    def __bool__(self) -> bool:
        """False when there is nothing to mask (every call is then a no-op)."""
        return bool(self.values)

    def mask(self, text: str) -> str:
        """`text` with every secret value replaced by `MASK`."""
        if self._text is None:
            return text
        return self._text.sub(MASK, text)

    def mask_bytes(self, data: bytes) -> bytes:
        """`data` with every secret value (UTF-8 encoded) replaced by `MASK`; other bytes untouched."""
        if self._bytes is None:
            return data
        return self._bytes.sub(MASK.encode("utf-8"), data)

    def mask_truncated(self, text: str) -> str:
        """`mask`, for text that may have been cut off (FailureReason keeps the first 1024 characters).

        A cut can fall inside a secret, leaving its first characters at the very end, where `mask`
        cannot recognise them. So a tail of the text that is the beginning of a secret value (at
        least `MIN_SECRET_LENGTH` characters of it) is masked too.
        """
        text = self.mask(text)
        for value in self.values:
            for size in range(len(value) - 1, MIN_SECRET_LENGTH - 1, -1):
                if text.endswith(value[:size]):
                    return text[: len(text) - size] + MASK
        return text


def mask_environment(environment: Mapping[str, str]) -> dict[str, str]:
    """A copy for display: secret variables' values are `MASK`; other values have secret values
    masked inside them (e.g. `DB_URL=postgres://me:<DB_PASSWORD>@db` -> `postgres://me:***@db`)."""
    masker = Masker(environment)
    return {name: MASK if is_secret(name) else masker.mask(value) for name, value in environment.items()}


def masked_names(environment: Mapping[str, str]) -> list[str]:
    """The variables whose value `mask_environment` changes: the secrets, and those containing one."""
    masked = mask_environment(environment)
    return [name for name, value in environment.items() if masked[name] != value]
