"""The hardened YAML loader: a spec file's text, parsed as plain data within the emulator's limits.

Beyond YAML's own errors it refuses what would cost memory or time later (docs/spec.md, Limits): a file or
text over MAX_SPEC_BYTES, more than MAX_YAML_NODES nodes once aliases are expanded, nesting deeper than
MAX_YAML_DEPTH, recursive aliases, and a key given twice in one mapping. Numbers such as `1e-3` read
as YAML 1.2 floats; environment values keep their source text and hyperparameters that YAML 1.1 reads
as something else are marked (`Ambiguous`) for the rules to report (docs/spec.md, Values as written).
"""

from __future__ import annotations

import json
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from emulator.errors import Problem, SpecError
from emulator.jobspec.wording import preview, reason, type_name, with_article

# The emulator's own limits on the spec file, documented in docs/spec.md ("Limits"). A job spec is a few
# KB; these stop a hostile or broken file before it costs memory or time: a YAML alias bomb ("billion
# laughs") is tiny as text and as PyYAML's shared objects, but explodes in anything that walks it or
# json.dumps it (hyperparameters.json is written once per host).
MAX_SPEC_BYTES = 1024 * 1024
MAX_YAML_NODES = 10_000
MAX_YAML_DEPTH = 100


def read_spec_text(path: Path) -> str:
    """The text of a spec file; SpecError when it is missing, unreadable, a folder, larger than
    MAX_SPEC_BYTES or not UTF-8. A pipe or device is read no further than one byte past the cap."""
    try:
        info = path.stat()
    except FileNotFoundError:
        raise SpecError([Problem("", f"spec file not found: {path}", "check the path")]) from None
    except (OSError, ValueError) as err:
        raise SpecError([Problem("", f"cannot read {path}: {reason(err)}", "check the path and its permissions")]) \
            from None
    if stat.S_ISDIR(info.st_mode):
        raise SpecError([Problem("", f"{path} is a directory, not a spec file", "give the YAML file")])
    if stat.S_ISREG(info.st_mode) and info.st_size > MAX_SPEC_BYTES:
        raise SpecError([_too_large(f"{info.st_size} bytes")], str(path))
    try:
        # Read at most one byte past the cap: a pipe or /dev/zero is refused, not read forever.
        with path.open("rb") as stream:
            data = stream.read(MAX_SPEC_BYTES + 1)
    except OSError as err:
        raise SpecError([Problem("", f"cannot read {path}: {reason(err)}", "check its permissions")]) from None
    if len(data) > MAX_SPEC_BYTES:
        raise SpecError([_too_large(f"more than {MAX_SPEC_BYTES} bytes")], str(path))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise SpecError(
            [Problem("", f"not UTF-8 text (byte {err.start})", "save the spec as UTF-8")], str(path)
        ) from None
    return text


def parse_yaml(text: str, source: str) -> dict[str, Any]:
    """Parse YAML text into the raw mapping, turning every YAML error into one SpecError line.

    Beyond YAML's own errors this refuses what would cost memory or time later (docs/spec.md, Limits):
    text over MAX_SPEC_BYTES, more than MAX_YAML_NODES nodes once aliases are expanded, nesting deeper
    than MAX_YAML_DEPTH, recursive aliases; and a key given twice in one mapping, which YAML forbids
    and PyYAML would silently resolve by dropping the first value.
    """
    if len(text) > MAX_SPEC_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_SPEC_BYTES:
        raise SpecError([_too_large(f"{len(text)} characters")], source)
    try:
        data = yaml.load(text, Loader=_SpecLoader)  # a SafeLoader: plain data only, no Python objects
    except _YamlRefused as err:
        raise SpecError([err.problem], source) from None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        if isinstance(err, yaml.constructor.ConstructorError) and "constructor for the tag" in (err.problem or ""):
            # e.g. !!python/object/apply:os.system: the safe loader refuses it; say so plainly.
            tag = (err.problem or "").rsplit("tag ", 1)[-1]
            raise SpecError([Problem("", f"{where}the YAML tag {tag} is not allowed: a spec holds plain data only",
                                     "remove the tag")], source) from None
        if mark is not None and _tab_at(text, mark.line, err):
            # PyYAML's own words ("found character '\\t' that cannot start any token") do not say
            # what to do: YAML forbids tabs in indentation (YAML 1.2, 6.1 "Indentation Spaces").
            raise SpecError([Problem("", f"line {mark.line + 1}: a tab character; YAML indents with spaces",
                                     "replace the tab with spaces")], source) from None
        raise SpecError(
            [Problem("", f"malformed YAML: {where}{err.problem or err}", "fix the YAML syntax")], source
        ) from None
    except yaml.YAMLError as err:
        raise SpecError([Problem("", f"malformed YAML: {err}", "fix the YAML syntax")], source) from None
    except RecursionError:
        # PyYAML composes recursively: nesting far past MAX_YAML_DEPTH overflows before our check runs.
        raise SpecError([_too_deep()], source) from None
    if not isinstance(data, dict):
        kind = "empty" if data is None else with_article(type_name(data))
        raise SpecError(
            [Problem("", f"the spec must be a mapping of keys to values, got {kind}", "see docs/spec.md")],
            source,
        )
    return data


def _tab_at(text: str, line: int, err: yaml.MarkedYAMLError) -> bool:
    """Whether a YAML error comes from a tab: the scanner met one where a token starts, or the line
    it stopped at is indented with one (a mapping or list then misaligns in other words)."""
    if "'\\t'" in (err.problem or ""):
        return True
    lines = text.splitlines()
    if not 0 <= line < len(lines):
        return False
    current = lines[line]
    return "\t" in current[: len(current) - len(current.lstrip(" \t"))]


def _too_large(size: str) -> Problem:
    return Problem(
        "",
        f"the spec file is larger than {MAX_SPEC_BYTES // (1024 * 1024)} MiB ({size})",
        "a job spec is a few KB: keep data in channels (inputs), not in the spec",
    )


def _too_deep() -> Problem:
    return Problem("", f"the YAML is nested more than {MAX_YAML_DEPTH} levels deep",
                   "a job spec is a few levels deep: flatten the value")


class _YamlRefused(Exception):
    """The composed YAML breaks one of parse_yaml's limits; carries the problem to report."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


class _SpecLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader, with the node graph checked before any value is constructed, and values
    kept as the user wrote them (docs/spec.md, Values as written): environment values are their source
    text, and a hyperparameter YAML 1.1 reads as something its text does not say is marked."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._explicit: set[int] = set()  # ids of scalar nodes with an explicit tag (`!!int 0700`)
        self._ambiguous: dict[int, Ambiguous] = {}

    def compose_document(self) -> yaml.Node | None:
        node = super().compose_document()
        if node is not None:
            _check_nodes(node)
        return node

    def compose_scalar_node(self, anchor: dict[Any, yaml.Node]) -> yaml.ScalarNode:  # the stub's type
        explicit = self.peek_event().tag not in (None, "!")  # type: ignore[no-untyped-call]
        node: yaml.ScalarNode = super().compose_scalar_node(anchor)
        if explicit:
            self._explicit.add(id(node))
        return node

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        marker = self._ambiguous.get(id(node))
        return marker if marker is not None else super().construct_object(node, deep)

    def construct_document(self, node: yaml.Node) -> Any:
        """PyYAML's constructors call int(), datetime(), base64 on the text and do not turn every
        failure into a YAMLError: a number past Python's 4300-digit limit, 2024-02-30, an empty
        `!!int`. Whatever they raise, the text cannot be read as data."""
        try:
            if isinstance(node, yaml.MappingNode):
                self._as_written(node)
            return super().construct_document(node)
        except (yaml.YAMLError, RecursionError):
            raise
        except Exception as err:
            if isinstance(err, ValueError) and "digits" in str(err):
                problem = Problem("", "malformed YAML: a number has too many digits", "quote it to make it a string")
            else:
                problem = Problem("", f"malformed YAML: a value cannot be read ({reason(err)})",
                                  "quote the value to make it a string")
            raise _YamlRefused(problem) from None


    def _as_written(self, root: yaml.MappingNode) -> None:
        """Swap the top-level `environment` and `hyperparameters` values for copies (a node may be
        shared through an alias with a field that wants the YAML reading): environment scalars
        tagged as strings of their source text, surprising hyperparameter scalars as markers."""
        self.flatten_mapping(root)  # resolves `<<` merges, as constructing the mapping would
        for i, (key, value) in enumerate(root.value):
            if not isinstance(key, yaml.ScalarNode) or key.tag != _STR_TAG:
                continue
            if key.value == "environment" and isinstance(value, yaml.MappingNode):
                self.flatten_mapping(value)
                pairs = [(k, _as_text(v)) for k, v in value.value]
                root.value[i] = (key, yaml.MappingNode(value.tag, pairs, value.start_mark, value.end_mark))
            elif key.value == "hyperparameters":
                root.value[i] = (key, self._mark_surprises(value))

    def _mark_surprises(self, node: yaml.Node) -> yaml.Node:
        """A copy of a hyperparameter's node tree in which every plain, untagged scalar whose YAML 1.1
        reading surprises (see _surprise) constructs to an Ambiguous marker. Recursion is bounded:
        _check_nodes refused more than MAX_YAML_DEPTH levels and MAX_YAML_NODES expanded nodes."""
        if isinstance(node, yaml.ScalarNode):
            meaning = None if node.style is not None or id(node) in self._explicit else _surprise(node)
            if meaning is None:
                return node
            copy = yaml.ScalarNode(node.tag, node.value, node.start_mark, node.end_mark)
            value = self.yaml_constructors[node.tag](self, node)
            self._ambiguous[id(copy)] = Ambiguous(node.value, meaning.format(json.dumps(value)), value)
            return copy
        if isinstance(node, yaml.SequenceNode):
            return yaml.SequenceNode(node.tag, [self._mark_surprises(v) for v in node.value],
                                     node.start_mark, node.end_mark)
        if isinstance(node, yaml.MappingNode):
            self.flatten_mapping(node)
            return yaml.MappingNode(node.tag, [(k, self._mark_surprises(v)) for k, v in node.value],
                                    node.start_mark, node.end_mark)
        return node


# YAML 1.2 (core schema) floats that PyYAML's YAML 1.1 resolver leaves strings because it wants a dot
# and a signed exponent: 1e-3, 1E5, -2e-3, -.5, 1.0e5. Added after the 1.1 resolvers, so it only sees
# text they did not match (an integer stays an integer); construct_yaml_float reads these with float().
# A dot or an exponent is required: `08` stays the string it is in YAML 1.1, not the float 8.0.
_YAML12_FLOAT = re.compile(r"^[-+]?(?:(?:\.[0-9]+|[0-9]+\.[0-9]*)(?:[eE][-+]?[0-9]+)?|[0-9]+[eE][-+]?[0-9]+)$")
for _first in "-+.0123456789":
    _SpecLoader.add_implicit_resolver("tag:yaml.org,2002:float", _YAML12_FLOAT, [_first])

_STR_TAG = "tag:yaml.org,2002:str"
_NULL_TAG = "tag:yaml.org,2002:null"
_MERGE_TAG = "tag:yaml.org,2002:merge"


@dataclass(frozen=True)
class Ambiguous:
    """A hyperparameter YAML 1.1 reads as something other than its text says; the validator reports it."""

    text: str
    meaning: str  # what YAML 1.1 makes of it: "the octal number 448"
    value: Any


def _as_text(node: yaml.Node) -> yaml.Node:
    """An environment value: a scalar becomes a string of exactly its source text (`3.10`, `0755`,
    `no`, `12:30` stay as written: the service's Environment is a map of strings and the user wrote
    text). null stays null (reported as missing a value); a list or mapping stays one (an error)."""
    if not isinstance(node, yaml.ScalarNode) or node.tag == _NULL_TAG:
        return node
    return yaml.ScalarNode(_STR_TAG, node.value, node.start_mark, node.end_mark, node.style)


# YAML 1.1 booleans YAML 1.2 does not have (PyYAML's resolver; `y`/`n` it already leaves strings).
_YAML11_BOOLEANS = ("yes", "no", "on", "off")


def _surprise(node: yaml.ScalarNode) -> str | None:
    """What YAML 1.1 (PyYAML) reads a plain hyperparameter scalar as, when that is not what its text
    says to a reader who knows JSON or YAML 1.2, as a template for the value; None when it is not.

    Refused: sexagesimal (`12:30` is 750), octal (`0700` is 448), hex and binary (`0x1F`, `0b11`),
    `yes`/`no`/`on`/`off` booleans, and decimal floats whose text ends in a zero after the first
    decimal place: the SDK json.dumps the value, which writes `3.10` as 3.1, so a version number
    would reach the script changed. `1.0`, `2.50e3`, `1e-3`, `.5`, `1_000` and true/false are fine:
    json.dumps writes the same number (or boolean) the text means.
    """
    text = node.value
    digits = text.lstrip("+-").replace("_", "")
    if node.tag == "tag:yaml.org,2002:bool" and text.lower() in _YAML11_BOOLEANS:
        return "the boolean {}"
    if node.tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float"):
        return None
    if ":" in digits:
        return "the sexagesimal (base 60) number {}"
    if node.tag == "tag:yaml.org,2002:int":
        if digits[:2].lower() in ("0x", "0b"):
            return f"the {'hexadecimal' if digits[1] in 'xX' else 'binary'} number {{}}"
        if len(digits) > 1 and digits.startswith("0"):
            return "the octal number {}"
        return None
    _, dot, fraction = digits.partition(".")
    if dot and "e" not in fraction.lower() and len(fraction) > 1 and fraction.endswith("0"):
        return "the number {}, which JSON writes without the trailing zero"
    return None


def _children(node: yaml.Node) -> Iterator[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            yield key
            yield value
    elif isinstance(node, yaml.SequenceNode):
        yield from node.value


def _check_nodes(root: yaml.Node) -> None:
    """Count the nodes as if every alias were written out, without writing them out.

    PyYAML's composer makes an alias the very node object its anchor names, so the node graph is a
    DAG (or has a cycle, for an alias inside its own anchor). One depth-first walk that remembers the
    expanded size of every finished node costs O(distinct nodes), however far the aliases expand.
    """
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    expanded = 0
    aliased = False
    # Each frame: the node, an iterator over its children, and its expanded size so far.
    stack: list[tuple[yaml.Node, Iterator[yaml.Node], list[int]]] = []

    def enter(node: yaml.Node) -> None:
        nonlocal expanded
        if len(stack) >= MAX_YAML_DEPTH:
            raise _YamlRefused(_too_deep())
        if isinstance(node, yaml.MappingNode):
            _check_duplicate_keys(node)
        on_path.add(id(node))
        stack.append((node, _children(node), [1]))
        expanded += 1

    def check_total() -> None:
        if expanded > MAX_YAML_NODES:
            if aliased:
                raise _YamlRefused(Problem(
                    "", f"YAML aliases expand to more than {MAX_YAML_NODES} nodes",
                    "a spec that size is an alias bomb (\"billion laughs\"): write the values out, "
                    "and keep big data in channels"))
            raise _YamlRefused(Problem(
                "", f"the YAML has more than {MAX_YAML_NODES} nodes",
                "a job spec is a few KB: keep data in channels (inputs), not in the spec"))

    enter(root)
    while stack:
        node, children, size = stack[-1]
        child = next(children, None)
        if child is None:
            stack.pop()
            on_path.discard(id(node))
            sizes[id(node)] = size[0]
            if stack:
                stack[-1][2][0] += size[0]
            continue
        if id(child) in on_path:
            mark = child.start_mark
            raise _YamlRefused(Problem(
                "", f"line {mark.line + 1}: a YAML alias refers to a node that contains it (a recursive structure)",
                "JSON has no recursive values: write the value out"))
        if id(child) in sizes:
            # Reached twice: an alias (or a << merge) of a finished node.
            aliased = True
            expanded += sizes[id(child)]
            stack[-1][2][0] += sizes[id(child)]
        else:
            enter(child)
        check_total()


def _check_duplicate_keys(node: yaml.MappingNode) -> None:
    """YAML forbids a key twice in one mapping; PyYAML keeps the last value and drops the first."""
    seen: dict[tuple[str, str], int] = {}
    for key, _ in node.value:
        if not isinstance(key, yaml.ScalarNode) or key.tag == _MERGE_TAG:
            continue
        line = key.start_mark.line + 1
        first = seen.get((key.tag, key.value))
        if first is not None:
            raise _YamlRefused(Problem(
                "", f"line {line}: duplicate key {preview(key.value)} (first on line {first})",
                "a key given twice silently loses its first value: keep one"))
        seen[(key.tag, key.value)] = line
