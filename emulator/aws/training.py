"""SageMaker's training-job operations as an AWS service the stub and `serve` answer: each operation
name to the jobs layer's method (emulator/jobs/service.py), which does the work in the API's shapes."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from emulator.aws.stub import Operation, Service
from emulator.jobs.service import TrainingJobs


class SageMakerTraining(TrainingJobs, Service):
    """The jobs layer's training jobs, served under botocore's operation names."""

    name = "sagemaker"
    quick = frozenset({"DescribeTrainingJob", "ListTrainingJobs"})

    def __init__(self, s3_root: Path, **options: Any) -> None:
        super().__init__(s3_root, **options)
        if self.host_paths.roots:
            # The model's S3Uri pattern would refuse a path under a root; the policy decides instead.
            self.own_patterns = frozenset({"S3Uri"})

    def operations(self) -> Mapping[str, Operation]:
        return {"CreateTrainingJob": self.create, "DescribeTrainingJob": self.describe,
                "StopTrainingJob": self.stop, "ListTrainingJobs": self.list, "UpdateTrainingJob": self.update,
                "ListTags": self.list_tags}
