"""SDK v3 user code, run with .venv-sdk3's python by tests/integration/test_sdk_v3.py (SDK v2 and v3
cannot share an environment): the AWS guide's heterogeneous cluster through `ModelTrainer`, unchanged
but for `sagemaker_session=EmulatorSessionV3(...)`.

Argument: a JSON object with `s3_root`, `source_dir`, `base_job_name`, `environment` and `channel`
(the S3 URI of the channel given to instance_group_1 only). The SDK's log lines go to stdout through
`logging` (v3 logs with it and configures no handler of its own); the last line is `RESULT {json}`:
the job's name, its model artifacts, and the exception `train` raised, if any.
"""

import json
import logging
import sys

logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(name)s: %(message)s")

from sagemaker.core.training.configs import Compute, InputData, InstanceGroup, S3DataSource, SourceCode  # noqa: E402
from sagemaker.train import ModelTrainer  # noqa: E402

from emulator.sagemaker import EmulatorSessionV3  # noqa: E402

args = json.loads(sys.argv[1])
session = EmulatorSessionV3(s3_root=args["s3_root"])
trainer = ModelTrainer(
    sagemaker_session=session,
    role="arn:aws:iam::111122223333:role/SageMakerRole",
    training_image="763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.1.0-gpu-py310",
    source_code=SourceCode(source_dir=args["source_dir"], entry_script="train.py"),
    compute=Compute(instance_groups=[
        InstanceGroup(instance_group_name="instance_group_1", instance_type="ml.c5.18xlarge", instance_count=1),
        InstanceGroup(instance_group_name="instance_group_2", instance_type="ml.p3dn.24xlarge", instance_count=2),
    ]),
    hyperparameters={"epochs": 2},
    environment=args["environment"],
    base_job_name=args["base_job_name"],
)
training = InputData(channel_name="training", data_source=S3DataSource(
    s3_data_type="S3Prefix", s3_uri=args["channel"], s3_data_distribution_type="FullyReplicated",
    instance_group_names=["instance_group_1"]))

result = {}
try:
    trainer.train(input_data_config=[training], wait=True, logs=True)
except Exception as err:  # reported to the test, which asserts what v3 raised
    result["raised"] = f"{type(err).__module__}.{type(err).__qualname__}"
    result["message"] = str(err)
job = trainer._latest_training_job
job.refresh()
completed = job.training_job_status == "Completed"
result.update(job=job.training_job_name, status=job.training_job_status,
              model=job.model_artifacts.s3_model_artifacts if completed else None,
              v2_session_imported="emulator.sagemaker.session" in sys.modules)
print("RESULT " + json.dumps(result), flush=True)
