"""The service's rules for a training job, written once: `Validator` walks the internal mapping (the
YAML spec's keys and shapes) once, collects *every* problem with its field path, and builds the
frozen `JobSpec`.

Validation is pure: what the rules ask the filesystem (what a path is, a folder's listing, a
sourcedir.tar.gz's members, the code's requirements.txt) goes through the `probes.Probes` the caller
injects; the loaders give the real filesystem (`probes.DISK`), a test may give a fake. An input
adapter converts its input to the internal mapping and gives `Validator` a `field_name` hook
(`fields.FieldReader`), so each problem names the field in the input's own words.
"""

from __future__ import annotations

import json
import os
import re
import tarfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from datetime import date
from pathlib import Path
from typing import Any, NamedTuple

from emulator.defaults import DEFAULT_IMAGE
from emulator.jobspec import debugger_config, placement, s3
from emulator.jobspec.faults import Injection, parse_injection
from emulator.jobspec.faults import problems as attempt_problems
from emulator.jobspec.fields import FieldReader, as_written
from emulator.jobspec.hardware_modes import parse_gpu_mode
from emulator.jobspec.instance_types import lookup as lookup_instance_type
from emulator.jobspec.instance_types import suggest as suggest_instance_types
from emulator.jobspec.metric_definitions import Definition
from emulator.jobspec.metric_definitions import parse as parse_metrics
from emulator.jobspec.metric_definitions import problems as metric_problems
from emulator.jobspec.model import (
    BASE_JOB_NAME_PATTERN,
    CHANNEL_KEYS,
    CHANNEL_NAME_PATTERN,
    DEFAULT_LOG_LEVEL,
    DEFAULT_MAX_RUN,
    DEFAULT_REGION,
    DEFAULT_TENSORBOARD_PATH,
    DISTRIBUTION_STRATEGIES,
    ENV_NAME_PATTERN,
    GROUP_KEYS,
    GROUP_NAME_PATTERN,
    HOMOGENEOUS_GROUP,
    IMAGE_REFERENCE_PATTERN,
    INPUT_MODES,
    JOB_KEYS,
    JOB_NAME_PATTERN,
    MAX_CHANNELS,
    MAX_CONTAINER_ITEM,
    MAX_CONTAINER_ITEMS,
    MAX_ENVIRONMENT,
    MAX_ENVIRONMENT_VALUE,
    MAX_HOSTS,
    MAX_HYPERPARAMETER_NAME,
    MAX_HYPERPARAMETER_VALUE,
    MAX_HYPERPARAMETERS,
    MAX_IMAGE_URI,
    MAX_INSTANCE_GROUPS,
    MAX_JOB_NAME,
    MAX_KEEP_ALIVE,
    MAX_RETRY_ATTEMPTS,
    MAX_RUN_LIMIT,
    RECORD_WRAPPER_TYPES,
    REQUIRED_GROUP_KEYS,
    S3_DATA_TYPES,
    S3_DISTRIBUTIONS,
    SMDISTRIBUTED_STRATEGIES,
    STRATEGY_OPTIONS,
    Distribution,
    InstanceGroup,
    JobSpec,
    TrainingInput,
)
from emulator.jobspec.model import strategy_enabled as _enabled
from emulator.jobspec.paths import BadPath, Listing, given_name, parse_uri
from emulator.jobspec.probes import Probes
from emulator.jobspec.requirements import Requirements
from emulator.jobspec.sizes import MAX_SIZE, MIN_SHM, parse_size
from emulator.jobspec.wording import did_you_mean, key_text, preview, type_name, with_article
from emulator.jobspec.yaml_loader import MAX_YAML_DEPTH, MAX_YAML_NODES, Ambiguous
from emulator.jobspec.yaml_tuning import read_tuning

# What the SageMaker SDKs upload under <S3OutputPath>/<job>/ before the job: v2 the code
# (`source/sourcedir.tar.gz`, sagemaker/fw_utils.py tar_and_upload_dir), v3 its code and driver
# channels (`input/code`, `input/sm_drivers`). The job's own files go beside them.
SDK_UPLOADS = ("source", "input")
SDK_CHANNELS = "input"  # of SDK_UPLOADS, the one whose folders are channels (TrainingInput.copied)


class _Launch(NamedTuple):
    """How the job's code is started (`Validator.launch`)."""

    entry_point: str | None
    source_dir: Path | None
    entry: tuple[str, ...] | None  # container_entry_point
    args: tuple[str, ...] | None  # container_arguments
    requirements: Requirements | None


class _Outputs(NamedTuple):
    """Where the job writes (`Validator.outputs`), and the channels with the SDK's own marked."""

    output_text: str
    output_path: Path | None
    checkpoint_text: str | None
    checkpoint: Path | None
    checkpoint_local_path: str
    inputs: dict[str, TrainingInput]
    tensorboard_text: str | None
    tensorboard: Path | None
    tensorboard_local_path: str


class _Place(NamedTuple):
    """A place the job reads or writes (`Validator.no_overlap`): its field, where it is here, and
    the text the user wrote for it (an s3:// URI, a path), which a problem names."""

    field: str
    path: Path | None
    text: str


class _ChannelFields(NamedTuple):
    """One channel's fields as checked (`Validator.channel_fields`), before its data is looked at."""

    data: str | None  # s3_data
    distribution: str
    input_mode: str | None
    data_type: str
    piped: bool  # streamed: its own input mode, else the job's, is Pipe
    wrapping: str
    content_type: str | None
    groups: tuple[str, ...] | None


class Validator(FieldReader):
    def __init__(self, base_dir: Path, probes: Probes, field_name: Callable[[str], str] = as_written,
                 hyperparameters_encoded: bool = False) -> None:
        super().__init__(field_name)
        self.base_dir = base_dir
        self.probes = probes
        # Hyperparameter values are the API's strings already (a request), not values to JSON-encode.
        self.hyperparameters_encoded = hyperparameters_encoded
        # Where s3:// URIs live (`s3.choose_root`), set by `job`; S3 URIs by the paths they map to.
        self.s3_root = s3.choose_root(None)
        self.s3_uris: dict[Path, str] = {}
        self.source_archive = False  # source_dir is a sourcedir.tar.gz (set by `code`)
        # The input adapter found no code where the input says it is, and said so: `code` looks no further.
        self.code_refused = False

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


    def local_path(self, text: str, path: str, s3_root: Path | None, what: str) -> Path | None:
        """Resolve a local path, file:// URI or s3:// URI (under the local S3 root) to an absolute path."""
        try:
            return self._local_path(text, path, s3_root)
        except BadPath as err:
            self.fail(path, f"{preview(text)} is {err}", f"give the {what} as a plain path or URI")
            return None

    def root(self, spec_text: str | None) -> Path | None:
        """The S3 root (`s3.choose_root`): --s3-root, $HETERO_EMU_S3_ROOT, local_s3_root, the default;
        None when the one chosen is unusable (reported). A root the user named must exist."""
        self.s3_root = s3.choose_root(None)
        if self.s3_root.origin == "the default root" and spec_text:
            spec_root = self.existing(self.local_path(spec_text, "local_s3_root", None, "local S3 root"),
                                      "local_s3_root", "local S3 root")
            if spec_root is not None:
                self.s3_root = s3.Root(spec_root, "local_s3_root", True)
            return spec_root
        if self.s3_root.named and self.probes.kind_of(self.s3_root.path) == "missing":
            self.fail(self.s3_root.origin, f"S3 root not found: {self.s3_root.path}",
                      "a folder whose subfolders are buckets")
            return None
        return self.s3_root.path

    def _local_path(self, text: str, path: str, s3_root: Path | None) -> Path | None:
        if text[:3].lower() == "s3:" and s3_root is None:
            if path == "local_s3_root":
                self.fail(path, f"{preview(text)} is an S3 URI", "local_s3_root is the local folder S3 URIs map to")
            return None  # the root is unusable: reported already
        if text[:3].lower() == "s3:" and s3_root is not None:
            try:
                resolved = s3.local_path(self.s3_root, text, self.probes.resolve)
            except s3.BadS3Uri as err:
                self.fail(path, str(err), err.hint)
                return None
            self.s3_uris[resolved] = text
            return resolved
        if text.startswith("file://"):
            return self.probes.resolve(self.base_dir, parse_uri(text)[1] or ".")
        if "://" in text:
            self.fail(path, f"unsupported URI scheme in {preview(text)}", "use a local path, file:// or s3://")
            return None
        return self.probes.resolve(self.base_dir, text)

    def existing(self, resolved: Path | None, path: str, what: str) -> Path | None:
        if resolved is None:
            return None
        kind = self.probes.kind_of(resolved)
        if kind == "missing" and resolved in self.s3_uris:
            self.fail(path, f"{what} not found: no prefix {self.s3_uris[resolved]} under the "
                      f"{self.s3_root.describe()} (looked for {resolved})",
                      f"put the objects at {resolved}, or choose the root with --s3-root, {s3.ENV_S3_ROOT} or "
                      "local_s3_root")
            return None
        if kind == "missing":
            self.fail(path, f"{what} not found: {resolved}", "check the path; relative paths start at the spec file")
            return None
        if kind.startswith("unreadable"):
            self.fail(path, f"{what} {resolved} is {kind}", "check its permissions")
            return None
        return resolved

    def no_special_files(self, source: Path, path: str, what: str) -> Listing | None:
        """A folder (or file) the job reads, listed with links followed (`scan`), or None if it
        holds a socket, FIFO or device (also behind a link: staging follows links), or a link that
        cannot be followed. A read-only bind mount still lets a process connect() to a socket or open
        a device, so a channel on /var/run would hand the container the Docker engine."""
        listing = self.probes.scan(source)
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
        if resolved is not None and (problem := self.probes.folder_problem(resolved)) is not None:
            message, hint = problem
            if hint and path == "output_path" and "write to" in hint:
                hint += ", or run with --output-path DIR"
            self.fail(path, message, hint)

    # -- the job


    def job(self, raw: Mapping[str, Any]) -> JobSpec | None:
        """The whole job, in the order its problems are reported: names and image, the cluster, the
        S3 root, the code and how it is started, the channels and distribution, the values handed to
        the script, where the job writes, and the run's settings."""
        raw = _drop_nulls(raw)
        self.unknown_keys(raw, JOB_KEYS, "")
        job_name, base = self.job_names(raw)
        image = self.image(raw)
        groups, heterogeneous = self.groups(raw)
        group_names = [g.instance_group_name for g in groups]
        s3_root = self.bucket_root(raw)
        launch = self.launch(raw, s3_root)
        job_mode = self.job_input_mode(raw)
        inputs = self.inputs(raw, group_names, heterogeneous, s3_root, job_mode)
        distribution = self.distribution(raw, group_names, heterogeneous, [g.instance_type for g in groups])
        hyperparameters = self.hyperparameters(raw)
        environment = self.environment(raw)
        written = self.outputs(raw, s3_root, job_name, launch.source_dir, inputs)
        debug_hook, profiler = debugger_config.read(self, raw, s3_root)
        max_run = self.integer(raw, "max_run", "max_run")
        if max_run is not None and not 1 <= max_run <= MAX_RUN_LIMIT:
            self.fail("max_run", f"must be between 1 and {MAX_RUN_LIMIT} seconds, got {max_run}")
        shm_size = self.shm_size(raw)
        managed = self.managed(raw, max_run if max_run is not None else DEFAULT_MAX_RUN)
        gpus = self.gpu_mode(raw)
        definitions = self.metric_definitions(raw)
        isolation = self.boolean(raw, "enable_network_isolation", "enable_network_isolation")
        uncompressed = self.boolean(raw, "disable_output_compression", "disable_output_compression")
        log_level = self.integer(raw, "container_log_level", "container_log_level")
        region = self.string(raw, "region", "region") or DEFAULT_REGION
        if not re.fullmatch(r"[a-z]{2}(-[a-z]+)+-\d", region):
            self.fail("region", f"{preview(region)} is not an AWS region name", "e.g. us-east-1")
        tuning = read_tuning(self, raw["tuning"], "tuning") if "tuning" in raw else None

        if self.problems or written.output_path is None:
            return None
        return JobSpec(
            job_name=job_name,
            base_job_name=base or _default_base_name(image),
            image_uri=image,
            entry_point=launch.entry_point,
            source_dir=launch.source_dir,
            requirements=launch.requirements,
            instance_groups=tuple(groups),
            heterogeneous=heterogeneous,
            hyperparameters=hyperparameters,
            hyperparameters_encoded=self.hyperparameters_encoded,
            environment=environment,
            inputs=written.inputs,
            input_mode=job_mode,
            distribution=distribution,
            output_path=written.output_path,
            checkpoint_s3_uri=written.checkpoint,
            output_s3_uri=written.output_text.rstrip("/") if written.output_text.startswith("s3://") else None,
            checkpoint_uri=written.checkpoint_text if written.checkpoint_text and
            written.checkpoint_text.startswith("s3://") else None,
            checkpoint_local_path=written.checkpoint_local_path,
            tensorboard_output_path=written.tensorboard,
            tensorboard_uri=written.tensorboard_text if written.tensorboard_text and
            written.tensorboard_text.startswith("s3://") else None,
            tensorboard_local_path=written.tensorboard_local_path,
            debug_hook=debug_hook,
            profiler=profiler,
            max_run=max_run if max_run is not None else DEFAULT_MAX_RUN,
            enable_network_isolation=bool(isolation),
            disable_output_compression=bool(uncompressed),
            container_entry_point=launch.entry,
            container_arguments=launch.args,
            container_log_level=log_level if log_level is not None else DEFAULT_LOG_LEVEL,
            region=region,
            s3_root=s3_root,
            spec_dir=self.base_dir,
            source_archive=self.source_archive,
            shm_size=shm_size,
            gpus=gpus,
            metric_definitions=definitions,
            tuning=tuning,
            **managed,
        )

    def job_names(self, raw: Mapping[str, Any]) -> tuple[str | None, str | None]:
        """job_name (the service's pattern and length) and base_job_name (the pattern, any length)."""
        job_name = self.string(raw, "job_name", "job_name")
        if job_name is not None and len(job_name) > MAX_JOB_NAME:
            self.fail("job_name", f"{preview(job_name)} is {len(job_name)} characters long: SageMaker allows at "
                      f"most {MAX_JOB_NAME}", "shorten it, or give base_job_name (the SDK cuts a base to fit)")
        elif job_name is not None and not JOB_NAME_PATTERN.fullmatch(job_name):
            self.fail("job_name", f"{preview(job_name)} breaks SageMaker's pattern {JOB_NAME_PATTERN.pattern}",
                      "letters, digits and hyphens, 1-63 chars, starting and ending alphanumeric")
        base = self.string(raw, "base_job_name", "base_job_name")
        if base is not None and not BASE_JOB_NAME_PATTERN.fullmatch(base):
            self.fail("base_job_name", f"{preview(base)} breaks SageMaker's pattern {JOB_NAME_PATTERN.pattern}",
                      "letters, digits and hyphens, starting and ending alphanumeric")
        return job_name, base

    def image(self, raw: Mapping[str, Any]) -> str:
        """image_uri (default: the training image): a Docker reference within the service's length."""
        image = self.string(raw, "image_uri", "image_uri") or DEFAULT_IMAGE
        if len(image) > MAX_IMAGE_URI:
            self.fail("image_uri", f"longer than {MAX_IMAGE_URI} characters", "the service's limit for TrainingImage")
        elif not IMAGE_REFERENCE_PATTERN.fullmatch(image):
            self.fail("image_uri", f"{preview(image)} is not a valid Docker image reference",
                      "[registry[:port]/]repository[:tag][@digest], the repository in lowercase, "
                      "e.g. my-trainer:latest")
        return image

    def bucket_root(self, raw: Mapping[str, Any]) -> Path | None:
        """The S3 root s3:// URIs map under (`root`), or None when it is unusable (reported)."""
        s3_root = self.root(self.string(raw, "local_s3_root", "local_s3_root"))
        if s3_root is not None and self.s3_root.named and self.probes.kind_of(s3_root) != "dir":
            self.fail(self.s3_root.origin, f"the {self.s3_root.describe()} is not a folder",
                      "a folder whose subfolders are buckets")
            return None
        return s3_root

    def launch(self, raw: Mapping[str, Any], s3_root: Path | None) -> _Launch:
        """The code (`code`), the container's entry point and arguments, the program the toolkit will
        run, and the requirements.txt it will install."""
        entry_point, source_dir = self.code(raw, s3_root)
        entry = self.command_list(raw, "container_entry_point")
        args = self.command_list(raw, "container_arguments")
        if entry_point is None and entry is None and "entry_point" not in raw:
            self.fail("entry_point", "missing", "name the script to run (relative to source_dir)")
        # The program the toolkit's `train` will run (sagemaker_program), checked as the toolkit will.
        toolkit = entry is None or os.path.basename(entry[0]) == "train"
        if entry_point is not None and toolkit and (problem := entry_point_problem(entry_point)) is not None:
            self.fail("entry_point", f"{preview(entry_point)} cannot be run by the training toolkit: it "
                      f"contains {problem}", "rename the script so its path holds only letters, digits, "
                      "'.', '_', '+', '-' and '/' and starts with a letter, digit, '.' or '_'")

        # The toolkit pip-installs requirements.txt when the container runs `train` (requirements.find).
        trains = toolkit and (entry is not None or not args or os.path.basename(args[0]) == "train")
        try:
            requirements = self.probes.requirements(source_dir, archive=self.source_archive,
                                                   entry_point=entry_point, toolkit=trains)
        except (OSError, tarfile.TarError) as err:
            self.fail("source_dir", f"cannot read its requirements.txt: {err}")
            requirements = None
        return _Launch(entry_point, source_dir, entry, args, requirements)

    def job_input_mode(self, raw: Mapping[str, Any]) -> str:
        """The job's TrainingInputMode (File unless given), which channels without their own take."""
        job_mode = self.string(raw, "input_mode", "input_mode") or "File"
        if job_mode not in INPUT_MODES:
            self.fail("input_mode", f"must be one of {', '.join(INPUT_MODES)}, got {job_mode!r}",
                      did_you_mean(job_mode, INPUT_MODES))
            job_mode = "File"
        return job_mode

    def outputs(self, raw: Mapping[str, Any], s3_root: Path | None, job_name: str | None, source_dir: Path | None,
                inputs: dict[str, TrainingInput]) -> _Outputs:
        """Where the job writes: output_path and the checkpoints (folders that can be made, apart from
        what the job reads), and checkpoint_local_path; `inputs` with the SDK's own channels marked."""
        out_text = self.string(raw, "output_path", "output_path") or "output"
        output_path = self.local_path(out_text, "output_path", s3_root, "output path")
        self.creatable_folder(output_path, "output_path")
        ckpt_text = self.string(raw, "checkpoint_s3_uri", "checkpoint_s3_uri")
        checkpoint = self.local_path(ckpt_text, "checkpoint_s3_uri", s3_root, "checkpoints") if ckpt_text else None
        self.creatable_folder(checkpoint, "checkpoint_s3_uri")
        if checkpoint is not None and self.probes.kind_of(checkpoint) == "dir":
            # Copied into every host before the job (copytree follows symlinks).
            self.no_special_files(checkpoint, "checkpoint_s3_uri", "checkpoints")
        ckpt_local = self.checkpoint_local_path(raw)
        tb_text, tensorboard, tb_local = self.tensorboard(raw, s3_root)
        out_is_s3 = bool(out_text and out_text.startswith("s3://"))
        job_folder = output_path / job_name if output_path and job_name else None
        written = [_Place("output_path", output_path, out_text),
                   _Place("checkpoint_s3_uri", checkpoint, ckpt_text or ""),
                   _Place("tensorboard_output_config.s3_output_path", tensorboard, tb_text or "")]
        code_text = raw.get("source_dir") if isinstance(raw.get("source_dir"), str) else raw.get("entry_point")
        inputs = self.no_overlap(written, _Place("source_dir", source_dir, str(code_text)), inputs,
                                 _Place("output_path", job_folder, f"{out_text.rstrip('/')}/{job_name}/"), out_is_s3)
        if out_is_s3 and job_folder is not None:
            inputs = {name: replace(c, copied=True) if c.source.is_relative_to(job_folder / SDK_CHANNELS) else c
                      for name, c in inputs.items()}
        return _Outputs(out_text, output_path, ckpt_text, checkpoint, ckpt_local, inputs, tb_text, tensorboard,
                        tb_local)

    def tensorboard(self, raw: Mapping[str, Any], s3_root: Path | None) -> tuple[str | None, Path | None, str]:
        """`tensorboard_output_config: {s3_output_path, container_local_output_path}` (the SDK's
        TensorBoardOutputConfig; the request's S3OutputPath and LocalPath): the folder the files go to,
        one that can be made, and the absolute container path they are written to."""
        field = "tensorboard_output_config"
        config = self.typed(raw, field, field, (dict,))
        if config is None:
            return None, None, DEFAULT_TENSORBOARD_PATH
        self.unknown_keys(config, ("s3_output_path", "container_local_output_path"), field + ".")
        text = self.string(config, "s3_output_path", field + ".s3_output_path")
        if text is None:
            self.fail(field + ".s3_output_path", "missing", "where the TensorBoard files go: a folder or s3:// URI")
            return None, None, DEFAULT_TENSORBOARD_PATH
        target = self.local_path(text, field + ".s3_output_path", s3_root, "TensorBoard output")
        self.creatable_folder(target, field + ".s3_output_path")
        local = self.string(config, "container_local_output_path", field + ".container_local_output_path") \
            or DEFAULT_TENSORBOARD_PATH
        normal = os.path.normpath(local) if local.startswith("/") and "\0" not in local else None
        if normal is None:
            self.fail(field + ".container_local_output_path", "must be an absolute path inside the container")
        elif normal in ("/", "/opt", "/opt/ml", "/opt/ml/output", "/opt/ml/output/data") or (
                normal.startswith("/opt/ml/") and not normal.startswith("/opt/ml/output/")) or \
                normal.startswith("/opt/ml/output/data/"):
            self.fail(field + ".container_local_output_path", f"{local} would hide or sit inside /opt/ml's own "
                      "folders", f"use {DEFAULT_TENSORBOARD_PATH} (the default) or a folder outside /opt/ml")
        return text, target, local

    def checkpoint_local_path(self, raw: Mapping[str, Any]) -> str:
        """Where the checkpoints are in the container: an absolute path that hides none of /opt/ml's
        own folders."""
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
        return ckpt_local

    def metric_definitions(self, raw: Mapping[str, Any]) -> tuple[Definition, ...]:
        """`metric_definitions`: [{Name, Regex}, ...] as the SDK's `metric_definitions=` (at most 40; each
        regex compiles and has the group whose match is the value)."""
        value = self.typed(raw, "metric_definitions", "metric_definitions", (list,))
        if value is None:
            return ()
        found = metric_problems(value)
        for where, message in found:
            self.fail(f"metric_definitions{where}", message)
        return () if found else parse_metrics(value)

    def managed(self, raw: Mapping[str, Any], max_run: int) -> dict[str, Any]:
        """The service's managed features and their rules (CreateTrainingJob's API reference):
        managed spot needs a MaxWaitTimeInSeconds of at least MaxRuntimeInSeconds, and MaxWait is for
        spot only; a warm pool's keep-alive is 0-3600 s; a RetryStrategy retries 1-30 times. `inject`:
        the faults the run causes on purpose (emulator/jobspec/faults.py)."""
        spot = bool(self.boolean(raw, "use_spot_instances", "use_spot_instances"))
        wait = self.integer(raw, "max_wait", "max_wait")
        if wait is not None and wait < 1:
            self.fail("max_wait", f"must be a whole number of seconds, at least 1, got {wait}")
        elif spot and wait is None:
            self.fail("max_wait", "missing: managed spot training requires it",
                      "the longest the job may take, waiting for spot capacity included (the SDK's max_wait)")
        elif spot and wait is not None and wait < max_run:
            self.fail("max_wait", f"{wait} is less than the maximum runtime ({max_run} s): managed spot training "
                      "requires MaxWaitTimeInSeconds >= MaxRuntimeInSeconds")
        elif wait is not None and not spot:
            self.fail("max_wait", "is only for managed spot training",
                      "set use_spot_instances (the request's EnableManagedSpotTraining), or leave it out")
        keep = self.integer(raw, "keep_alive_period_in_seconds", "keep_alive_period_in_seconds")
        if keep is not None and not 0 <= keep <= MAX_KEEP_ALIVE:
            self.fail("keep_alive_period_in_seconds", f"must be between 0 and {MAX_KEEP_ALIVE} seconds, got {keep}")
        retries = self.integer(raw, "max_retry_attempts", "max_retry_attempts")
        if retries is not None and not 1 <= retries <= MAX_RETRY_ATTEMPTS:
            self.fail("max_retry_attempts", f"must be between 1 and {MAX_RETRY_ATTEMPTS}, got {retries}")
        injections: list[Injection] = []
        for i, text in enumerate(self.string_list(raw, "inject", "inject") or ()):
            try:
                injections.append(parse_injection(text))
            except ValueError as err:
                self.fail(f"inject[{i}]", str(err))
        for problem in attempt_problems(tuple(injections), max_run, spot):
            self.fail("inject", problem, "an interruption needs use_spot_instances: true, a time below max_run")
        return {"use_spot_instances": spot, "max_wait": wait, "keep_alive_period_in_seconds": keep or 0,
                "max_retry_attempts": retries, "inject": tuple(injections)}

    def gpu_mode(self, raw: Mapping[str, Any]) -> str | None:
        """`gpus`: how hosts of GPU types get GPUs here (GPU_MODES, emulator/jobspec/hardware_modes.py)."""
        value = self.string(raw, "gpus", "gpus")
        if value is None:
            return None
        try:
            return parse_gpu_mode(value)
        except ValueError as err:
            self.fail("gpus", str(err), "emulate shows each GPU host its type's GPUs without CUDA; real passes "
                      "this machine's; none gives none; auto (the default) picks real or none")
            return None

    def shm_size(self, raw: Mapping[str, Any]) -> int | None:
        """`shm_size`: a size as Docker takes it (2g, 512m) or a number of bytes."""
        value = self.typed(raw, "shm_size", "shm_size", (str, int))
        if value is None:
            return None
        hint = "a size such as 512m or 2g; leave it out for half the host's memory limit"
        try:
            size = parse_size(value) if isinstance(value, str) else value
        except ValueError as err:
            self.fail("shm_size", str(err), hint)
            return None
        if size < MIN_SHM:
            self.fail("shm_size", f"{preview(value)} is less than {MIN_SHM // 1024**2} MiB: too small for /dev/shm",
                      hint)
            return None
        if size > MAX_SIZE:
            self.fail("shm_size", f"{preview(value)} is too large: the engine takes at most "
                      f"{MAX_SIZE // 1024**4} TiB", hint)
            return None
        return size

    def no_overlap(self, written: list[_Place], code: _Place, inputs: Mapping[str, TrainingInput],
                   job_folder: _Place, s3_output: bool) -> dict[str, TrainingInput]:
        """Where the job writes against what it reads; `inputs` back, each channel the job writes
        into or around marked `snapshot`.

        The service puts no rule on these places (CreateTrainingJob's S3OutputPath, CheckpointConfig
        and TensorBoardOutputConfig are S3 URIs with no relation to the channels':
        https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_CreateTrainingJob.html), and it
        downloads a File channel before the algorithm starts, so a notebook's `<prefix>/output` beside
        `<prefix>/data`, or an output path that is the channel's own prefix, works there: the job
        writes under `<output>/<job>/` while the channel shows what was there before
        (https://docs.aws.amazon.com/sagemaker/latest/dg/model-access-training-data.html). Here a
        channel is a mount of the folder itself, which would show the job folder grow, or a checkpoint
        land, while the job runs: such a channel is staged as a share of hard links to the files it
        listed now (`TrainingInput.snapshot`), which the job's writes never change (the job folder is
        new, and checkpoints and TensorBoard's files are renamed into place, `emulator.run.hostfiles`).

        Refused still, where the emulator itself could not keep the user's files apart:
        - data or code inside the job's own folder `<output>/<job>/`, but for what the SDK uploads
          there before the job (`SDK_UPLOADS`, under an s3:// output path): the folder holds the job's
          hosts and logs, and is claimed new for every job so that nothing in it is overwritten
          (`emulator.run.staging.folder_taken`);
        - output_path inside a source_dir folder: each host's copy of the code is made after the job
          folder is, and would take it in (on the service the code is the SDK's sourcedir.tar.gz, made
          before the job);
        - checkpoints or TensorBoard's files inside the code, or around it: their sync would write into
          the code (the service has no local source_dir to write into)."""
        readers = [(f"inputs.{n}.s3_data", c.source, c.s3_data, n) for n, c in inputs.items()]
        snapshot: set[str] = set()
        for place in written:
            if place.path is None:
                continue
            if code.path is not None and (place.path.is_relative_to(code.path) or (
                    place.field != "output_path" and code.path.is_relative_to(place.path))):
                self.fail(place.field, f"{place.text} overlaps {self.field_name(code.field)} ({code.text})",
                          "the job would write into the code it runs: use a folder outside source_dir")
            for _, read, _, name in readers:
                around = place.field != "output_path" and read.is_relative_to(place.path)
                if place.path.is_relative_to(read) or around:
                    snapshot.add(name)
        if job_folder.path is not None:
            places = [_Place(field_name, read, text) for field_name, read, text, _ in readers]
            for field_name, inside, text in [*places, code]:
                if inside is None or not inside.is_relative_to(job_folder.path):
                    continue
                if s3_output and any(inside.is_relative_to(job_folder.path / up) for up in SDK_UPLOADS):
                    continue
                self.fail(job_folder.field, f"{self.field_name(field_name)} ({text}) lies inside the job's own "
                          f"folder {job_folder.text}", "the job's folder is new for every job and holds only what "
                          "the job writes: keep data and code outside it, or give the job another name")
        return {name: replace(c, snapshot=True) if name in snapshot else c for name, c in inputs.items()}

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
            self.fail("instance_groups", f"must be a list of groups, got {type_name(items)}")
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
                self.fail(path, f"must be a mapping, got {type_name(item)}")
                continue
            item = _drop_nulls(item)
            self.unknown_keys(item, GROUP_KEYS, path + ".")
            name = self.string(item, "instance_group_name", path + ".instance_group_name")
            itype = self.string(item, "instance_type", path + ".instance_type")
            count = self.integer(item, "instance_count", path + ".instance_count")
            for key in REQUIRED_GROUP_KEYS:
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
            labels = self.group_placement(item.get("placement"), path + ".placement")
            if name is not None and itype is not None and count is not None:
                groups.append(InstanceGroup(name, itype, count, labels))
        total = sum(g.instance_count for g in groups if g.instance_count > 0)
        if groups and len(groups) == len(items) and total == 0:
            self.fail("instance_groups", "every group has instance_count 0: the job has no host",
                      "give at least one group a positive instance_count")
        if total > MAX_HOSTS:
            self.fail("instance_groups", f"{total} hosts in all is more than this emulator runs ({MAX_HOSTS})",
                      "every host is a container on this one machine")
        return groups, True

    def group_placement(self, value: Any, path: str) -> placement.Placement:
        """A group's `placement`: node label key -> value, both strings a swarm constraint takes
        (emulator.jobspec.placement); sorted by key. A bad label is reported and left out: the group
        itself stays, so that a channel naming it is not reported too."""
        if value is None:
            return ()
        if not isinstance(value, dict):
            self.fail(path, f"must be a mapping of node label to value, got {type_name(value)} {preview(value)}",
                      "e.g. placement: {role: cpu}")
            return ()
        labels: list[tuple[str, str]] = []
        for key, item in value.items():
            where = f"{path}.{key_text(key)}"
            if not isinstance(key, str):
                self.fail(where, f"label keys must be strings, got {type_name(key)}")
            elif (problem := placement.key_problem(key)) is not None:
                self.fail(where, problem, placement.LABEL_KEY_HINT)
            elif not isinstance(item, str):
                # YAML reads `gpu: true` or `zone: 1` as a boolean or number: quoting says which text is meant.
                self.fail(where, f"must be a string, got {type_name(item)} {preview(item)}",
                          "quote it, so that YAML reads it as text")
            elif (problem := placement.value_problem(item)) is not None:
                self.fail(where, problem, placement.LABEL_VALUE_HINT)
            else:
                labels.append((key, item))
        return tuple(sorted(labels))

    def instance_type(self, name: str, path: str) -> None:
        if name in ("local", "local_gpu"):
            self.fail(path, f"{name!r} is the SageMaker SDK's local mode, not an instance type",
                      "write the instance type the job runs on in the cloud, e.g. ml.m5.xlarge: hetero-emu "
                      "already runs every host on this machine, with that type's CPUs and memory")
        elif lookup_instance_type(name) is None:
            near = suggest_instance_types(name)
            hint = f"did you mean {', '.join(near)}?" if near else "see `hetero-emu instance-types`"
            self.fail(path, f"unknown instance type {name!r}", hint)

    def code(self, raw: Mapping[str, Any], s3_root: Path | None) -> tuple[str | None, Path | None]:
        entry_point = self.string(raw, "entry_point", "entry_point")
        src_text = self.string(raw, "source_dir", "source_dir")
        if self.code_refused:
            return entry_point, None
        if src_text is not None and ("://" in src_text and not src_text.startswith(("file://", "s3://"))):
            self.fail("source_dir", f"{preview(src_text)}: only local folders and s3:// archives are supported",
                      "give a local path, or s3://bucket/key/sourcedir.tar.gz under the S3 root")
            return entry_point, None
        source_dir = self.existing(
            self.local_path(src_text, "source_dir", s3_root, "source_dir") if src_text else None,
            "source_dir",
            "source_dir",
        )
        if source_dir is not None and self.probes.kind_of(source_dir) == "file" and self.probes.is_archive(source_dir):
            # sourcedir.tar.gz, as the SDK uploads source_dir: unpacked into each host's /opt/ml/code.
            if entry_point is not None and (Path(entry_point).is_absolute() or ".." in Path(entry_point).parts):
                self.fail("entry_point", f"{preview(entry_point)} must be a relative path inside source_dir")
                return None, source_dir
            if (problem := self.probes.archive_problem(source_dir, entry_point)) is not None:
                self.fail("source_dir", f"{src_text}: {problem}",
                          "pack the code as the SDK does: tar -czf sourcedir.tar.gz -C src .")
                return entry_point, None
            self.source_archive = True
            return entry_point, source_dir
        if source_dir is not None and self.probes.kind_of(source_dir) != "dir":
            self.fail("source_dir", f"{source_dir} is not a directory",
                      "a folder, or a sourcedir.tar.gz (a gzip-compressed tar file) the toolkit unpacks")
            return entry_point, None
        if source_dir is not None and self.no_special_files(source_dir, "source_dir", "source_dir") is None:
            source_dir = None
        if entry_point is None:
            return None, source_dir
        # Without source_dir the SDK takes entry_point as any local path (absolute, or with '..').
        if src_text is not None and (Path(entry_point).is_absolute() or ".." in Path(entry_point).parts):
            self.fail("entry_point", f"{preview(entry_point)} must be a relative path inside source_dir")
            return None, source_dir
        if src_text is None:
            # As in the SDK: without source_dir, entry_point is a file next to the spec and only that
            # file is uploaded; it becomes the whole of /opt/ml/code.
            try:
                script = self.probes.resolve(self.base_dir, entry_point)
            except BadPath as err:
                self.fail("entry_point", f"{preview(entry_point)} is {err}")
                return None, None
            if self.probes.kind_of(script) == "dir":
                self.fail("entry_point", f"{preview(entry_point)} is a folder, not a file",
                          "set source_dir to that folder and entry_point to the script in it, relative to it "
                          "(e.g. source_dir: src, entry_point: train.py)")
                return None, None
            if self.probes.kind_of(script) != "file":
                self.fail("entry_point", f"script not found: {script}",
                          "set source_dir, or give a path relative to the spec file")
                return None, None
            # The name as given, not its link target's: the SDK tars the script under its basename
            # (sagemaker/utils.py create_tar_file, arcname=os.path.basename) with links dereferenced.
            return given_name(entry_point, script), script
        if source_dir is not None and self.probes.kind_of(source_dir / entry_point) == "dir":
            self.fail("entry_point", f"{preview(entry_point)} is a folder, not a file",
                      "name the script to run, relative to source_dir (e.g. src/train.py for src/ in it)")
            return None, source_dir
        if source_dir is not None and self.probes.kind_of(source_dir / entry_point) != "file":
            self.fail("entry_point", f"{preview(entry_point)} not found in source_dir {source_dir}")
            return None, source_dir
        return entry_point, source_dir

    def inputs(
        self, raw: Mapping[str, Any], group_names: list[str], heterogeneous: bool, s3_root: Path | None,
        job_mode: str = "File",
    ) -> dict[str, TrainingInput]:
        """The channels: each one's fields (`channel_fields`) and data (`channel_data`), then the rules
        across channels (Pipe FIFO names, instance groups on every channel or on none)."""
        value = raw.get("inputs")
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.fail("inputs", f"must be a mapping of channel name to input, got {type_name(value)}")
            return {}
        if len(value) > MAX_CHANNELS:
            self.fail("inputs", f"at most {MAX_CHANNELS} channels, got {len(value)}",
                      "the service's limit for InputDataConfig")
        channels: dict[str, TrainingInput] = {}
        assigned: list[str] = []
        unassigned: list[str] = []
        for name, item in value.items():
            path = f"inputs.{key_text(name)}"
            if not isinstance(name, str) or not CHANNEL_NAME_PATTERN.fullmatch(name) or name in (".", ".."):
                self.fail(path, f"channel name {preview(name)} breaks SageMaker's pattern "
                          f"{CHANNEL_NAME_PATTERN.pattern}")
                continue
            if isinstance(item, str):
                item = {"s3_data": item}
            if not isinstance(item, dict):
                self.fail(path, f"must be a path/URI or a mapping of TrainingInput fields, got {type_name(item)}")
                continue
            item = _drop_nulls(item)
            self.unknown_keys(item, CHANNEL_KEYS, path + ".")
            fields = self.channel_fields(item, path, group_names, heterogeneous, job_mode)
            (assigned if fields.groups is not None else unassigned).append(name)
            channel = self.channel_data(fields, path, s3_root)
            if channel is not None:
                channels[name] = channel
        self.pipe_names(channels, job_mode)
        if assigned and unassigned:
            # The service's rule, in its words: CreateTrainingJob answers a request where only some
            # channels name InstanceGroupNames with ValidationException "Some channels have assigned
            # instance groups: [processing] while others not: [sm_drivers, code]"
            # (https://github.com/aws/sagemaker-python-sdk/issues/6089). SDK v3 now gives its own
            # channels every group (https://github.com/aws/sagemaker-python-sdk/pull/6116,
            # model_trainer.py `_resolve_managed_channel_instance_groups`). SDK v2 does not: its `code`
            # channel under network isolation and its `model` channel (model_uri) carry none
            # (https://github.com/aws/sagemaker-python-sdk/blob/v2.257.6/src/sagemaker/job.py#L93-L116),
            # so the service refuses such a v2 estimator whose own channels name groups, and so do we.
            self.fail("inputs", f"Some channels have assigned instance groups: [{', '.join(assigned)}] while "
                      f"others not: [{', '.join(unassigned)}]",
                      "assign instance groups to every channel or to none (SDK v2's own `code` channel under "
                      "enable_network_isolation, and `model` for model_uri, have none: then leave them off "
                      "every channel, and each host gets every channel)")
        return channels

    def channel_fields(self, item: Mapping[str, Any], path: str, group_names: list[str], heterogeneous: bool,
                       job_mode: str) -> _ChannelFields:
        """One channel's fields other than its data: distribution, input mode, data type, record
        wrapping, content type and instance groups, each checked on its own."""
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
        data_type = self.string(item, "s3_data_type", path + ".s3_data_type") or "S3Prefix"
        if data_type not in S3_DATA_TYPES:
            self.fail(path + ".s3_data_type", f"{data_type!r} is not supported yet", "use S3Prefix")
        piped = (mode if mode in INPUT_MODES else job_mode) == "Pipe"
        wrapping = self.string(item, "record_wrapping", path + ".record_wrapping") or "None"
        if wrapping not in RECORD_WRAPPER_TYPES:
            self.fail(path + ".record_wrapping", f"must be one of {', '.join(RECORD_WRAPPER_TYPES)}, "
                      f"got {wrapping!r}", did_you_mean(wrapping, RECORD_WRAPPER_TYPES))
        elif wrapping == "RecordIO" and not piped:
            # The emulator wraps records while it streams a Pipe channel (emulator.run.pipes); a File
            # channel is the user's files mounted as they are, which it does not rewrite.
            self.fail(path + ".record_wrapping", "RecordIO wrapping is emulated for Pipe channels only",
                      "set input_mode: Pipe on this channel, or omit record_wrapping")
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
        return _ChannelFields(data, dist, mode, data_type, piped, wrapping, content_type, groups)

    def channel_data(self, fields: _ChannelFields, path: str, s3_root: Path | None) -> TrainingInput | None:
        """The channel with its data: the folder or file that must exist, hold plain files only, and
        have a file to shard or stream when the channel asks for that; None when it does not."""
        data = fields.data
        source = None
        if data is not None:
            resolved = self.local_path(data, path + ".s3_data", s3_root, "data")
            prefixed = self.key_prefix_files(resolved, path + ".s3_data") if resolved in self.s3_uris else None
            if prefixed is not None:
                assert resolved is not None  # a prefix's files come from a resolved path
                return self.channel(fields, data, resolved.parent, prefixed, key_prefix=True)
            source = self.existing(resolved, path + ".s3_data", "channel data")
        if source is None:
            return None
        listing = self.no_special_files(source, path + ".s3_data", "a channel")
        if listing is None or data is None:
            return None
        single_file = self.probes.kind_of(source) == "file"
        # A single file keeps the name it was given (`train.csv -> ../cache/blob1` is the object
        # `train.csv`, as `aws s3 cp` names it), not the name of what the link points to.
        files = (given_name(data, source),) if single_file else listing.files
        if fields.distribution == "ShardedByS3Key" and not files:
            self.fail(path + ".s3_data", f"{source} holds no file to shard")
        elif fields.piped and not files:
            # A Pipe channel is its files streamed in key order: with none, every epoch's FIFO
            # would give the script an empty stream it cannot tell from a broken one.
            self.fail(path + ".s3_data", f"{source} holds no file to stream in Pipe mode",
                      "put the channel's files there, or use input_mode: File for an empty folder")
        return self.channel(fields, data, source, files, single_file=single_file, links_out=listing.links_out)

    @staticmethod
    def channel(fields: _ChannelFields, data: str, source: Path, files: tuple[str, ...],
                **flags: bool) -> TrainingInput:
        """The channel's TrainingInput: its checked fields, its data's place and files, and `flags`."""
        return TrainingInput(s3_data=data, source=source, distribution=fields.distribution,
                             input_mode=fields.input_mode, content_type=fields.content_type,
                             instance_groups=fields.groups or (), s3_data_type=fields.data_type,
                             record_wrapping=fields.wrapping, files=files, **flags)

    def key_prefix_files(self, resolved: Path | None, path: str) -> tuple[str, ...] | None:
        """The keys an S3Prefix that is not a folder stands for (`s3://b/data/part-`: every key under
        data/ that starts with `part-`, `part-0.csv` and `part-1/x.csv` alike), as the service
        downloads them: relative to the folder the prefix ends in. None when the prefix names a
        folder, or a file no other key starts with (a channel of that folder or file, as before), or
        matches nothing (then it is not found)."""
        if resolved is None or self.probes.kind_of(resolved) == "dir" or self.probes.kind_of(resolved.parent) != "dir":
            return None
        stem = resolved.name
        listing = self.probes.scan(resolved.parent)
        files = tuple(key for key in listing.files if key.startswith(stem))
        if not files or files == (stem,):
            return None
        bad = [f"{key} ({kind})" for key, kind in listing.special if key.startswith(stem)]
        bad += [f"{key} ({why})" for key, why in listing.broken if key.startswith(stem)]
        if bad:
            self.fail(path, f"the key prefix {self.s3_uris[resolved]} takes in {bad[0]}, which is not a "
                      "regular file an upload could read", "remove it, or give a prefix it does not start")
            return None
        return files

    def pipe_names(self, channels: Mapping[str, TrainingInput], job_mode: str) -> None:
        """A Pipe channel's FIFOs are `<channel>_<epoch>` beside the other channels' folders under
        /opt/ml/input/data (emulator.run.pipes): a channel named like one of them would take its place."""
        piped = [name for name, channel in channels.items() if (channel.input_mode or job_mode) == "Pipe"]
        for name in channels:
            for pipe in piped:
                suffix = name[len(pipe) + 1:] if name.startswith(pipe + "_") else ""
                if suffix.isdigit() and suffix.isascii():
                    self.fail(f"inputs.{name}", f"the name {name!r} is that of an epoch's FIFO of the Pipe channel "
                              f"{pipe!r} (/opt/ml/input/data/{name})", "rename one of the two channels")

    def distribution(
        self, raw: Mapping[str, Any], group_names: list[str], heterogeneous: bool, instance_types: list[str]
    ) -> Distribution | None:
        value = raw.get("distribution")
        if value is None:
            return None
        if not isinstance(value, dict):
            self.fail("distribution", f"must be a mapping, got {type_name(value)}")
            return None
        allowed = (*DISTRIBUTION_STRATEGIES, "instance_groups")
        self.unknown_keys(value, allowed, "distribution.")
        strategies = [k for k in value if k in DISTRIBUTION_STRATEGIES]
        # smdistributed runs on top of a launcher: MPI, or torchrun for SMP v2 and on p5
        # (PyTorch._pytorch_distribution_configuration): the SDK allows exactly those pairs.
        if set(strategies) == {"mpi", "smdistributed"}:
            strategies = ["mpi"]
        elif set(strategies) == {"torch_distributed", "smdistributed"}:
            strategies = ["torch_distributed"]
        if len(strategies) != 1:
            self.fail("distribution", f"give exactly one strategy, got {len(strategies)}",
                      f"one of {', '.join(DISTRIBUTION_STRATEGIES)}")
            return None
        strategy = strategies[0]
        options = value[strategy]
        if not isinstance(options, dict):
            self.fail(f"distribution.{strategy}", f"must be a mapping such as {{enabled: true}}, "
                      f"got {type_name(options)}")
            return None
        if not self.strategy_options(value):
            return None
        if "smdistributed" in value and not _enabled(value.get("torch_distributed")) and \
                any("p5.48xlarge" in itype for itype in instance_types):
            # Framework._distribution_configuration: on p5 only torchrun launches the smdistributed libraries.
            self.fail("distribution", "SMModelParallel and SMDataParallel currently do not support p5 instances.",
                      "add torch_distributed: {enabled: true} beside smdistributed")
        groups = self.string_list(value, "instance_groups", "distribution.instance_groups")
        if groups is not None:
            for g in groups:
                if g not in group_names:
                    self.fail("distribution.instance_groups", f"no instance group named {g!r}",
                              did_you_mean(g, group_names) or f"groups: {', '.join(group_names)}")
        # The SDK's PyTorch estimator sends no group list for torch_distributed: a request has none to give.
        sent_without_groups = self.hyperparameters_encoded and _enabled(value.get("torch_distributed"))
        if heterogeneous and len(group_names) > 1 and (groups is None or len(groups) != 1) and \
                not (groups is None and sent_without_groups):
            self.fail("distribution.instance_groups",
                      "a heterogeneous cluster's distribution must name exactly one instance group",
                      "e.g. instance_groups: [dnn_group]")
        elif groups is not None and len(groups) > 1:
            self.fail("distribution.instance_groups", "only one instance group can be named")
        if heterogeneous and groups is None and len(group_names) == 1:
            # The SDK's validate_distribution names an estimator's only instance group for the user.
            groups = tuple(group_names)
        if groups and not _launches_on_groups(value):
            # Framework._distribution_configuration's own refusal, raised when fit() asks for the
            # hyperparameters: only MPI, smdistributed data parallel (pytorchddp is rewritten to it) and
            # torch_distributed run on instance groups.
            self.fail("distribution", "Don't set training instance groups while no distribution strategies "
                      "enabled!", "on instance groups, enable mpi, smdistributed dataparallel, pytorchddp or "
                      "torch_distributed")
        extra = {k: v for k, v in value.items() if k in DISTRIBUTION_STRATEGIES and k != strategy}
        return Distribution(strategy, {**extra, strategy: options}, tuple(groups or ()))

    def strategy_options(self, distribution: Mapping[str, Any]) -> bool:
        """Each strategy's options have the SDK's shapes: `enabled` a boolean, MPI's counts integers."""
        ok = True
        for strategy in DISTRIBUTION_STRATEGIES:
            options = distribution.get(strategy)
            if options is None:
                continue
            path = f"distribution.{strategy}"
            if not isinstance(options, dict):
                self.fail(path, f"must be a mapping, got {type_name(options)}")
                ok = False
                continue
            blocks = options.items() if strategy == "smdistributed" else [("", options)]
            for name, block in blocks:
                where = f"{path}.{name}" if name else path
                if strategy == "smdistributed" and name not in SMDISTRIBUTED_STRATEGIES:
                    # fw_utils.validate_smdistributed refuses any other block.
                    self.fail(where, "unknown smdistributed strategy",
                              did_you_mean(str(name), SMDISTRIBUTED_STRATEGIES)
                              or f"one of {', '.join(SMDISTRIBUTED_STRATEGIES)}")
                    ok = False
                    continue
                if not isinstance(block, dict):
                    self.fail(where, f"must be a mapping such as {{enabled: true}}, got {type_name(block)}")
                    ok = False
                    continue
                known = STRATEGY_OPTIONS[f"{strategy}.{name}" if name else strategy]
                if any(key not in known for key in block):
                    self.unknown_keys(block, known, where + ".")
                    ok = False
                if name == "modelparallel" and "parameters" in block:
                    # The SDK also takes a path to a JSON file here; a spec gives the mapping itself.
                    parameters = block["parameters"]
                    problem = (f"must be a mapping, got {type_name(parameters)}" if not isinstance(parameters, dict)
                               else _json_problem(parameters))
                    if problem is not None:
                        self.fail(f"{where}.parameters", problem, "the model parallel parameters, e.g. {partitions: 2}")
                        ok = False
                checks = (("enabled", bool), ("processes_per_host", int), ("custom_mpi_options", str))
                for key, kind in checks:
                    if key in block and (not isinstance(block[key], kind) or
                                         (kind is int and isinstance(block[key], bool))):
                        self.fail(f"{where}.{key}",
                                  f"must be {with_article(type_name(kind()))}, got {preview(block[key])}")
                        ok = False
                processes = block.get("processes_per_host")
                if isinstance(processes, int) and not isinstance(processes, bool) and processes < 1:
                    # mpirun is given `-np hosts x processes_per_host` (sagemaker_training/mpi.py): zero or
                    # fewer would start no rank at all.
                    self.fail(f"{where}.processes_per_host", f"must be at least 1, got {processes}",
                              "the number of processes MPI starts on each host of the group, e.g. 2")
                    ok = False
        return ok

    def hyperparameters(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        value = raw.get("hyperparameters")
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.fail("hyperparameters", f"must be a mapping, got {type_name(value)}")
            return {}
        if len(value) > MAX_HYPERPARAMETERS:
            self.fail("hyperparameters", f"at most {MAX_HYPERPARAMETERS} hyperparameters, got {len(value)}",
                      "the service's limit for CreateTrainingJob HyperParameters")
        for key, item in value.items():
            if not isinstance(key, str):
                self.fail(f"hyperparameters.{preview(key)}", "names must be strings")
                continue
            path = f"hyperparameters.{preview(key) if len(key) > 64 else key}"
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
            elif len(encoded := item if self.hyperparameters_encoded else json.dumps(item)) > \
                    MAX_HYPERPARAMETER_VALUE:
                self.fail(path, f"longer than {MAX_HYPERPARAMETER_VALUE} characters once JSON-encoded "
                          f"({len(encoded)})", "the service's limit: pass big values as a channel")
        return dict(value)

    def environment(self, raw: Mapping[str, Any]) -> dict[str, str]:
        value = raw.get("environment")
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.fail("environment", f"must be a mapping, got {type_name(value)}")
            return {}
        if len(value) > MAX_ENVIRONMENT:
            self.fail("environment", f"at most {MAX_ENVIRONMENT} environment variables, got {len(value)}",
                      "the service's limit for CreateTrainingJob Environment")
        env: dict[str, str] = {}
        for key, item in value.items():
            path = f"environment.{key_text(key)}"
            if not isinstance(key, str) or not ENV_NAME_PATTERN.fullmatch(key):
                self.fail(path, "not a valid environment variable name", "letters, digits and _, not starting "
                          "with a digit")
            elif not isinstance(item, str | int | float | date):
                self.fail(path, f"must be a string, number or boolean, got {type_name(item)}")
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




def _launches_on_groups(distribution: Mapping[str, Any]) -> bool:
    """Whether the SDK lets `distribution=` run on instance groups: an enabled MPI, smdistributed data
    parallel or pytorchddp (Framework._distribution_configuration), or torch_distributed (which
    PyTorch._pytorch_distribution_configuration handles before that check)."""
    smdistributed = distribution.get("smdistributed")
    data_parallel = smdistributed.get("dataparallel") if isinstance(smdistributed, Mapping) else None
    # torch_distributed beside smdistributed goes through Framework._distribution_configuration too.
    torch_alone = _enabled(distribution.get("torch_distributed")) and smdistributed is None
    return torch_alone or any(_enabled(block) for block in (distribution.get("mpi"), distribution.get("pytorchddp"),
                                                            data_parallel))


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
                    return f"a mapping with {with_article(type_name(k))} key cannot be JSON-encoded"
                stack.append((v, depth + 1))
        else:
            return f"{with_article(type_name(item))} cannot be JSON-encoded"
    return None


def _ambiguous_in(value: Any, path: str) -> Iterator[tuple[str, Ambiguous]]:
    """Every Ambiguous marker the loader left in a hyperparameter, with its field path. Only specs
    read from YAML hold markers; the walk is bounded as the loader bounded the value."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, Ambiguous):
            yield where, item
        elif isinstance(item, list):
            stack.extend((v, f"{where}[{i}]") for i, v in reversed(list(enumerate(item))))
        elif isinstance(item, dict):
            stack.extend((v, f"{where}.{key_text(k)}") for k, v in reversed(list(item.items())))


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



def _default_base_name(image: str) -> str:
    """The SDK's base name when none is given: the image's repository name."""
    name = image.rsplit("/", 1)[-1].split(":", 1)[0]
    cleaned = re.sub(r"[^a-zA-Z0-9-]+", "-", name).strip("-")
    return cleaned[:39] or "training-job"
