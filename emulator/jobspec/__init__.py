"""The job spec: its input adapters, the service's rules (written once), and the internal `JobSpec`.

- `model`: the frozen `JobSpec` and its parts, the service's constants and name patterns.
- `yaml_loader`: the hardened YAML loader (size, node and depth limits, duplicate keys, YAML 1.2
  floats, values as written).
- `paths`: filesystem probing: what a path is, folders the job writes, channel and code listings.
- `probes`: those questions as the one object the rules are given (`Probes`; `DISK` answers from the
  real filesystem), so that validation itself does no I/O.
- `requirements`: the code's requirements.txt as the toolkit will install it, found and hashed.
- `faults`: the spot interruptions and platform errors a job is given on purpose (`inject`).
- `metric_definitions`: the job's metric definitions, checked, and the `Sample` a match gives.
- `instance_types`: the SageMaker instance types and their figures.
- `sizes`: byte sizes as written for Docker (`512m`, `2g`) and their bounds.
- `hardware_modes`: the GPU and vCPU modes a job chooses (`gpus`, `--gpus`, `--cpus`).
- `hyperparameters`: the hyperparameters as the SDK sends them, `sagemaker_*` keys included.
- `fields`: typed getters that record a problem per wrong field, named in the input's own words.
- `rules`: the service's rules (`Validator`), from the internal mapping to the `JobSpec`.
- `yaml_spec`: the YAML spec as input (`load_spec_file`, `validate`).
- `yaml_tuning`: the spec's `tuning:` section as the tuning job's config (`parse_tuning`).
- `wording`: how problems name values.
- `advice`: warnings about what a valid spec allows but probably does not mean.
- `placement`: an instance group's node labels: their rules, their swarm constraints, and
  `--placement` over the spec's (`with_placement`).

The package reads files (the spec, the paths it names) but imports nothing that runs a process or
talks to Docker: the wheelhouse build and the engines stay outside it (tests/unit/test_spec_probes.py).

The Python `Job` front end is `emulator.job.Job` (also `emulator.Job`). Below: the names the rest of
the emulator imports from `emulator.jobspec`; everything else is in its module.
"""

from emulator.jobspec.advice import spec_warnings
from emulator.jobspec.model import (
    GROUP_NAME_PATTERN,
    JOB_NAME_PATTERN,
    MAX_JOB_NAME,
    Distribution,
    InstanceGroup,
    JobSpec,
    TrainingInput,
)
from emulator.jobspec.paths import folder_problem
from emulator.jobspec.rules import entry_point_problem
from emulator.jobspec.wording import did_you_mean
from emulator.jobspec.yaml_loader import MAX_SPEC_BYTES, parse_yaml
from emulator.jobspec.yaml_spec import load_spec_file, validate

__all__ = [
    "GROUP_NAME_PATTERN",
    "JOB_NAME_PATTERN",
    "MAX_JOB_NAME",
    "MAX_SPEC_BYTES",
    "Distribution",
    "InstanceGroup",
    "JobSpec",
    "TrainingInput",
    "did_you_mean",
    "entry_point_problem",
    "folder_problem",
    "load_spec_file",
    "parse_yaml",
    "spec_warnings",
    "validate",
]
