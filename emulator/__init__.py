"""hetero-emu: run SageMaker heterogeneous-cluster training jobs locally on Docker, offline.

The Python API uses the SageMaker SDK's names:

    from emulator import Job, InstanceGroup, TrainingInput
    result = Job(entry_point="train.py", source_dir="code",
                 instance_groups=[InstanceGroup("data_group", "ml.c5.xlarge", 2),
                                  InstanceGroup("dnn_group", "ml.p3.2xlarge", 1)]).run()
"""

from emulator.job import Job
from emulator.spec import InstanceGroup, JobSpec, TrainingInput, load_spec_file

__all__ = ["InstanceGroup", "Job", "JobSpec", "TrainingInput", "load_spec_file"]
__version__ = "0.1.0"
