"""The user-facing job spec: loading (YAML or Python) and validation against SageMaker's own rules.

Validation is pure apart from checking that the paths the spec names exist: it walks the raw mapping
once, collects *every* problem with its dotted field path, and either returns a frozen `JobSpec` or
raises one `SpecError` listing them all. Names follow the SageMaker Python SDK v2 (`InstanceGroup`,
`TrainingInput`, `Estimator` arguments), so a SageMaker user already knows them.
"""

from __future__ import annotations

import difflib
import errno
import json
import os
import re
import reprlib
import stat
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import yaml

from emulator.catalog import lookup as lookup_instance_type
from emulator.catalog import suggest as suggest_instance_types
from emulator.defaults import DEFAULT_IMAGE
from emulator.errors import Problem, SpecError

# https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_CreateTrainingJob.html#sagemaker-CreateTrainingJob-request-TrainingJobName
# The `-*` lets any number of hyphens through, so the pattern alone does not bound the length: the
# API's "Length Constraints: Maximum length of 63" is a separate check (MAX_JOB_NAME).
JOB_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
MAX_JOB_NAME = 63
# A base name has no length limit: the SDK's name_from_base cuts it to fit the timestamp in 63
# characters (plan.job_name_from); it only needs the job name's characters.
BASE_JOB_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9])*$")
# https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_Channel.html#sagemaker-Type-Channel-ChannelName
CHANNEL_NAME_PATTERN = re.compile(r"^[A-Za-z0-9\.\-_]{1,64}$")
# https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_InstanceGroup.html : 1-64 chars.
# The API pattern is `.+`; we also refuse "/" and control characters because the name ends up in
# Docker labels and log prefixes, and never in a path.
GROUP_NAME_PATTERN = re.compile(r"^[^/\x00-\x1f\x7f-\x9f\u2028\u2029]{1,64}$")
ENV_NAME_PATTERN = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]{0,511}$")
# Docker's image reference grammar (distribution/reference): [registry[:port]/]path[:tag][@digest],
# the path in lowercase. Anything else fails only when the engine is asked for the image.
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
IMAGE_REFERENCE_PATTERN = re.compile(
    rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*(?::[0-9]+)?/)?"
    rf"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
    r"(?::[\w][\w.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?"
)

# https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ResourceConfig.html#sagemaker-Type-ResourceConfig-InstanceGroups
MAX_INSTANCE_GROUPS = 5
# Not a service limit: the emulator runs every host on one machine. Documented in the README.
MAX_HOSTS = 64
# The emulator's own limits on the spec file, documented in the README ("Limits"). A job spec is a few
# KB; these stop a hostile or broken file before it costs memory or time: a YAML alias bomb ("billion
# laughs") is tiny as text and as PyYAML's shared objects, but explodes in anything that walks it or
# json.dumps it (hyperparameters.json is written once per host).
MAX_SPEC_BYTES = 1024 * 1024
MAX_YAML_NODES = 10_000
MAX_YAML_DEPTH = 100
# The service's request limits (CreateTrainingJob): HyperParameters, Environment, InputDataConfig,
# AlgorithmSpecification.TrainingImage / ContainerEntrypoint / ContainerArguments.
MAX_HYPERPARAMETERS = 100
MAX_HYPERPARAMETER_NAME = 256
MAX_HYPERPARAMETER_VALUE = 2500
MAX_ENVIRONMENT = 100
MAX_ENVIRONMENT_VALUE = 512
MAX_CHANNELS = 20
MAX_IMAGE_URI = 255
MAX_CONTAINER_ITEMS = 100
MAX_CONTAINER_ITEM = 256
# API integers are at most 64 bits; a bigger number is a mistake, and past 4300 digits Python cannot
# even print it.
MAX_INTEGER = 2**63 - 1
# https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_StoppingCondition.html
MAX_RUN_LIMIT = 28 * 24 * 3600
DEFAULT_MAX_RUN = 86400
HOMOGENEOUS_GROUP = "homogeneousCluster"
DEFAULT_REGION = "us-east-1"
# logging.INFO, the SDK's default `container_log_level`.
DEFAULT_LOG_LEVEL = 20

INPUT_MODES = ("File", "FastFile", "Pipe")
PIPE_UNSUPPORTED = "Pipe input mode is not supported yet"
S3_DISTRIBUTIONS = ("FullyReplicated", "ShardedByS3Key")
S3_DATA_TYPES = ("S3Prefix",)
# The strategies `distribution=` accepts in the SDK's framework estimators.
DISTRIBUTION_STRATEGIES = (
    "mpi",
    "torch_distributed",
    "pytorchddp",
    "smdistributed",
    "parameter_server",
    "multi_worker_mirrored_strategy",
)

JOB_KEYS = (
    "job_name",
    "base_job_name",
    "image_uri",
    "entry_point",
    "source_dir",
    "hyperparameters",
    "environment",
    "instance_groups",
    "instance_type",
    "instance_count",
    "inputs",
    "input_mode",
    "distribution",
    "output_path",
    "checkpoint_s3_uri",
    "checkpoint_local_path",
    "max_run",
    "enable_network_isolation",
    "disable_output_compression",
    "container_entry_point",
    "container_arguments",
    "container_log_level",
    "region",
    "local_s3_root",
)
GROUP_KEYS = ("instance_group_name", "instance_type", "instance_count")
CHANNEL_KEYS = (
    "s3_data",
    "distribution",
    "input_mode",
    "content_type",
    "instance_groups",
    "s3_data_type",
    "record_wrapping",
)


@dataclass(frozen=True)
class InstanceGroup:
    """One instance group, as `sagemaker.instance_group.InstanceGroup(name, type, count)`."""

    instance_group_name: str
    instance_type: str
    instance_count: int


@dataclass(frozen=True)
class TrainingInput:
    """One input channel, as `sagemaker.inputs.TrainingInput`, resolved to a local source.

    `source` is an absolute local path (directory or file). `files` lists the channel's files
    relative to `source` in sorted order: planning shards them without touching the disk again.
    `instance_groups` is empty when the channel goes to every host.
    """

    s3_data: str
    source: Path = Path()
    distribution: str = "FullyReplicated"
    input_mode: str | None = None
    content_type: str | None = None
    instance_groups: tuple[str, ...] = ()
    s3_data_type: str = "S3Prefix"
    files: tuple[str, ...] = ()
    single_file: bool = False
    # A symlink in the folder would not resolve inside a read-only bind mount of it (its target lies
    # outside, or its text is absolute): the channel is staged as a share of hard links instead.
    links_out: bool = False


@dataclass(frozen=True)
class Distribution:
    """The `distribution=` argument: one strategy applied to one instance group."""

    strategy: str
    options: Mapping[str, Any]
    instance_groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class JobSpec:
    """A validated job: every path absolute, every default filled in."""

    job_name: str | None
    base_job_name: str
    image_uri: str
    entry_point: str | None
    # What is copied into every host's /opt/ml/code: the source_dir folder, or the entry script
    # alone when no source_dir is given (the SDK uploads just that file then).
    source_dir: Path | None
    instance_groups: tuple[InstanceGroup, ...]
    heterogeneous: bool
    hyperparameters: Mapping[str, Any] = field(default_factory=dict)
    # Not in repr: a traceback or a debug print of the spec must not show secret values.
    environment: Mapping[str, str] = field(default_factory=dict, repr=False)
    inputs: Mapping[str, TrainingInput] = field(default_factory=dict)
    input_mode: str = "File"
    distribution: Distribution | None = None
    output_path: Path = Path("output")
    checkpoint_s3_uri: Path | None = None
    checkpoint_local_path: str = "/opt/ml/checkpoints"
    max_run: int = DEFAULT_MAX_RUN
    enable_network_isolation: bool = False
    # OutputDataConfig.CompressionType NONE (the SDK's name): model and output files written as they
    # are under output/model/ and output/data/ instead of model.tar.gz / output.tar.gz.
    disable_output_compression: bool = False
    container_entry_point: tuple[str, ...] | None = None
    container_arguments: tuple[str, ...] | None = None
    container_log_level: int = DEFAULT_LOG_LEVEL
    region: str = DEFAULT_REGION
    spec_dir: Path = Path(".")

    @property
    def host_count(self) -> int:
        return sum(g.instance_count for g in self.instance_groups)

    def group(self, name: str) -> InstanceGroup:
        return next(g for g in self.instance_groups if g.instance_group_name == name)


# --------------------------------------------------------------------------------------------------
# Loading


def load_spec_file(path: Path | str, overrides: Mapping[str, Any] | None = None) -> JobSpec:
    """Read a YAML spec and validate it; relative paths resolve against the spec file's folder."""
    path = Path(path)
    try:
        info = path.stat()
    except FileNotFoundError:
        raise SpecError([Problem("", f"spec file not found: {path}", "check the path")]) from None
    except (OSError, ValueError) as err:
        raise SpecError([Problem("", f"cannot read {path}: {_reason(err)}", "check the path and its permissions")]) \
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
        raise SpecError([Problem("", f"cannot read {path}: {_reason(err)}", "check its permissions")]) from None
    if len(data) > MAX_SPEC_BYTES:
        raise SpecError([_too_large(f"more than {MAX_SPEC_BYTES} bytes")], str(path))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise SpecError(
            [Problem("", f"not UTF-8 text (byte {err.start})", "save the spec as UTF-8")], str(path)
        ) from None
    raw = parse_yaml(text, str(path))
    if overrides:
        raw = {**raw, **overrides}
    return validate(raw, base_dir=path.resolve().parent, source=str(path))


def parse_yaml(text: str, source: str) -> dict[str, Any]:
    """Parse YAML text into the raw mapping, turning every YAML error into one SpecError line.

    Beyond YAML's own errors this refuses what would cost memory or time later (README "Limits"):
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
        raise SpecError(
            [Problem("", f"malformed YAML: {where}{err.problem or err}", "fix the YAML syntax")], source
        ) from None
    except yaml.YAMLError as err:
        raise SpecError([Problem("", f"malformed YAML: {err}", "fix the YAML syntax")], source) from None
    except RecursionError:
        # PyYAML composes recursively: nesting far past MAX_YAML_DEPTH overflows before our check runs.
        raise SpecError([_too_deep()], source) from None
    if not isinstance(data, dict):
        kind = "empty" if data is None else _a(_type_name(data))
        raise SpecError(
            [Problem("", f"the spec must be a mapping of keys to values, got {kind}", "see README: spec")],
            source,
        )
    return data


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
    kept as the user wrote them (README "Values as written"): environment values are their source
    text, and a hyperparameter YAML 1.1 reads as something its text does not say is marked."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._explicit: set[int] = set()  # ids of scalar nodes with an explicit tag (`!!int 0700`)
        self._ambiguous: dict[int, _Ambiguous] = {}

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
                problem = Problem("", f"malformed YAML: a value cannot be read ({_reason(err)})",
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
        reading surprises (see _surprise) constructs to an _Ambiguous marker. Recursion is bounded:
        _check_nodes refused more than MAX_YAML_DEPTH levels and MAX_YAML_NODES expanded nodes."""
        if isinstance(node, yaml.ScalarNode):
            meaning = None if node.style is not None or id(node) in self._explicit else _surprise(node)
            if meaning is None:
                return node
            copy = yaml.ScalarNode(node.tag, node.value, node.start_mark, node.end_mark)
            value = self.yaml_constructors[node.tag](self, node)
            self._ambiguous[id(copy)] = _Ambiguous(node.value, meaning.format(json.dumps(value)), value)
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
class _Ambiguous:
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
                "", f"line {line}: duplicate key {_preview(key.value)} (first on line {first})",
                "a key given twice silently loses its first value: keep one"))
        seen[(key.tag, key.value)] = line


# --------------------------------------------------------------------------------------------------
# Validation


def validate(raw: Mapping[str, Any], base_dir: Path, source: str | None = None) -> JobSpec:
    """Check a raw spec mapping against every rule at once; return the JobSpec or raise SpecError."""
    if not isinstance(raw, Mapping):
        raise SpecError([Problem("", f"the spec must be a mapping of keys to values, got {_a(_type_name(raw))}",
                                 "see README: spec")], source)
    v = _Validator(base_dir)
    spec = v.job(raw)
    if v.problems or spec is None:
        raise SpecError(v.problems, source)
    return spec


def _type_name(value: object) -> str:
    return {
        dict: "mapping",
        list: "list",
        str: "string",
        int: "integer",
        float: "number",
        bool: "boolean",
        type(None): "null",
    }.get(type(value), type(value).__name__)


def _a(noun: str) -> str:
    """The noun with its indefinite article: 'an integer', 'a string'."""
    return f"{'an' if noun[:1] in ('a', 'e', 'i', 'o', 'u') else 'a'} {noun}"


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 80
_REPR.maxlist = _REPR.maxdict = _REPR.maxset = _REPR.maxtuple = 6
_REPR.maxlevel = 3


def _preview(value: object) -> str:
    """A short repr for a message: bounded for huge or deeply nested values, never raising."""
    try:
        return _REPR.repr(value)
    except (ValueError, RecursionError):  # an int past Python's 4300-digit limit
        return f"<{_type_name(value)} too large to show>"


def _key_text(key: object) -> str:
    """A mapping key as it appears in a field path."""
    return key if isinstance(key, str) else _preview(key)


def _reason(err: BaseException) -> str:
    if isinstance(err, OSError) and err.strerror:
        return err.strerror
    return str(err) or type(err).__name__


# What a path is on disk, following symlinks: "file", "dir", "missing", one of SPECIAL_KINDS, or
# "unreadable (<reason>)".
SPECIAL_KINDS = ("socket", "FIFO (named pipe)", "character device", "block device", "special file")


def _kind(path: str | Path) -> str:
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        if err.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
            return "missing"
        return f"unreadable ({_reason(err)})"
    except ValueError as err:  # NUL byte, unencodable character
        return f"unreadable ({_reason(err)})"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISFIFO(mode):
        return "FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "character device"
    if stat.S_ISBLK(mode):
        return "block device"
    return "special file"


def folder_problem(resolved: Path) -> tuple[str, str | None] | None:
    """Why a folder the emulator will write (create if missing, then create entries in) cannot be:
    (message, hint), or None when it can. Used for output_path and checkpoint_s3_uri, and for
    `render -o`."""
    probe = resolved
    kind = _kind(probe)
    while kind == "missing" and probe.parent != probe:
        probe = probe.parent
        kind = _kind(probe)
    if kind == "dir":
        # The run creates <job_name>/ (and any missing folders) in `probe`: that needs write and
        # search permission there and a writable filesystem. os.access asks the kernel with the
        # real uid, so it answers EROFS on a read-only mount even for root, and (as root's own mkdir
        # does) ignores permission bits for root.
        if os.access(probe, os.W_OK | os.X_OK):
            return None
        why = "on a read-only filesystem" if _read_only_fs(probe) else "not writable by this user"
        where = f"{resolved} cannot be created: {probe} is" if probe != resolved else f"{resolved} is"
        return f"{where} {why}", "choose a folder you can write to"
    if kind == "missing":
        return None
    if kind.startswith("unreadable"):
        return f"{resolved} cannot be created: {probe} is {kind}", "check its permissions"
    if probe == resolved:
        return f"{resolved} is a {kind}, not a folder", None
    return (f"{resolved} cannot be created: {probe} is a {kind}, not a folder",
            "choose a folder that exists or can be made")


def _read_only_fs(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


@dataclass(frozen=True)
class _Listing:
    """A folder as an upload that follows symlinks reads it: `aws s3 sync` / `cp --recursive`
    (follow-symlinks is their default) for data, the SDK's sourcedir.tar.gz for code
    (sagemaker/utils.py create_tar_file: `tarfile.open(..., dereference=True)`)."""

    files: tuple[str, ...] = ()  # the S3 keys: relative paths, links followed (files and folders), sorted
    special: tuple[tuple[str, str], ...] = ()  # (path, kind): sockets, FIFOs, devices, also behind a link
    broken: tuple[tuple[str, str], ...] = ()  # (path, why): links such an upload cannot read
    links_out: bool = False  # a link that would not resolve the same inside a bind mount of the folder


def _scan(source: Path) -> _Listing:
    """List `source` as an upload that follows links would: a linked file is a key under the link's
    own path, a linked folder's files are keys under the link's path.

    A link that dangles (or is a loop of links) cannot be read: tarfile with dereference=True raises
    FileNotFoundError on it, and `aws s3 sync` skips it with "File does not exist." (awscli
    customizations/s3/filegenerator.py triggers_warning) and exits 2. A link to a folder above itself
    would make an endless listing (tarfile recurses until it fails). Both are reported in `broken`.
    Unreadable folders are skipped, as before (staging reports what it cannot read).
    """
    kind = _kind(source)
    if kind == "file":
        return _Listing(files=(source.name,))
    if kind != "dir":
        return _Listing(special=((str(source), kind),) if kind in SPECIAL_KINDS else ())
    root = os.path.realpath(source)
    files: list[str] = []
    special: list[tuple[str, str]] = []
    broken: list[tuple[str, str]] = []
    links_out = False
    # (folder as listed, its key prefix, the identities of it and every folder above it)
    stack = [(str(source), "", frozenset({_identity(source)}))]
    while stack:
        folder, prefix, above = stack.pop()
        try:
            with os.scandir(folder) as listing:
                entries = list(listing)
        except OSError:
            continue
        for entry in entries:
            key, full = prefix + entry.name, entry.path
            if entry.is_symlink():
                links_out = links_out or _leaves(full, root)
                kind = _kind(full)
            elif entry.is_file(follow_symlinks=False):  # no stat: the listing already says so
                kind = "file"
            elif entry.is_dir(follow_symlinks=False):
                kind = "dir"
            else:
                kind = _kind(full)
            if kind == "file":
                files.append(key)
            elif kind == "dir":
                identity = _identity(full)
                if identity in above:
                    broken.append((full, f"a symlink to a folder above it ({os.readlink(full)}): a loop"))
                else:
                    stack.append((full, key + "/", above | {identity}))
            elif kind in SPECIAL_KINDS:
                special.append((full, kind))
            elif kind == "missing" and entry.is_symlink():
                broken.append((full, f"a symlink that leads nowhere ({os.readlink(full)}): dangling or a loop"))
    return _Listing(tuple(sorted(files)), tuple(special), tuple(broken), links_out)


def _given_name(text: str, resolved: Path) -> str:
    """The last component of a path or URI as written (the S3 key's last part), before any link in
    it is followed; the resolved path's name when the text ends in `..` or names no component."""
    name = Path(_parse_uri(text)[1] if "://" in text else text).name
    return name if name not in ("", os.pardir) else resolved.name


def _identity(path: str | Path) -> tuple[int, int]:
    status = os.stat(path)
    return status.st_dev, status.st_ino


def _leaves(link: str, root: str) -> bool:
    """Whether a symlink under the folder `root` resolves differently inside a bind mount of `root`:
    there an absolute text, or a relative one that climbs above `root`, resolves in the container's
    own filesystem (dangling, or another file)."""
    try:
        text = os.readlink(link)
    except OSError:
        return True
    if os.path.isabs(text):
        return True
    where = os.path.relpath(os.path.realpath(os.path.dirname(link)), root)
    climbed = os.path.normpath(os.path.join(where, text))
    target = os.path.realpath(link)
    return climbed == os.pardir or climbed.startswith(os.pardir + os.sep) or os.path.commonpath((root, target)) != root


class _BadPath(Exception):
    """A path or URI that cannot be resolved at all (NUL byte, unknown ~user, symlink loop, bad URI)."""


def _resolve(base: Path, text: str) -> Path:
    """`text` (absolute, ~user or relative to `base`) as an absolute path without symlinks."""
    try:
        return (base / Path(text).expanduser()).resolve()
    except (OSError, ValueError, RuntimeError) as err:  # RuntimeError: unknown ~user, symlink loop
        raise _BadPath(f"not a usable path: {_reason(err)}") from None


def _parse_uri(text: str) -> tuple[str, str]:
    """(netloc, unquoted path) of a URI."""
    try:
        parsed = urlparse(text)
    except ValueError as err:
        raise _BadPath(f"not a valid URI: {_reason(err)}") from None
    return parsed.netloc, unquote(parsed.path)


def did_you_mean(word: str, choices: Sequence[str]) -> str | None:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else None


class _Validator:
    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir
        self.problems: list[Problem] = []

    # -- small typed getters: each records a problem and returns None when the value is wrong

    def fail(self, path: str, message: str, hint: str | None = None) -> None:
        self.problems.append(Problem(path, message, hint))

    def unknown_keys(self, raw: Mapping[Any, Any], allowed: Sequence[str], prefix: str) -> None:
        for key in raw:
            if not isinstance(key, str):
                self.fail(f"{prefix}{_preview(key)}", "keys must be strings")
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
            names = " or ".join(_type_name(k()) if k is not type(None) else "null" for k in _as_tuple(kind))
            self.fail(path, f"must be {_a(names)}, got {_type_name(value)} {_preview(value)}")
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
            self.fail(path, f"{_preview(value)} is out of range", "the service's integers have at most 64 bits")
            return None
        return value

    def boolean(self, raw: Mapping[str, Any], key: str, path: str) -> bool | None:
        return self.typed(raw, key, path, bool)  # type: ignore[no-any-return]

    def command_list(self, raw: Mapping[str, Any], key: str) -> tuple[str, ...] | None:
        """container_entry_point / container_arguments: 1-100 strings of at most 256 characters each
        (the service's limits), none with a NUL, which no process argument can hold."""
        items = self.string_list(raw, key, key)
        if items is None:
            return None
        ok = True
        if not items:
            self.fail(key, "must have at least one item, or be omitted")
            ok = False
        elif len(items) > MAX_CONTAINER_ITEMS:
            self.fail(key, f"at most {MAX_CONTAINER_ITEMS} items, got {len(items)}", "the service's limit")
            ok = False
        for i, item in enumerate(items):
            if len(item) > MAX_CONTAINER_ITEM:
                self.fail(f"{key}[{i}]", f"longer than {MAX_CONTAINER_ITEM} characters", "the service's limit")
                ok = False
            elif "\0" in item:
                self.fail(f"{key}[{i}]", "must not contain a NUL character")
                ok = False
        return items if ok else None

    def string_list(self, raw: Mapping[str, Any], key: str, path: str) -> tuple[str, ...] | None:
        value = raw.get(key)
        if value is None:
            return None
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.fail(path, f"must be a list of strings, got {_type_name(value)}")
            return None
        return tuple(value)

    def local_path(self, text: str, path: str, s3_root: Path | None, what: str) -> Path | None:
        """Resolve a local path, file:// URI or s3:// URI (under the local S3 root) to an absolute path."""
        try:
            return self._local_path(text, path, s3_root)
        except _BadPath as err:
            self.fail(path, f"{_preview(text)} is {err}", f"give the {what} as a plain path or URI")
            return None

    def _local_path(self, text: str, path: str, s3_root: Path | None) -> Path | None:
        if text.startswith("s3://"):
            if s3_root is None:
                self.fail(
                    path,
                    f"{text} is an S3 URI but no local S3 root is set",
                    "set local_s3_root (a folder whose subfolders are buckets) or use a local path",
                )
                return None
            bucket, key = _parse_uri(text)
            resolved = _resolve(s3_root, os.path.join(bucket, key.lstrip("/")) if bucket else ".")
            if not bucket or "/" in bucket or not resolved.is_relative_to(_resolve(s3_root, ".")):
                self.fail(path, f"{text} does not name a bucket and key under local_s3_root {s3_root}",
                          "s3://bucket/key, without '..'")
                return None
            return resolved
        if text.startswith("file://"):
            return _resolve(self.base_dir, _parse_uri(text)[1] or ".")
        if "://" in text:
            self.fail(path, f"unsupported URI scheme in {_preview(text)}", "use a local path, file:// or s3://")
            return None
        return _resolve(self.base_dir, text)

    def existing(self, resolved: Path | None, path: str, what: str) -> Path | None:
        if resolved is None:
            return None
        kind = _kind(resolved)
        if kind == "missing":
            self.fail(path, f"{what} not found: {resolved}", "check the path; relative paths start at the spec file")
            return None
        if kind.startswith("unreadable"):
            self.fail(path, f"{what} {resolved} is {kind}", "check its permissions")
            return None
        return resolved

    def no_special_files(self, source: Path, path: str, what: str) -> _Listing | None:
        """A folder (or file) the job reads, listed with links followed (`_scan`), or None if it
        holds a socket, FIFO or device (also behind a link: staging follows links), or a link that
        cannot be followed. A read-only bind mount still lets a process connect() to a socket or open
        a device, so a channel on /var/run would hand the container the Docker engine."""
        listing = _scan(source)
        if listing.special:
            name, kind = listing.special[0]
            more = f" (and {len(listing.special) - 1} more)" if len(listing.special) > 1 else ""
            self.fail(path, f"{name} is a {kind}{more}: {what} may hold only regular files and folders",
                      "a socket, FIFO or device would reach the host from inside the container: remove it, "
                      "or point at a folder of plain files")
        if listing.broken:
            name, why = listing.broken[0]
            more = f" (and {len(listing.broken) - 1} more)" if len(listing.broken) > 1 else ""
            self.fail(path, f"{name} is {why}{more}",
                      f"{what} is read following symlinks, as the SDK's tarball of source_dir and aws s3 sync "
                      "read it (they fail on such a link or skip it): remove the link or fix its target")
        return None if listing.special or listing.broken else listing

    def creatable_folder(self, resolved: Path | None, path: str) -> None:
        """A folder the job writes: either a writable folder already, or creatable, so that the job
        does not fail at its very end."""
        if resolved is not None and (problem := folder_problem(resolved)) is not None:
            message, hint = problem
            if hint and path == "output_path" and "write to" in hint:
                hint += ", or run with --output-path DIR"
            self.fail(path, message, hint)

    # -- the job

    def job(self, raw: Mapping[str, Any]) -> JobSpec | None:
        raw = _drop_nulls(raw)
        self.unknown_keys(raw, JOB_KEYS, "")

        job_name = self.string(raw, "job_name", "job_name")
        if job_name is not None and len(job_name) > MAX_JOB_NAME:
            self.fail("job_name", f"{_preview(job_name)} is {len(job_name)} characters long: SageMaker allows at "
                      f"most {MAX_JOB_NAME}", "shorten it, or give base_job_name (the SDK cuts a base to fit)")
        elif job_name is not None and not JOB_NAME_PATTERN.fullmatch(job_name):
            self.fail("job_name", f"{_preview(job_name)} breaks SageMaker's pattern {JOB_NAME_PATTERN.pattern}",
                      "letters, digits and hyphens, 1-63 chars, starting and ending alphanumeric")
        base = self.string(raw, "base_job_name", "base_job_name")
        if base is not None and not BASE_JOB_NAME_PATTERN.fullmatch(base):
            self.fail("base_job_name", f"{_preview(base)} breaks SageMaker's pattern {JOB_NAME_PATTERN.pattern}",
                      "letters, digits and hyphens, starting and ending alphanumeric")
        image = self.string(raw, "image_uri", "image_uri") or DEFAULT_IMAGE
        if len(image) > MAX_IMAGE_URI:
            self.fail("image_uri", f"longer than {MAX_IMAGE_URI} characters", "the service's limit for TrainingImage")
        elif not IMAGE_REFERENCE_PATTERN.fullmatch(image):
            self.fail("image_uri", f"{_preview(image)} is not a valid Docker image reference",
                      "[registry[:port]/]repository[:tag][@digest], the repository in lowercase, "
                      "e.g. my-trainer:latest")

        groups, heterogeneous = self.groups(raw)
        group_names = [g.instance_group_name for g in groups]

        s3_root_text = self.string(raw, "local_s3_root", "local_s3_root")
        s3_root = self.existing(
            self.local_path(s3_root_text, "local_s3_root", None, "local S3 root") if s3_root_text else None,
            "local_s3_root",
            "local S3 root",
        )

        entry_point, source_dir = self.code(raw)
        entry = self.command_list(raw, "container_entry_point")
        args = self.command_list(raw, "container_arguments")
        if entry_point is None and entry is None and "entry_point" not in raw:
            self.fail("entry_point", "missing", "name the script to run (relative to source_dir)")
        # The program the toolkit's `train` will run (sagemaker_program), checked as the toolkit will.
        toolkit = entry is None or os.path.basename(entry[0]) == "train"
        if entry_point is not None and toolkit and (problem := entry_point_problem(entry_point)) is not None:
            self.fail("entry_point", f"{_preview(entry_point)} cannot be run by the training toolkit: it "
                      f"contains {problem}", "rename the script so its path holds only letters, digits, "
                      "'.', '_', '+', '-' and '/' and starts with a letter, digit, '.' or '_'")

        job_mode = self.string(raw, "input_mode", "input_mode") or "File"
        if job_mode not in INPUT_MODES:
            self.fail("input_mode", f"must be one of {', '.join(INPUT_MODES)}, got {job_mode!r}",
                      did_you_mean(job_mode, INPUT_MODES))
        elif job_mode == "Pipe":
            self.fail("input_mode", PIPE_UNSUPPORTED, "use File or FastFile")
        inputs = self.inputs(raw, group_names, heterogeneous, s3_root)
        distribution = self.distribution(raw, group_names, heterogeneous)

        hyperparameters = self.hyperparameters(raw)
        environment = self.environment(raw)

        out_text = self.string(raw, "output_path", "output_path") or "output"
        output_path = self.local_path(out_text, "output_path", s3_root, "output path")
        self.creatable_folder(output_path, "output_path")
        ckpt_text = self.string(raw, "checkpoint_s3_uri", "checkpoint_s3_uri")
        checkpoint = self.local_path(ckpt_text, "checkpoint_s3_uri", s3_root, "checkpoints") if ckpt_text else None
        self.creatable_folder(checkpoint, "checkpoint_s3_uri")
        if checkpoint is not None and _kind(checkpoint) == "dir":
            # Copied into every host before the job (copytree follows symlinks).
            self.no_special_files(checkpoint, "checkpoint_s3_uri", "checkpoints")
        ckpt_local = self.string(raw, "checkpoint_local_path", "checkpoint_local_path") or "/opt/ml/checkpoints"
        reserved = ("/opt/ml/input", "/opt/ml/code", "/opt/ml/model", "/opt/ml/output")
        if not ckpt_local.startswith("/"):
            self.fail("checkpoint_local_path", "must be an absolute path inside the container")
        elif "\0" in ckpt_local:
            self.fail("checkpoint_local_path", "must not contain a NUL character")
        elif os.path.normpath(ckpt_local) in ("/", "/opt", "/opt/ml") or any(
            os.path.normpath(ckpt_local) == r or os.path.normpath(ckpt_local).startswith(r + "/") for r in reserved
        ):
            self.fail("checkpoint_local_path", f"{ckpt_local} would hide or sit inside /opt/ml's own folders",
                      "use /opt/ml/checkpoints (the default) or a folder outside /opt/ml")
        self.no_overlap(output_path, checkpoint, source_dir, inputs)

        max_run = self.integer(raw, "max_run", "max_run")
        if max_run is not None and not 1 <= max_run <= MAX_RUN_LIMIT:
            self.fail("max_run", f"must be between 1 and {MAX_RUN_LIMIT} seconds, got {max_run}")
        isolation = self.boolean(raw, "enable_network_isolation", "enable_network_isolation")
        uncompressed = self.boolean(raw, "disable_output_compression", "disable_output_compression")
        log_level = self.integer(raw, "container_log_level", "container_log_level")
        region = self.string(raw, "region", "region") or DEFAULT_REGION
        if not re.fullmatch(r"[a-z]{2}(-[a-z]+)+-\d", region):
            self.fail("region", f"{_preview(region)} is not an AWS region name", "e.g. us-east-1")

        if self.problems or output_path is None:
            return None
        return JobSpec(
            job_name=job_name,
            base_job_name=base or _default_base_name(image),
            image_uri=image,
            entry_point=entry_point,
            source_dir=source_dir,
            instance_groups=tuple(groups),
            heterogeneous=heterogeneous,
            hyperparameters=hyperparameters,
            environment=environment,
            inputs=inputs,
            input_mode=job_mode,
            distribution=distribution,
            output_path=output_path,
            checkpoint_s3_uri=checkpoint,
            checkpoint_local_path=ckpt_local,
            max_run=max_run if max_run is not None else DEFAULT_MAX_RUN,
            enable_network_isolation=bool(isolation),
            disable_output_compression=bool(uncompressed),
            container_entry_point=entry,
            container_arguments=args,
            container_log_level=log_level if log_level is not None else DEFAULT_LOG_LEVEL,
            region=region,
            spec_dir=self.base_dir,
        )

    def no_overlap(
        self, output: Path | None, checkpoint: Path | None, code: Path | None, inputs: Mapping[str, TrainingInput]
    ) -> None:
        """What the job writes (output_path, checkpoints) must not lie inside what it reads, nor contain
        it: the user's code and data are never written, and must not see the job's own output."""
        readers = [("source_dir", code)] + [(f"inputs.{n}.s3_data", c.source) for n, c in inputs.items()]
        for field_name, written in (("output_path", output), ("checkpoint_s3_uri", checkpoint)):
            if written is None:
                continue
            for reader_name, read in readers:
                if read is not None and (written.is_relative_to(read) or read.is_relative_to(written)):
                    self.fail(field_name, f"{written} overlaps {reader_name} ({read})",
                              "the job would write into data or code it reads: use a separate folder")

    def groups(self, raw: Mapping[str, Any]) -> tuple[list[InstanceGroup], bool]:
        has_groups = raw.get("instance_groups") is not None
        has_single = raw.get("instance_type") is not None or raw.get("instance_count") is not None
        if has_groups and has_single:
            self.fail("instance_groups", "instance_type/instance_count and instance_groups are mutually exclusive",
                      "use instance_groups for a heterogeneous cluster, the pair for a homogeneous one")
            return [], True
        if not has_groups:
            if not has_single:
                self.fail("instance_groups", "missing",
                          "give instance_groups (heterogeneous) or instance_type + instance_count")
                return [], False
            itype = self.string(raw, "instance_type", "instance_type")
            count = self.integer(raw, "instance_count", "instance_count")
            if itype is None and "instance_type" not in raw:
                self.fail("instance_type", "missing", "e.g. ml.c5.xlarge")
            count = 1 if count is None and "instance_count" not in raw else count
            if count is not None and count < 1:
                self.fail("instance_count", f"must be at least 1, got {count}")
            if itype is not None:
                self.instance_type(itype, "instance_type")
            if count is not None and count > MAX_HOSTS:
                self.fail("instance_count", f"{count} hosts is more than this emulator runs ({MAX_HOSTS})",
                          "every host is a container on this one machine")
            if itype is None or count is None:
                return [], False
            return [InstanceGroup(HOMOGENEOUS_GROUP, itype, count)], False

        items = raw["instance_groups"]
        if not isinstance(items, list):
            self.fail("instance_groups", f"must be a list of groups, got {_type_name(items)}")
            return [], True
        if not items:
            self.fail("instance_groups", "must name at least one group")
        if len(items) > MAX_INSTANCE_GROUPS:
            self.fail("instance_groups", f"at most {MAX_INSTANCE_GROUPS} instance groups, got {len(items)}",
                      "the service's limit (ResourceConfig.InstanceGroups)")
        groups: list[InstanceGroup] = []
        seen: set[str] = set()
        for i, item in enumerate(items):
            path = f"instance_groups[{i}]"
            if not isinstance(item, dict):
                self.fail(path, f"must be a mapping, got {_type_name(item)}")
                continue
            item = _drop_nulls(item)
            self.unknown_keys(item, GROUP_KEYS, path + ".")
            name = self.string(item, "instance_group_name", path + ".instance_group_name")
            itype = self.string(item, "instance_type", path + ".instance_type")
            count = self.integer(item, "instance_count", path + ".instance_count")
            for key in GROUP_KEYS:
                if key not in item:
                    self.fail(f"{path}.{key}", "missing")
            if name is not None:
                if not GROUP_NAME_PATTERN.fullmatch(name):
                    self.fail(path + ".instance_group_name", f"{name!r}: 1-64 characters, no '/' or control chars")
                if name in seen:
                    self.fail(path + ".instance_group_name", f"duplicate group name {name!r}",
                              "instance group names must be unique")
                seen.add(name)
            if itype is not None:
                self.instance_type(itype, path + ".instance_type")
            if count is not None and count < 0:
                self.fail(path + ".instance_count", f"must be 0 or more, got {count}")
            if name is not None and itype is not None and count is not None:
                groups.append(InstanceGroup(name, itype, count))
        total = sum(g.instance_count for g in groups if g.instance_count > 0)
        if groups and len(groups) == len(items) and total == 0:
            self.fail("instance_groups", "every group has instance_count 0: the job has no host",
                      "give at least one group a positive instance_count")
        if total > MAX_HOSTS:
            self.fail("instance_groups", f"{total} hosts in all is more than this emulator runs ({MAX_HOSTS})",
                      "every host is a container on this one machine")
        return groups, True

    def instance_type(self, name: str, path: str) -> None:
        if lookup_instance_type(name) is None:
            near = suggest_instance_types(name)
            hint = f"did you mean {', '.join(near)}?" if near else "see `hetero-emu instance-types`"
            self.fail(path, f"unknown instance type {name!r}", hint)

    def code(self, raw: Mapping[str, Any]) -> tuple[str | None, Path | None]:
        entry_point = self.string(raw, "entry_point", "entry_point")
        src_text = self.string(raw, "source_dir", "source_dir")
        if src_text is not None and ("://" in src_text and not src_text.startswith("file://")):
            self.fail("source_dir", f"{_preview(src_text)}: only local folders are supported", "give a local path")
            return entry_point, None
        source_dir = self.existing(
            self.local_path(src_text, "source_dir", None, "source_dir") if src_text else None,
            "source_dir",
            "source_dir",
        )
        if source_dir is not None and _kind(source_dir) != "dir":
            self.fail("source_dir", f"{source_dir} is not a directory")
            return entry_point, None
        if source_dir is not None and self.no_special_files(source_dir, "source_dir", "source_dir") is None:
            source_dir = None
        if entry_point is None:
            return None, source_dir
        if Path(entry_point).is_absolute() or ".." in Path(entry_point).parts:
            self.fail("entry_point", f"{_preview(entry_point)} must be a relative path inside source_dir")
            return None, source_dir
        if src_text is None:
            # As in the SDK: without source_dir, entry_point is a file next to the spec and only that
            # file is uploaded; it becomes the whole of /opt/ml/code.
            try:
                script = _resolve(self.base_dir, entry_point)
            except _BadPath as err:
                self.fail("entry_point", f"{_preview(entry_point)} is {err}")
                return None, None
            if _kind(script) != "file":
                self.fail("entry_point", f"script not found: {script}",
                          "set source_dir, or give a path relative to the spec file")
                return None, None
            # The name as given, not its link target's: the SDK tars the script under its basename
            # (sagemaker/utils.py create_tar_file, arcname=os.path.basename) with links dereferenced.
            return _given_name(entry_point, script), script
        if source_dir is not None and _kind(source_dir / entry_point) != "file":
            self.fail("entry_point", f"{_preview(entry_point)} not found in source_dir {source_dir}")
            return None, source_dir
        return entry_point, source_dir

    def inputs(
        self, raw: Mapping[str, Any], group_names: list[str], heterogeneous: bool, s3_root: Path | None
    ) -> dict[str, TrainingInput]:
        value = raw.get("inputs")
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.fail("inputs", f"must be a mapping of channel name to input, got {_type_name(value)}")
            return {}
        if len(value) > MAX_CHANNELS:
            self.fail("inputs", f"at most {MAX_CHANNELS} channels, got {len(value)}",
                      "the service's limit for InputDataConfig")
        channels: dict[str, TrainingInput] = {}
        assigned: list[str] = []
        unassigned: list[str] = []
        for name, item in value.items():
            path = f"inputs.{_key_text(name)}"
            if not isinstance(name, str) or not CHANNEL_NAME_PATTERN.fullmatch(name) or name in (".", ".."):
                self.fail(path, f"channel name {_preview(name)} breaks SageMaker's pattern "
                          f"{CHANNEL_NAME_PATTERN.pattern}")
                continue
            if isinstance(item, str):
                item = {"s3_data": item}
            if not isinstance(item, dict):
                self.fail(path, f"must be a path/URI or a mapping of TrainingInput fields, got {_type_name(item)}")
                continue
            item = _drop_nulls(item)
            self.unknown_keys(item, CHANNEL_KEYS, path + ".")
            data = self.string(item, "s3_data", path + ".s3_data")
            if data is None and "s3_data" not in item:
                self.fail(path + ".s3_data", "missing", "a local folder or file, file:// or s3:// URI")
            dist = self.string(item, "distribution", path + ".distribution") or "FullyReplicated"
            if dist not in S3_DISTRIBUTIONS:
                self.fail(path + ".distribution", f"must be one of {', '.join(S3_DISTRIBUTIONS)}, got {dist!r}",
                          did_you_mean(dist, S3_DISTRIBUTIONS))
            mode = self.string(item, "input_mode", path + ".input_mode")
            if mode is not None and mode not in INPUT_MODES:
                self.fail(path + ".input_mode", f"must be one of {', '.join(INPUT_MODES)}, got {mode!r}",
                          did_you_mean(mode, INPUT_MODES))
            elif mode == "Pipe":
                self.fail(path + ".input_mode", PIPE_UNSUPPORTED, "use File or FastFile")
            data_type = self.string(item, "s3_data_type", path + ".s3_data_type") or "S3Prefix"
            if data_type not in S3_DATA_TYPES:
                self.fail(path + ".s3_data_type", f"{data_type!r} is not supported yet", "use S3Prefix")
            wrapping = self.string(item, "record_wrapping", path + ".record_wrapping")
            if wrapping not in (None, "None"):
                self.fail(path + ".record_wrapping", f"{wrapping!r} is not supported yet", "omit it")
            content_type = self.string(item, "content_type", path + ".content_type")
            groups = self.string_list(item, "instance_groups", path + ".instance_groups")
            if groups is not None:
                if not heterogeneous:
                    self.fail(path + ".instance_groups", "instance groups are only for a heterogeneous cluster",
                              "use instance_groups at the top level, or drop this field")
                for g in groups:
                    if g not in group_names:
                        self.fail(path + ".instance_groups", f"no instance group named {g!r}",
                                  did_you_mean(g, group_names) or f"groups: {', '.join(group_names)}")
                if not groups:
                    self.fail(path + ".instance_groups", "must name at least one group, or be omitted")
                assigned.append(name)
            else:
                unassigned.append(name)
            source = None
            if data is not None:
                source = self.existing(self.local_path(data, path + ".s3_data", s3_root, "data"),
                                       path + ".s3_data", "channel data")
            if source is None:
                continue
            listing = self.no_special_files(source, path + ".s3_data", "a channel")
            if listing is None or data is None:
                continue
            single_file = _kind(source) == "file"
            # A single file keeps the name it was given (`train.csv -> ../cache/blob1` is the object
            # `train.csv`, as `aws s3 cp` names it), not the name of what the link points to.
            files = (_given_name(data, source),) if single_file else listing.files
            if dist == "ShardedByS3Key" and not files:
                self.fail(path + ".s3_data", f"{source} holds no file to shard")
            channels[name] = TrainingInput(
                s3_data=data or "",
                source=source,
                distribution=dist,
                input_mode=mode,
                content_type=content_type,
                instance_groups=groups or (),
                s3_data_type=data_type,
                files=files,
                single_file=single_file,
                links_out=listing.links_out,
            )
        if assigned and unassigned:
            # The service rejects a job where only some channels name instance groups.
            self.fail("inputs", f"channels {', '.join(assigned)} name instance groups but "
                      f"{', '.join(unassigned)} do not", "assign instance_groups to every channel or to none")
        return channels

    def distribution(
        self, raw: Mapping[str, Any], group_names: list[str], heterogeneous: bool
    ) -> Distribution | None:
        value = raw.get("distribution")
        if value is None:
            return None
        if not isinstance(value, dict):
            self.fail("distribution", f"must be a mapping, got {_type_name(value)}")
            return None
        allowed = (*DISTRIBUTION_STRATEGIES, "instance_groups")
        self.unknown_keys(value, allowed, "distribution.")
        strategies = [k for k in value if k in DISTRIBUTION_STRATEGIES]
        # smdistributed model parallel runs on top of MPI: the SDK allows exactly that pair.
        if set(strategies) == {"mpi", "smdistributed"}:
            strategies = ["mpi"]
        if len(strategies) != 1:
            self.fail("distribution", f"give exactly one strategy, got {len(strategies)}",
                      f"one of {', '.join(DISTRIBUTION_STRATEGIES)}")
            return None
        strategy = strategies[0]
        options = value[strategy]
        if not isinstance(options, dict):
            self.fail(f"distribution.{strategy}", f"must be a mapping such as {{enabled: true}}, "
                      f"got {_type_name(options)}")
            return None
        if not self.strategy_options(value):
            return None
        groups = self.string_list(value, "instance_groups", "distribution.instance_groups")
        if groups is not None:
            for g in groups:
                if g not in group_names:
                    self.fail("distribution.instance_groups", f"no instance group named {g!r}",
                              did_you_mean(g, group_names) or f"groups: {', '.join(group_names)}")
        if heterogeneous and len(group_names) > 1 and (groups is None or len(groups) != 1):
            self.fail("distribution.instance_groups",
                      "a heterogeneous cluster's distribution must name exactly one instance group",
                      "e.g. instance_groups: [dnn_group]")
        elif groups is not None and len(groups) > 1:
            self.fail("distribution.instance_groups", "only one instance group can be named")
        extra = {k: v for k, v in value.items() if k in DISTRIBUTION_STRATEGIES and k != strategy}
        return Distribution(strategy, {**extra, strategy: options}, groups or ())

    def strategy_options(self, distribution: Mapping[str, Any]) -> bool:
        """Each strategy's options have the SDK's shapes: `enabled` a boolean, MPI's counts integers."""
        ok = True
        for strategy in DISTRIBUTION_STRATEGIES:
            options = distribution.get(strategy)
            if options is None:
                continue
            path = f"distribution.{strategy}"
            if not isinstance(options, dict):
                self.fail(path, f"must be a mapping, got {_type_name(options)}")
                ok = False
                continue
            blocks = options.items() if strategy == "smdistributed" else [("", options)]
            for name, block in blocks:
                where = f"{path}.{name}" if name else path
                if not isinstance(block, dict):
                    self.fail(where, f"must be a mapping such as {{enabled: true}}, got {_type_name(block)}")
                    ok = False
                    continue
                checks = (("enabled", bool), ("processes_per_host", int), ("custom_mpi_options", str))
                for key, kind in checks:
                    if key in block and (not isinstance(block[key], kind) or
                                         (kind is int and isinstance(block[key], bool))):
                        self.fail(f"{where}.{key}", f"must be {_a(_type_name(kind()))}, got {_preview(block[key])}")
                        ok = False
        return ok

    def hyperparameters(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        value = raw.get("hyperparameters")
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.fail("hyperparameters", f"must be a mapping, got {_type_name(value)}")
            return {}
        if len(value) > MAX_HYPERPARAMETERS:
            self.fail("hyperparameters", f"at most {MAX_HYPERPARAMETERS} hyperparameters, got {len(value)}",
                      "the service's limit for CreateTrainingJob HyperParameters")
        for key, item in value.items():
            if not isinstance(key, str):
                self.fail(f"hyperparameters.{_preview(key)}", "names must be strings")
                continue
            path = f"hyperparameters.{_preview(key) if len(key) > 64 else key}"
            if key.startswith("sagemaker_"):
                self.fail(path, "names starting with sagemaker_ are reserved",
                          "the emulator sets them, as the SDK does")
            elif len(key) > MAX_HYPERPARAMETER_NAME:
                self.fail(path, f"name longer than {MAX_HYPERPARAMETER_NAME} characters",
                          "the service's limit for CreateTrainingJob HyperParameters")
            elif surprises := list(_ambiguous_in(item, path)):
                for where, marker in surprises:
                    self.fail(where, f"{marker.text} is read by YAML 1.1 as {marker.meaning}, not as written",
                              f"quote it ('{marker.text}') to pass the text, or write "
                              f"{json.dumps(marker.value)} if you mean that")
            elif (problem := _json_problem(item)) is not None:
                # The SDK json.dumps every value: a YAML date, set or binary has no JSON form.
                self.fail(path, problem, "quote it to make it a string")
            elif len(encoded := json.dumps(item)) > MAX_HYPERPARAMETER_VALUE:
                self.fail(path, f"longer than {MAX_HYPERPARAMETER_VALUE} characters once JSON-encoded "
                          f"({len(encoded)})", "the service's limit: pass big values as a channel")
        return dict(value)

    def environment(self, raw: Mapping[str, Any]) -> dict[str, str]:
        value = raw.get("environment")
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.fail("environment", f"must be a mapping, got {_type_name(value)}")
            return {}
        if len(value) > MAX_ENVIRONMENT:
            self.fail("environment", f"at most {MAX_ENVIRONMENT} environment variables, got {len(value)}",
                      "the service's limit for CreateTrainingJob Environment")
        env: dict[str, str] = {}
        for key, item in value.items():
            path = f"environment.{_key_text(key)}"
            if not isinstance(key, str) or not ENV_NAME_PATTERN.fullmatch(key):
                self.fail(path, "not a valid environment variable name", "letters, digits and _, not starting "
                          "with a digit")
            elif not isinstance(item, str | int | float | date):
                self.fail(path, f"must be a string, number or boolean, got {_type_name(item)}")
            elif isinstance(item, int) and item.bit_length() > 4 * MAX_ENVIRONMENT_VALUE:
                self.fail(path, f"longer than {MAX_ENVIRONMENT_VALUE} characters", "the service's limit")
            else:
                text = str(item).lower() if isinstance(item, bool) else str(item)
                if len(text) > MAX_ENVIRONMENT_VALUE:
                    self.fail(path, f"longer than {MAX_ENVIRONMENT_VALUE} characters ({len(text)})",
                              "the service's limit for CreateTrainingJob Environment")
                elif "\0" in text:
                    self.fail(path, "must not contain a NUL character", "no process environment can hold one")
                else:
                    env[key] = text
        return env


def _json_problem(value: Any) -> str | None:
    """Why json.dumps cannot encode the value as the SDK does, or None when it can.

    YAML also yields dates, sets and bytes; a value built in Python may be recursive, huge or hold an
    int that Python cannot print. The walk is iterative and stops after MAX_YAML_NODES values.
    """
    budget = MAX_YAML_NODES
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        budget -= 1
        if budget < 0:
            return f"more than {MAX_YAML_NODES} values (or a recursive value) cannot be JSON-encoded"
        if depth > MAX_YAML_DEPTH:
            return f"a value nested more than {MAX_YAML_DEPTH} levels deep cannot be JSON-encoded"
        if item is None or isinstance(item, str | bool | float):
            continue
        if isinstance(item, int):
            if item.bit_length() > 4 * MAX_HYPERPARAMETER_VALUE:
                return "a number with that many digits cannot be JSON-encoded"
            continue
        if isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, dict):
            for k, v in item.items():
                if not isinstance(k, str):
                    return f"a mapping with {_a(_type_name(k))} key cannot be JSON-encoded"
                stack.append((v, depth + 1))
        else:
            return f"{_a(_type_name(item))} cannot be JSON-encoded"
    return None


def _ambiguous_in(value: Any, path: str) -> Iterator[tuple[str, _Ambiguous]]:
    """Every _Ambiguous marker the loader left in a hyperparameter, with its field path. Only specs
    read from YAML hold markers; the walk is bounded as the loader bounded the value."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, _Ambiguous):
            yield where, item
        elif isinstance(item, list):
            stack.extend((v, f"{where}[{i}]") for i, v in reversed(list(enumerate(item))))
        elif isinstance(item, dict):
            stack.extend((v, f"{where}.{_key_text(k)}") for k, v in reversed(list(item.items())))


_ENTRY_POINT_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+-/")


def entry_point_problem(name: str) -> str | None:
    """Why the sagemaker-training toolkit refuses to run `name` as the entry point, or None.

    The toolkit (v5.1.4, sagemaker_training/process.py `validate_entry_point`, called before it
    installs or runs the script) allows a relative path of letters, digits and `. _ + - /` whose
    first character is not `-`, `+` or `/`, with no empty, `.` or `..` segment, and fails the job
    with ClientError otherwise. One difference: its regex ends in `$`, which also matches before a
    final newline, so it lets `train.py\n` through; here a newline is refused like any other
    character outside the set.
    """
    unsupported = sorted({c for c in name if c not in _ENTRY_POINT_CHARACTERS})
    if unsupported:
        return f"the character(s) {', '.join(repr(c) for c in unsupported)}"
    if name[:1] in ("-", "+"):
        return f"a leading {name[0]!r}" + (", which is read as a command-line option" if name[0] == "-" else "")
    if name[:1] == "/":
        return "a leading '/', which makes it an absolute path"
    segments = name.split("/")
    if "" in segments:
        return "an empty path segment ('//' or a trailing '/')"
    if any(segment in (".", "..") for segment in segments):
        return "'.' or '..' path segments"
    return None


def _drop_nulls(raw: Mapping[Any, Any]) -> dict[Any, Any]:
    """An explicit `key: null` means the same as leaving the key out (so "missing" is reported)."""
    return {k: v for k, v in raw.items() if v is not None}


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _default_base_name(image: str) -> str:
    """The SDK's base name when none is given: the image's repository name."""
    name = image.rsplit("/", 1)[-1].split(":", 1)[0]
    cleaned = re.sub(r"[^a-zA-Z0-9-]+", "-", name).strip("-")
    return cleaned[:39] or "training-job"


# --------------------------------------------------------------------------------------------------
# The Python API


class Job:
    """A job built in Python with the SDK's argument names; `run()` runs it like `hetero-emu run`.

    Keyword arguments are the YAML spec's keys; `InstanceGroup` and `TrainingInput` objects are
    accepted where the SDK takes them, and relative paths resolve against `base_dir` (default: cwd).

    >>> Job(entry_point="train.py", source_dir="code",
    ...     instance_groups=[InstanceGroup("data_group", "ml.c5.xlarge", 2),
    ...                      InstanceGroup("dnn_group", "ml.p3.2xlarge", 1)],
    ...     inputs={"training": TrainingInput("./data", instance_groups=("data_group",))})
    """

    def __init__(self, *, base_dir: Path | str | None = None, **kwargs: Any) -> None:
        self.base_dir = Path(base_dir) if base_dir is not None else Path.cwd()
        self.raw = _to_raw(kwargs)

    def spec(self) -> JobSpec:
        return validate(self.raw, base_dir=self.base_dir.resolve(), source="Job(...)")

    def run(self, **run_options: Any) -> Any:
        """Validate, plan and run on the local Docker engine; returns the `JobResult`."""
        from emulator.runner import run_job  # imported late: only running needs the Docker layer

        return run_job(self.spec(), **run_options)


def _to_raw(value: Any) -> Any:
    """Turn SDK-style objects (InstanceGroup, TrainingInput) into the YAML spec's plain mapping."""
    if isinstance(value, InstanceGroup):
        return {
            "instance_group_name": value.instance_group_name,
            "instance_type": value.instance_type,
            "instance_count": value.instance_count,
        }
    if isinstance(value, TrainingInput):
        out: dict[str, Any] = {"s3_data": value.s3_data, "distribution": value.distribution,
                               "s3_data_type": value.s3_data_type}
        if value.input_mode:
            out["input_mode"] = value.input_mode
        if value.content_type:
            out["content_type"] = value.content_type
        if value.instance_groups:
            out["instance_groups"] = list(value.instance_groups)
        return out
    if isinstance(value, Mapping):
        return {k: _to_raw(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [_to_raw(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value
