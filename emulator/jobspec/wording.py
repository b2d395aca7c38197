"""How a problem names a value: its type, a bounded preview, a mapping key in a field path, an OS
error's reason, and a "did you mean" for a near miss. Shared by the loader, the path probes and the rules."""

from __future__ import annotations

import difflib
import reprlib
from collections.abc import Sequence


def type_name(value: object) -> str:
    return {
        dict: "mapping",
        list: "list",
        str: "string",
        int: "integer",
        float: "number",
        bool: "boolean",
        type(None): "null",
    }.get(type(value), type(value).__name__)


def with_article(noun: str) -> str:
    """The noun with its indefinite article: 'an integer', 'a string'."""
    return f"{'an' if noun[:1] in ('a', 'e', 'i', 'o', 'u') else 'a'} {noun}"


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 80
_REPR.maxlist = _REPR.maxdict = _REPR.maxset = _REPR.maxtuple = 6
_REPR.maxlevel = 3


def preview(value: object) -> str:
    """A short repr for a message: bounded for huge or deeply nested values, never raising."""
    try:
        return _REPR.repr(value)
    except (ValueError, RecursionError):  # an int past Python's 4300-digit limit
        return f"<{type_name(value)} too large to show>"


def clip(text: object, limit: int = 40) -> str:
    """`text` as given when short, else its first `limit` characters and "…": a version or name from a
    request shown in a message without letting the request make the message long (any value: a
    request may hold a number where a version belongs)."""
    shown = text if isinstance(text, str) else preview(text)
    return shown if len(shown) <= limit else shown[:limit - 1] + "…"


def key_text(key: object) -> str:
    """A mapping key as it appears in a field path."""
    return key if isinstance(key, str) else preview(key)


def reason(err: BaseException) -> str:
    if isinstance(err, OSError) and err.strerror:
        return err.strerror
    return str(err) or type(err).__name__



def did_you_mean(word: str, choices: Sequence[str]) -> str | None:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else None
