"""The internal job: the frozen `JobSpec` every input adapter produces, its parts, and the service's
constants (names' patterns, request limits, defaults) the rules check against.

Names follow the SageMaker Python SDK v2 (`InstanceGroup`, `TrainingInput`, `Estimator` arguments), so
a SageMaker user already knows them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from emulator.jobspec.faults import Injection
from emulator.jobspec.metric_definitions import Definition
from emulator.jobspec.requirements import Requirements

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
# Not a service limit: the emulator runs every host on one machine. Documented in docs/spec.md, Limits.
MAX_HOSTS = 64
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
# ResourceConfig.KeepAlivePeriodInSeconds and RetryStrategy.MaximumRetryAttempts (API reference).
MAX_KEEP_ALIVE = 3600
MAX_RETRY_ATTEMPTS = 30
DEFAULT_MAX_RUN = 86400
HOMOGENEOUS_GROUP = "homogeneousCluster"
DEFAULT_REGION = "us-east-1"
# logging.INFO, the SDK's default `container_log_level`.
DEFAULT_LOG_LEVEL = 20

INPUT_MODES = ("File", "FastFile", "Pipe")
# https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_Channel.html#sagemaker-Type-Channel-RecordWrapperType
RECORD_WRAPPER_TYPES = ("None", "RecordIO")
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
# The options the SDK v2 reads in each strategy's block (sagemaker/estimator.py
# Framework._distribution_configuration, pytorch/estimator.py, fw_utils.validate_smdistributed);
# smdistributed's blocks are named by its strategy (fw_utils.SMDISTRIBUTED_SUPPORTED_STRATEGIES), and
# pytorchddp becomes smdistributed.dataparallel (PyTorch.__init__), so it takes the same options. The SDK
# ignores any other key silently; the emulator names it instead, since a misspelt option would otherwise
# run a job configured other than its author believes.
STRATEGY_OPTIONS: dict[str, tuple[str, ...]] = {
    "mpi": ("enabled", "processes_per_host", "custom_mpi_options"),
    "torch_distributed": ("enabled",),
    "pytorchddp": ("enabled", "custom_mpi_options"),
    "smdistributed.dataparallel": ("enabled", "custom_mpi_options"),
    "smdistributed.modelparallel": ("enabled", "parameters"),
    "parameter_server": ("enabled",),
    "multi_worker_mirrored_strategy": ("enabled",),
}
SMDISTRIBUTED_STRATEGIES = ("dataparallel", "modelparallel")


def strategy_enabled(block: object) -> bool:
    """A strategy block's `enabled` flag, False when absent or not a mapping (the SDK's
    `.get("enabled", False)`, e.g. Framework._distribution_configuration)."""
    return isinstance(block, Mapping) and block.get("enabled", False) is True

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
    "tensorboard_output_config",
    "debugger_hook_config",
    "profiler_config",
    "max_run",
    "enable_network_isolation",
    "disable_output_compression",
    "container_entry_point",
    "container_arguments",
    "container_log_level",
    "region",
    "local_s3_root",
    "shm_size",
    "gpus",
    "metric_definitions",
    "use_spot_instances",
    "max_wait",
    "keep_alive_period_in_seconds",
    "max_retry_attempts",
    "inject",
    "tuning",
)
GROUP_KEYS = ("instance_group_name", "instance_type", "instance_count", "placement")
# `placement` may be left out; every other group key is required.
REQUIRED_GROUP_KEYS = GROUP_KEYS[:3]
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
    # Not a SageMaker field: the node labels (key, value), sorted by key, a swarm node must have to
    # run the group's hosts (emulator.jobspec.placement). A tuple, so that the group stays hashable.
    placement: tuple[tuple[str, str], ...] = ()


# TensorBoardOutputConfig.LocalPath's default (the SDK's TensorBoardOutputConfig too).
DEFAULT_TENSORBOARD_PATH = "/opt/ml/output/tensorboard"
# Where a host finds its channels, each in a folder of its name.
INPUT_DATA = "/opt/ml/input/data"
# Where a host finds the job's code: the toolkit's submit directory.
CODE_DIR = "/opt/ml/code"


@dataclass(frozen=True)
class DebuggerOutput:
    """A request's DebugHookConfig or ProfilerConfig (the SDK's DebuggerHookConfig and
    ProfilerConfig; emulator/planning/sm_debugger.py): the config file every host gets, and where what the
    hosts write under `local_path` is uploaded while the job runs."""

    # The config's members with the API's names, as JSON text (a frozen spec stays hashable).
    document: str
    # The container folder the hosts write the tensors or the profiler's files to.
    local_path: str
    # S3OutputPath on this machine (None: a ProfilerConfig without one uploads nothing), and as given.
    output_path: Path | None = None
    uri: str | None = None


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
    # RecordWrapperType: "RecordIO" wraps each file of a Pipe channel in one RecordIO record.
    record_wrapping: str = "None"
    files: tuple[str, ...] = ()
    single_file: bool = False
    # A symlink in the folder would not resolve inside a read-only bind mount of it (its target lies
    # outside, or its text is absolute): the channel is staged as a share of hard links instead.
    links_out: bool = False
    # The SDK's own upload for this job, under `<output>/<job>/input/` (SDK v3's `code` and `sm_drivers`
    # channels): each host gets a writable copy, as the service downloads a channel onto the instance.
    # v3's entry command runs `chmod +x` on its driver script there, which a read-only mount refuses.
    # The user's data is never in such a channel: only the SDK writes below the job's own prefix.
    copied: bool = False
    # An S3 URI that is a key prefix and not a folder (`s3://b/data/part-`): `source` is the folder
    # the prefix ends in and `files` the keys under it that start with the prefix, each placed by its
    # name there, as the service downloads every key that starts with an S3Prefix. Staged as a share.
    key_prefix: bool = False
    # The job writes into this channel's folder, or around it, while it runs (output_path inside the
    # channel's prefix, a checkpoint or TensorBoard path overlapping it): staged as a share of the
    # files listed before the job, so the hosts see what the service downloads before training, not
    # the job's own output as it grows (`spec.rules.Validator.no_overlap`).
    snapshot: bool = False


@dataclass(frozen=True)
class Distribution:
    """The `distribution=` argument: one strategy applied to one instance group."""

    strategy: str
    options: Mapping[str, Any]
    instance_groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class TuningSection:
    """The spec's `tuning:` section (emulator/jobspec/yaml_tuning.py): a hyperparameter tuning job over
    this training job, for `hetero-emu tune`. `config` is CreateHyperParameterTuningJob's
    HyperParameterTuningJobConfig and `warm_start` its WarmStartConfig, both in botocore's shapes."""

    name: str | None  # HyperParameterTuningJobName; None: the caller names the tuning job
    config: dict[str, Any]
    warm_start: dict[str, Any] | None = None


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
    # True when `hyperparameters` holds strings as the CreateTrainingJob API has them (a request's
    # HyperParameters): hyperparameters.json gets them as given, not JSON-encoded a second time.
    hyperparameters_encoded: bool = False
    # A request's HyperParameters keys (None for a YAML spec): hyperparameters.json has exactly these,
    # as the service writes a request's own. The YAML spec gets the `sagemaker_*` ones the SDK v2's
    # Framework estimator adds to its requests; SDK v3's ModelTrainer adds none, and its driver hands
    # every hyperparameter to the script as a command-line option, which a script's argparse refuses
    # when it does not know it.
    request_hyperparameters: tuple[str, ...] | None = None
    # Not in repr: a traceback or a debug print of the spec must not show secret values.
    environment: Mapping[str, str] = field(default_factory=dict, repr=False)
    inputs: Mapping[str, TrainingInput] = field(default_factory=dict)
    input_mode: str = "File"
    distribution: Distribution | None = None
    output_path: Path = Path("output")
    checkpoint_s3_uri: Path | None = None
    # The s3:// URIs as given, when output_path / checkpoint_s3_uri were S3 URIs (mapped to folders
    # under the local S3 root above): job.json names them as DescribeTrainingJob does.
    output_s3_uri: str | None = None
    checkpoint_uri: str | None = None
    checkpoint_local_path: str = "/opt/ml/checkpoints"
    # TensorBoardOutputConfig: where the TensorBoard files each host writes to `tensorboard_local_path`
    # are copied while the job runs, as the checkpoints are (emulator/run/checkpoints.py); the URI as given.
    tensorboard_output_path: Path | None = None
    tensorboard_uri: str | None = None
    tensorboard_local_path: str = DEFAULT_TENSORBOARD_PATH
    # DebugHookConfig and ProfilerConfig (emulator/planning/sm_debugger.py).
    debug_hook: DebuggerOutput | None = None
    profiler: DebuggerOutput | None = None
    max_run: int = DEFAULT_MAX_RUN
    enable_network_isolation: bool = False
    # OutputDataConfig.CompressionType NONE (the SDK's name): model and output files written as they
    # are under output/model/ and output/data/ instead of model.tar.gz / output.tar.gz.
    disable_output_compression: bool = False
    container_entry_point: tuple[str, ...] | None = None
    container_arguments: tuple[str, ...] | None = None
    container_log_level: int = DEFAULT_LOG_LEVEL
    region: str = DEFAULT_REGION
    # The folder s3:// URIs map under for this job (emulator/jobspec/s3.py `choose_root`): the S3 its
    # hosts reach from inside the job (emulator/run/job_aws.py).
    s3_root: Path | None = None
    spec_dir: Path = Path(".")
    # source_dir is a sourcedir.tar.gz (s3://.../sourcedir.tar.gz, as the SDK uploads the code):
    # unpacked into each host's /opt/ml/code, as the training toolkit unpacks it.
    source_archive: bool = False
    # The code's requirements.txt when the toolkit will pip-install it (emulator.jobspec.requirements.find).
    requirements: Requirements | None = None
    # The size of every host's /dev/shm in bytes (`shm_size: 2g`); None: half the host's memory
    # limit (emulator.planning.container.default_shm_bytes). Not a SageMaker field: the service has no option.
    shm_size: int | None = None
    # How hosts of GPU instance types get GPUs here (`gpus: emulate`; emulator/planning/hardware.py): None
    # leaves it to the run's --gpus, else "auto". Not a SageMaker field.
    gpus: str | None = None
    # AlgorithmSpecification.MetricDefinitions (the SDK's metric_definitions): applied to every host's
    # lines (emulator/jobspec/metric_definitions.py, applied by emulator/run/metrics.py).
    metric_definitions: tuple[Definition, ...] = ()
    # The image the job named when another runs for it (an ECR name not in the engine; image_uri is
    # then the local stand-in), and the lines that say so (emulator.aws.ecr_images.choose_image).
    requested_image: str | None = None
    image_notes: tuple[str, ...] = ()
    # Managed spot training (EnableManagedSpotTraining, the SDK's use_spot_instances) and its
    # MaxWaitTimeInSeconds (max_wait: the whole job, restarts and waits included).
    use_spot_instances: bool = False
    max_wait: int | None = None
    # ResourceConfig.KeepAlivePeriodInSeconds: the warm pool kept after the job (0: none).
    keep_alive_period_in_seconds: int = 0
    # The request's fields a warm pool's later job must match besides the cluster (RoleArn, the
    # volume, VpcConfig; emulator/run/warm_pools.py), as (name, JSON text).
    pool_match: tuple[tuple[str, str], ...] = ()
    # RetryStrategy.MaximumRetryAttempts (the SDK's max_retry_attempts): None, no RetryStrategy.
    max_retry_attempts: int | None = None
    # The spot interruptions and platform errors this job is given on purpose (emulator/jobspec/faults.py).
    # Not a SageMaker field.
    inject: tuple[Injection, ...] = ()
    # The spec's `tuning:` section: `hetero-emu tune` runs it; `run` and `render` run the one training
    # job it tunes, with the spec's own hyperparameters. Not a CreateTrainingJob field.
    tuning: TuningSection | None = None

    @property
    def host_count(self) -> int:
        return sum(g.instance_count for g in self.instance_groups)

    def channel_mode(self, name: str) -> str:
        """A channel's input mode: its own, else the job's TrainingInputMode (API_Channel.html InputMode)."""
        return self.inputs[name].input_mode or self.input_mode

    def group(self, name: str) -> InstanceGroup:
        return next(g for g in self.instance_groups if g.instance_group_name == name)
