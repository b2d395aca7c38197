"""SageMaker's training-job and hyperparameter-tuning-job operations as an AWS service the stub and
`serve` answer: each operation name to the jobs layer's method (emulator/jobs/service.py) or the tuning
layer's (emulator/tuning/service.py), which do the work in the API's shapes."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from emulator.aws.stub import Operation, Service
from emulator.jobs.service import TrainingJobs
from emulator.tuning.service import TuningJobs


class SageMakerTraining(TrainingJobs, Service):
    """The jobs layer's training jobs, served under botocore's operation names."""

    name = "sagemaker"
    quick = frozenset({"DescribeTrainingJob", "ListTrainingJobs"})

    def __init__(self, s3_root: Path, *, max_parallel_trials: int | None = None, **options: Any) -> None:
        super().__init__(s3_root, **options)
        # The hyperparameter tuning jobs, whose trials are this service's training jobs.
        self.tuning = TuningJobs(self, max_parallel=max_parallel_trials)
        if self.host_paths.roots:
            # The model's S3Uri pattern would refuse a path under a root; the policy decides instead.
            self.own_patterns = frozenset({"S3Uri"})

    def operations(self) -> Mapping[str, Operation]:
        return {"CreateTrainingJob": self.create, "DescribeTrainingJob": self.describe,
                "StopTrainingJob": self.stop, "ListTrainingJobs": self.list, "UpdateTrainingJob": self.update,
                "ListTags": self.list_tags,
                "CreateHyperParameterTuningJob": self.tuning.create,
                "DescribeHyperParameterTuningJob": self.tuning.describe,
                "ListHyperParameterTuningJobs": self.tuning.list,
                "StopHyperParameterTuningJob": self.tuning.stop,
                "ListTrainingJobsForHyperParameterTuningJob": self.tuning.list_training_jobs}
