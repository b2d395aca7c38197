"""An operation's input checked against its botocore model, as the services check it before any
handler runs: required members, lengths, value ranges, enums and patterns, and the integer widths
(`integer` is 32 bits, `long` 64), each problem in the services' own words.

AWS's JSON and query services (Coral) answer a request that breaks its model with one error listing
every problem, e.g. (CloudWatch Logs, from a client's report:
https://github.com/fluent-plugins-nursery/fluent-plugin-cloudwatch-logs/issues/223)

    2 validation errors detected: Value '' at 'logGroupNamePrefix' failed to satisfy constraint:
    Member must satisfy regular expression pattern: [\\.\\-_/#A-Za-z0-9]+; Value '' at
    'logGroupNamePrefix' failed to satisfy constraint: Member must have length greater than or equal to 1

Members are named lowerCamelCase, nested ones `a.b`, list elements `logEvents.1.member.timestamp`
(1-based, https://github.com/amazon-archives/cloudwatch-logs-centralize-logs/issues/5), a missing
member is `Value null at ... Member must not be null`, and a map's values are checked as the map:
`Value '{k=v}' at 'hyperParameters' failed to satisfy constraint: Map value must satisfy constraint:
[...every constraint of the value...]`
(https://github.com/aws-samples/amazon-sagemaker-pytorch-detectron2/issues/10). Values are written
as Java writes them (`[a, b]`, `{k=v}`), since the services are Java.

The error's code is each service's: SageMaker `ValidationException`, CloudWatch Logs
`InvalidParameterException` (as in the reports above), the query services (STS, IAM, and
CloudWatch, which keeps its query codes in its JSON and CBOR protocols) `ValidationError`. S3 makes
none of these model checks: its model carries almost no constraints, and S3 itself refuses what it
cannot read (a number out of range: `InvalidArgument`), so for S3 only required members and the
integer widths are checked, in S3's `InvalidArgument`.

Each operation's checks are built once from its input shape (`checker`, cached by service and
operation), so a call walks its parameters only, never the model.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Mapping
from datetime import date, datetime
from functools import cache
from typing import Any

from botocore.model import OperationModel, Shape

# (value, path, problems found so far): appends what is wrong with `value`, found at `path`.
Check = Callable[[Any, str, list[str]], None]

INT32 = (-(2 ** 31), 2 ** 31 - 1)
INT64 = (-(2 ** 63), 2 ** 63 - 1)
# The integer widths of the model's types (Smithy: integer is 32-bit, long 64-bit, short 16, byte 8).
WIDTHS = {"integer": INT32, "long": INT64, "short": (-(2 ** 15), 2 ** 15 - 1), "byte": (-128, 127)}
# A value echoed in a message is cut here: the services echo it whole, but a megabyte of it helps no one.
ECHO_LIMIT = 1024
# The codes of the services whose code is not the query services' ValidationError.
CODES = {"sagemaker": "ValidationException", "logs": "InvalidParameterException", "s3": "InvalidArgument"}
# The few Java regex classes the served models use that Python's `re` lacks, written as Python
# classes (inside a [...] class): \p{Alnum} is ASCII in Java; \p{L} and \p{N} are near enough \w
# (which adds '_', already in every class that uses them); \p{Z} is Unicode's separators.
JAVA_CLASSES = {r"\p{Alnum}": "A-Za-z0-9", r"\p{L}": r"\w", r"\p{N}": r"\w",
                r"\p{Z}": " \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"}


def problems(operation: OperationModel, params: Mapping[str, Any],
             own_patterns: frozenset[str] = frozenset()) -> list[str]:
    """Every problem of `params` (as the protocol codecs parse them) for `operation`, in the
    service's words; empty when the input is valid. `own_patterns`: shape names whose pattern the
    service object checks itself (`Service.own_patterns`), which are not checked here."""
    found: list[str] = []
    checker(operation, own_patterns)(params, "", found)
    return found


def error(service: str, found: list[str]) -> tuple[str, str]:
    """(code, message): the services' one answer for all the problems of a request."""
    if service == "s3":
        return CODES["s3"], "; ".join(found)
    count = len(found)
    return (CODES.get(service, "ValidationError"),
            f"{count} validation error{'s' if count != 1 else ''} detected: " + "; ".join(found))


_CHECKERS: dict[tuple[str, str, frozenset[str]], Check] = {}


def checker(operation: OperationModel, own_patterns: frozenset[str] = frozenset()) -> Check:
    """The check of one operation's input, built on its first call and kept by (service, operation)."""
    service = operation.service_model.service_name
    key = (service, operation.name, own_patterns)
    found = _CHECKERS.get(key)
    if found is None:
        shape = operation.input_shape
        found = _nothing if shape is None else _Builder(s3=service == "s3", own_patterns=own_patterns).build(shape)
        _CHECKERS[key] = found
    return found


def _nothing(value: Any, path: str, out: list[str]) -> None:
    return None


class _Builder:
    """Builds each shape's check once; a recursive shape refers to its own check through `built`."""

    def __init__(self, *, s3: bool, own_patterns: frozenset[str]) -> None:
        # S3 checks no lengths, enums or patterns of its own model (see the module's docstring).
        self.s3 = s3
        self.own_patterns = own_patterns
        self.built: dict[str, Check] = {}

    def build(self, shape: Shape) -> Check:
        key = f"{shape.type_name}:{shape.name}"
        if key in self.built:
            return self.built[key]
        # A placeholder first: a shape that contains itself finds it while being built.
        slot: list[Check] = []
        self.built[key] = lambda value, path, out: slot[0](value, path, out)
        check = self._make(shape)
        slot.append(check)
        self.built[key] = check
        return check

    def _make(self, shape: Shape) -> Check:
        kind = shape.type_name
        if kind == "structure":
            return self._structure(shape)
        if kind == "list":
            return self._list(shape)
        if kind == "map":
            return self._map(shape)
        return self._scalar(shape)

    def _structure(self, shape: Shape) -> Check:
        if shape.is_document_type:
            return _nothing
        required = frozenset(shape.required_members)
        members = [(name, _wire_name(name), self.build(member), name in required)
                   for name, member in shape.members.items()]

        def check(value: Any, path: str, out: list[str]) -> None:
            if not isinstance(value, Mapping):
                out.append(_failed(value, path, "Member must be a structure"))
                return
            for name, wire, inner, needed in members:
                item = value.get(name)
                where = f"{path}.{wire}" if path else wire
                if item is None:
                    if needed:
                        out.append(_failed(None, where, "Member must not be null") if not self.s3
                                   else f"Argument {wire} is required")
                    continue
                inner(item, where, out)
        return check

    def _list(self, shape: Shape) -> Check:
        inner = self.build(shape.member)
        sized = [] if self.s3 else _length_rules(shape)

        def check(value: Any, path: str, out: list[str]) -> None:
            if not isinstance(value, (list, tuple)):
                out.append(_failed(value, path, "Member must be a list"))
                return
            _apply(sized, len(value), value, path, out)
            for i, item in enumerate(value, 1):
                if item is None:
                    out.append(_failed(None, f"{path}.{i}.member", "Member must not be null"))
                else:
                    inner(item, f"{path}.{i}.member", out)
        return check

    def _map(self, shape: Shape) -> Check:
        sized = [] if self.s3 else _length_rules(shape)
        key_rules = [] if self.s3 else _scalar_rules(shape.key)
        # A map of scalars is checked as the map ("Map value must satisfy constraint: [...]"); a map
        # of structures names each value's members under its key.
        nested = self.build(shape.value) if shape.value.type_name in ("structure", "list", "map") else None
        value_rules = [] if self.s3 or nested is not None else _scalar_rules(shape.value)

        def check(value: Any, path: str, out: list[str]) -> None:
            if not isinstance(value, Mapping):
                out.append(_failed(value, path, "Member must be a map"))
                return
            _apply(sized, len(value), value, path, out)
            if key_rules and any(_broken(key_rules, k) for k in value):
                out.append(_failed(value, path, _map_rule("Map keys", key_rules)))
            if value_rules and any(v is None or _broken(value_rules, v) for v in value.values()):
                out.append(_failed(value, path, _map_rule("Map value", value_rules)))
            if nested is not None:
                for k, item in value.items():
                    if item is not None:
                        nested(item, f"{path}.{k}", out)
        return check

    def _scalar(self, shape: Shape) -> Check:
        kind = shape.type_name
        rules = _scalar_rules(shape)
        if shape.name in self.own_patterns:
            rules = [rule for rule in rules if rule[0] != "pattern"]
        if self.s3:
            # S3's own words for a number it cannot hold, e.g. "Argument maxKeys must be an integer
            # between 0 and 2147483647".
            low, high = WIDTHS.get(kind, INT64)
            rules = [("width", _between(low, high),
                      f"must be an integer between {low} and {high}")] if kind in WIDTHS else []
        typed = _typed(kind)
        if not rules:
            return typed
        s3 = self.s3

        def check(value: Any, path: str, out: list[str]) -> None:
            before = len(out)
            typed(value, path, out)
            if len(out) > before:
                return
            for _, holds, words in rules:
                if not holds(value):
                    out.append(f"Argument {path} {words}" if s3 else _failed(value, path, words))
        return check


# A rule: (kind, holds(value) -> bool, the constraint's words).
Rule = tuple[str, Callable[[Any], bool], str]


def _scalar_rules(shape: Shape) -> list[Rule]:
    """The constraints of a scalar shape, each with the service's words for it."""
    kind = shape.type_name
    meta = shape.metadata
    rules: list[Rule] = []
    if kind in ("string", "blob"):
        rules += _length_rules(shape)
    if kind in WIDTHS or kind in ("float", "double"):
        low, high = meta.get("min"), meta.get("max")
        if low is not None:
            rules.append(("min", _between(low, None), f"Member must have value greater than or equal to {low}"))
        if high is not None:
            rules.append(("max", _between(None, high), f"Member must have value less than or equal to {high}"))
    if kind in WIDTHS:
        # A number the service's Java type cannot hold, on each side the model leaves open (a side
        # it bounds says so already).
        low, high = WIDTHS[kind]
        low = None if "min" in meta else low
        high = None if "max" in meta else high
        if low is not None and high is not None:
            words = f"Member must have value between {low} and {high}"
        elif high is not None:
            words = f"Member must have value less than or equal to {high}"
        else:
            words = f"Member must have value greater than or equal to {low}"
        if low is not None or high is not None:
            rules.append(("width", _between(low, high), words))
    if kind == "string" and meta.get("enum"):
        allowed = frozenset(meta["enum"])
        rules.append(("enum", allowed.__contains__,
                      f"Member must satisfy enum value set: [{', '.join(sorted(allowed))}]"))
    if kind == "string" and meta.get("pattern"):
        compiled = _pattern(meta["pattern"])
        if compiled is not None:
            rules.append(("pattern", _matches(compiled),
                          f"Member must satisfy regular expression pattern: {meta['pattern']}"))
    return rules


def _length_rules(shape: Shape) -> list[Rule]:
    """`min`/`max` of a string (in UTF-16 units, as Java counts), a blob (bytes), a list or a map
    (entries): the services call each a length."""
    meta = shape.metadata
    text = shape.type_name == "string"
    rules: list[Rule] = []
    if "max" in meta:
        rules.append(("max", _sized(_between(None, meta["max"]), text),
                      f"Member must have length less than or equal to {meta['max']}"))
    if "min" in meta:
        rules.append(("min", _sized(_between(meta["min"], None), text),
                      f"Member must have length greater than or equal to {meta['min']}"))
    return rules


def _between(low: float | None, high: float | None) -> Callable[[Any], bool]:
    def holds(value: Any) -> bool:
        return (low is None or value >= low) and (high is None or value <= high)
    return holds


def _sized(bound: Callable[[Any], bool], text: bool) -> Callable[[Any], bool]:
    def holds(value: Any) -> bool:
        return bound(_length(value, text))
    return holds


def _matches(pattern: re.Pattern[str]) -> Callable[[Any], bool]:
    def holds(value: Any) -> bool:
        return pattern.fullmatch(value) is not None
    return holds


def _length(value: Any, text: bool) -> int:
    if isinstance(value, int):
        return value  # a list's or map's length, counted by the caller
    if text and isinstance(value, str) and not value.isascii():
        return len(value.encode("utf-16-le", "surrogatepass")) // 2
    return len(value)


def _apply(rules: list[Rule], size: int, value: Any, path: str, out: list[str]) -> None:
    for _, holds, words in rules:
        if not holds(size):
            out.append(_failed(value, path, words))


def _broken(rules: list[Rule], value: Any) -> bool:
    return not isinstance(value, str) or any(not holds(value) for _, holds, _ in rules)


def _map_rule(what: str, rules: list[Rule]) -> str:
    return f"{what} must satisfy constraint: [{', '.join(words for _, _, words in rules)}]"


def _typed(kind: str) -> Check:
    """The check that a value is of the shape's type. The codecs already refuse a value of another
    type (SerializationException); this keeps a handler from ever seeing one all the same."""
    accepted: tuple[type, ...]
    if kind in ("string", "character"):
        accepted = (str,)
    elif kind in WIDTHS:
        accepted = (int,)
    elif kind in ("float", "double"):
        accepted = (int, float)
    elif kind == "boolean":
        accepted = (bool,)
    elif kind == "blob":
        # A streaming payload (S3's PutObject Body) arrives as the spooled file the server read the
        # body into, when it is large or came in aws-chunked framing (emulator/aws/wire/chunked.py).
        accepted = (bytes, bytearray, str, io.IOBase)
    elif kind == "timestamp":
        accepted = (datetime, date)
    else:
        return _nothing
    numeric = kind in WIDTHS or kind in ("float", "double")

    def check(value: Any, path: str, out: list[str]) -> None:
        if not isinstance(value, accepted) or (numeric and isinstance(value, bool)):
            out.append(_failed(value, path, f"Member must be of type {kind}"))
    return check


def _failed(value: Any, path: str, constraint: str) -> str:
    shown = "null" if value is None else f"'{_java(value)}'"
    return f"Value {shown} at '{path}' failed to satisfy constraint: {constraint}"


def _java(value: Any) -> str:
    """A value as Java's toString writes it (the services are Java), cut at ECHO_LIMIT."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, Mapping):
        text = "{" + ", ".join(f"{k}={_java(v)}" for k, v in value.items()) + "}"
    elif isinstance(value, (list, tuple)):
        text = "[" + ", ".join(_java(v) for v in value) + "]"
    elif value is None:
        text = "null"
    else:
        text = str(value)
    return text if len(text) <= ECHO_LIMIT else text[:ECHO_LIMIT] + "..."


def _wire_name(name: str) -> str:
    """A member as the services name it in a message: lowerCamelCase (`S3Uri` is `s3Uri`)."""
    return name[:1].lower() + name[1:]


@cache
def _pattern(text: str) -> re.Pattern[str] | None:
    """A model's pattern as Python reads it: matched whole, as Java's `matches()` does. None for a
    pattern Python cannot read even with the Java classes rewritten (no served model has one)."""
    for java, python in JAVA_CLASSES.items():
        text = text.replace(java, python)
    try:
        return re.compile(text)
    except re.error:
        return None
