"""SDK v3 user code for tests/unit/test_service_shape.py, run with .venv-sdk3's python (SDK v2 and v3
cannot share an environment): a heterogeneous `ModelTrainer` job through EmulatorSessionV3, its driver
in a thread of this process on the fake engine (tests/support/session_jobs.py), so that no engine is
needed, ending as asked.

Argument: a JSON object with `s3_root`, `source_dir` and `ends`, a list of the states the jobs end in
(Completed, Failed, Stopped: one job each, one after the other, in one process, as v3's import alone
takes seconds). The last line is `RESULT [json]`: for each job, its name, the status v3's own
`TrainingJob` read from its answer, what `train` raised, and each DescribeTrainingJob answer: after
each write of the job's record (the moments a client polling it can see), then once it has ended.
"""

import json
import sys
from typing import Any

import session_jobs  # tests/support, on PYTHONPATH
from fake_backend import FakeBackend
from sagemaker.core.resources import TrainingJob
from sagemaker.core.training.configs import Compute, InstanceGroup, SourceCode, StoppingCondition
from sagemaker.train import ModelTrainer

from emulator.defaults import DEFAULT_IMAGE
from emulator.result import Status
from emulator.sagemaker import EmulatorSessionV3
from emulator.state import job_records

args = json.loads(sys.argv[1])
engines: list[FakeBackend] = []  # the engine of the job under way: the last
session_jobs.install("fake", lambda: engines[-1], session_jobs.Assign())
session = EmulatorSessionV3(s3_root=args["s3_root"], engine="fake")

answers: dict[str, list[dict[str, Any]]] = {}
write = job_records.record


def recorded(job_name: str, *rest: Any, **fields: Any) -> bool:
    done = write(job_name, *rest, **fields)
    answers.setdefault(job_name, []).append(session.training.describe({"TrainingJobName": job_name}))
    return done


job_records.record = recorded
# train(wait=True) polls every 5 s (TrainingJob.wait's default): every second instead, as the jobs of
# the fake engine last a fraction of one.
waits = TrainingJob.wait
TrainingJob.wait = lambda self, **kw: waits(self, **{"poll": 1, **kw})
results = []
for ends in args["ends"]:
    engines.append(session_jobs.ending(Status(ends)))
    trainer = ModelTrainer(
        sagemaker_session=session,
        role="arn:aws:iam::111122223333:role/SageMakerRole",
        training_image=DEFAULT_IMAGE,
        source_code=SourceCode(source_dir=args["source_dir"], entry_script="train.py"),
        compute=Compute(instance_groups=[
            InstanceGroup(instance_group_name="cpu", instance_type="ml.c5.xlarge", instance_count=1),
            InstanceGroup(instance_group_name="gpu", instance_type="ml.g5.xlarge", instance_count=1),
        ]),
        stopping_condition=StoppingCondition(max_runtime_in_seconds=3600),
        base_job_name=f"shaped-{ends.lower()}",
    )
    result: dict[str, Any] = {"ends": ends}
    try:
        trainer.train(wait=True, logs=False)
    except Exception as err:  # reported to the test, which asserts what v3 raised
        result["raised"] = f"{type(err).__module__}.{type(err).__qualname__}"
    job = trainer._latest_training_job
    job.refresh()  # v3 reads the answer into its own TrainingJob
    name = job.training_job_name
    answers[name].append(session.training.describe({"TrainingJobName": name}))
    results.append({**result, "job": name, "status": job.training_job_status, "answers": answers[name]})
print("RESULT " + json.dumps(results), flush=True)
