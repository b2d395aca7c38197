"""Run the notebook acceptance set: AWS's example notebooks, their estimator cells as written.

    .venv/bin/python acceptance/run.py                 # every notebook, one after another
    .venv/bin/python acceptance/run.py tf-vit-caltech256 pytorch-mnist-onnx
    .venv/bin/python acceptance/run.py --build         # let jobs build the framework images they miss
    .venv/bin/python acceptance/run.py --list

Each notebook runs in a process of its own, in a working directory holding the files its cells
refer to (`files/`, AWS's, as of the notebook's commit) and the synthetic data of its skipped download
cells, with an S3 root of the run's own. Its cells run in order in one namespace, after the set's
overrides (`notebook.yaml`), with `EmulatorSession` bound to the emulator's SDK v2 session, which the
overrides name in place of `sagemaker.Session`. The process is stopped after the notebook's timeout,
and the jobs it created are stopped with it.

A job whose framework image is not in the engine is not started unless `--build` is given (a
framework image takes 3 to 8 minutes and a few GB to build): the notebook is "not runnable here".
Results: `ran`, `failed: emulator`, `failed: notebook itself offline` (a download, CUDA: what no
machine without the internet or a GPU could do), `failed: notebook itself` (what fails against the
service too: a version today's SDK refuses, a broken pin), `not runnable here`. The table, each notebook's log
and the results as JSON go to the run's folder (`--out`, default ~/.cache/hetero-emu/acceptance/<time>).

This is a lane run on demand, not part of scripts/test.sh: the whole set takes most of an hour.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import notebook_set  # noqa: E402
import synthetic  # noqa: E402
from notebook_set import FILES, Notebook  # noqa: E402

REGION = "us-west-2"
DEFAULT_BUCKET = f"sagemaker-{REGION}-000000000000"  # EmulatorSession's default_bucket() (placeholder account)
# Failures of the notebook's own making on a machine without the internet or a GPU: a download from
# the Hugging Face Hub or a public URL, a file a download should have given, CUDA.
OFFLINE = re.compile(
    r"huggingface\.co|We couldn't connect to|Max retries exceeded|Temporary failure in name resolution|"
    r"Name or service not known|File not found or corrupted|Failed to establish a new connection|"
    r"Network is unreachable|Could not resolve host|LocalEntryNotFoundError|CUDA|NCCL|nvidia")
# The emulator's refusal of a framework version no image can stand in for here (no wheels for any
# Python this machine has): emulator/training_images/frameworks.py, emulator/training_images/ecr_images.py.
# A version the SDK itself does not list, or a refusal naming a version the SDK did list, is not this.
NOT_HERE = re.compile(r"has no wheels for any Python this machine can run|none of which this machine runs|"
                      r"stand-ins are built for AWS's [\w-]+ images from")
# The line that names a failure in a traceback or a FailureReason.
NETWORK_LINE = re.compile(r"<urlopen error[^>]*>|SSLError\(.*?\)\)|\[SSL: [A-Z_]+\][^)'\"]*")
HOST_PREFIX = re.compile(r"^algo-\d+ \([^)]*\) \| ")
ERROR_LINE = re.compile(r"^\s*(?:[\w.]+(?:Error|Exception|Exit)|ExecuteUserScriptError|Traceback)\b.*", re.MULTILINE)


class NotBuilt(Exception):
    """A job would wait for a framework image that is not built, and the run may not build it."""


# --- the child: one notebook's cells -----------------------------------------------------------------


def child(name: str, workdir: Path, build: bool) -> int:
    notebook = notebook_set.named(name)
    os.chdir(workdir)
    # A notebook's kernel imports modules beside the notebook (`from start_job_utils import ...`).
    sys.path.insert(0, str(workdir))
    jobs_file = workdir / "jobs.jsonl"
    sessions: list[Any] = []

    from emulator.sagemaker import EmulatorSession as Session

    def recording_session(**kwargs: Any) -> Any:
        """The emulator's session, which also notes each job it creates (so the runner can stop them
        after a timeout) and refuses a job whose image would have to be built, unless allowed."""
        session = Session(**kwargs)
        events = session.sagemaker_client.meta.events
        events.register("provide-client-params.sagemaker.CreateTrainingJob",
                        lambda params, **_: _noted(params, jobs_file, build))
        events.register("provide-client-params.sagemaker.CreateHyperParameterTuningJob",
                        lambda params, **_: _noted_tuning(params, jobs_file, build))
        sessions.append(session)
        return session

    namespace: dict[str, Any] = {"__name__": "__main__", "EmulatorSession": recording_session}
    namespace.update(notebook.bindings(DEFAULT_BUCKET))
    started = time.monotonic()
    outcome: dict[str, Any] = {"result": "ran", "cause": ""}
    failure = ""
    try:
        for index in notebook.cells:
            print(f"\n===== cell {index} =====", flush=True)
            exec(compile(notebook.cell_source(index), f"<{name} cell {index}>", "exec"), namespace)  # noqa: S102
        print("\n===== checks =====", flush=True)
        _check(notebook, namespace)
    except NotBuilt as err:
        outcome = {"result": "not runnable here", "cause": str(err), "image": str(err).split()[0]}
    except BaseException as err:  # noqa: BLE001 - any failure of a cell is the result
        traceback.print_exc()
        failure = f"{type(err).__name__}: {err}"
    jobs = _jobs(sessions, jobs_file)
    # A job's FailureReason says more than the exception a cell raised on it (a waiter's says only
    # "Failed"); a job that failed while no cell waited for it fails the notebook too.
    reasons = failures(jobs)
    if outcome["result"] == "ran" and (failure or reasons):
        outcome = classify(notebook, "\n".join([failure, *reasons]), cause_from=reasons[0] if reasons else failure)
    outcome["jobs"] = jobs
    outcome["seconds"] = round(time.monotonic() - started)
    (workdir / "result.json").write_text(json.dumps(outcome, indent=1))
    print(f"\n===== {outcome['result']}: {outcome['cause']}", flush=True)
    return 0


def failures(jobs: list[dict[str, Any]]) -> list[str]:
    """The FailureReasons of the jobs that did not complete, a failed trial's before its tuning
    job's; a trial of a tuning job that completed is not one (the service tolerates failed trials)."""
    completed = {j["job"] for j in jobs if j.get("tuning") and j.get("status") == "Completed"}
    return [j["failure"] for j in jobs if j.get("status") not in ("Completed", "not created") and j.get("failure")
            and j.get("tuning_job") not in completed]


def _noted(params: dict[str, Any], jobs_file: Path, build: bool) -> None:
    requested = params["AlgorithmSpecification"]["TrainingImage"]
    with jobs_file.open("a") as out:
        out.write(json.dumps({"job": params["TrainingJobName"], "image": requested}) + "\n")
    _refuse_unbuilt(requested, build)


def _noted_tuning(params: dict[str, Any], jobs_file: Path, build: bool) -> None:
    """A tuning job is noted as a job of its own (its trials are created by its own process), and its
    definitions' images are checked as a training job's is."""
    definitions = [params["TrainingJobDefinition"]] if params.get("TrainingJobDefinition") else []
    definitions += params.get("TrainingJobDefinitions") or []
    images = [d["AlgorithmSpecification"]["TrainingImage"] for d in definitions
              if d.get("AlgorithmSpecification", {}).get("TrainingImage")]
    with jobs_file.open("a") as out:
        out.write(json.dumps({"job": params["HyperParameterTuningJobName"], "tuning": True,
                              "image": ", ".join(images)}) + "\n")
    for requested in images:
        _refuse_unbuilt(requested, build)


def _refuse_unbuilt(requested: str, build: bool) -> None:
    from emulator.training_images.ecr_images import choose_image

    try:
        choice = choose_image(requested, {}, image_present)
    except Exception:  # noqa: BLE001 - the emulator's own refusal is the result, said by the job
        return
    if not build and not image_present(choice.image):
        image = choice.framework
        build_hint = " (run.py --build builds it)"
        # A Hugging Face image is built by its transformers version, not the framework's alone.
        if image is not None and not getattr(image, "huggingface", None):
            build_hint = (f" (hetero-emu image build --framework {image.framework}:{image.version} "
                          f"--python {image.py_version}, or run.py --build)")
        raise NotBuilt(f"{choice.image} is not built{build_hint}")


def image_present(image: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode == 0


def _check(notebook: Notebook, namespace: dict[str, Any]) -> None:
    """The notebook's checks after its cells: the members its model.tar.gz must have; for a tuner,
    its tuning job Completed, its number of trials, and the members of its best trial's model.tar.gz."""
    for estimator_name, members in (notebook.checks.get("model_contains") or {}).items():
        _check_model(f"{estimator_name}.model_data", namespace[estimator_name].model_data, members)
    for tuner_name, want in (notebook.checks.get("tuning") or {}).items():
        tuner = namespace[tuner_name]
        description = tuner.describe()
        name, status = description["HyperParameterTuningJobName"], description["HyperParameterTuningJobStatus"]
        print(f"{tuner_name}: tuning job {name} {status}", flush=True)
        if status != "Completed":
            raise AssertionError(f"tuning job {name} is {status}: {description.get('FailureReason', '')}")
        if "trials" in want:
            rows = len(tuner.analytics().dataframe())
            print(f"{tuner_name}.analytics().dataframe(): {rows} rows", flush=True)
            if rows != want["trials"]:
                raise AssertionError(f"tuning job {name} has {rows} trials, not {want['trials']}")
        if "best_model_contains" in want:
            best = tuner.best_training_job()
            trial = tuner.sagemaker_session.sagemaker_client.describe_training_job(TrainingJobName=best)
            _check_model(f"{tuner_name}.best_training_job() {best}", trial["ModelArtifacts"]["S3ModelArtifacts"],
                         want["best_model_contains"])


def _check_model(what: str, model_data: str, members: list[str]) -> None:
    bucket, key = model_data.removeprefix("s3://").split("/", 1)
    with tarfile.open(Path(os.environ["HETERO_EMU_S3_ROOT"]) / bucket / key) as tar:
        names = {Path(n).as_posix().removeprefix("./") for n in tar.getnames()}
    missing = [m for m in members if m not in names]
    print(f"{what} {model_data}: {sorted(names)}", flush=True)
    if missing:
        raise AssertionError(f"{model_data} lacks {', '.join(missing)} (has {', '.join(sorted(names))})")


def classify(notebook: Notebook, text: str, cause_from: str | None = None) -> dict[str, Any]:
    """The result a failure's text gives: the notebook's known failures first, then the emulator's
    refusal of a version no image stands in for, then what no machine offline could do, else the
    emulator's. The cause is the error line of `cause_from` (default: the text)."""
    line = _first_line(cause_from if cause_from is not None else text)
    for known in notebook.known:
        if re.search(known["match"], text):
            short = line if len(line) <= 150 else line[:150] + "..."
            return {"result": known["result"], "cause": f"{known['why']} ({short})"}
    if NOT_HERE.search(text):
        return {"result": "not runnable here", "cause": line}
    result = "failed: notebook itself offline" if OFFLINE.search(text) else "failed: emulator"
    return {"result": result, "cause": line}


def _first_line(text: str) -> str:
    return _shortened(_error_line(text))


def _shortened(line: str) -> str:
    """botocore's wrapping and ECR's registry taken off a cause: what is left names the failure."""
    line = re.sub(r"ClientError: An error occurred \((\w+)\) when calling the (\w+) operation: ", r"\2: \1: ", line)
    return re.sub(r"\d{12}\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com/", "", line)


def _error_line(text: str) -> str:
    """The line that says what failed: a FailureReason's own error line (its last one: the first is
    often the toolkit's wrapper), else the text's first line."""
    reason = text.split("Reason:", 1)[-1] if "Reason:" in text else text
    if 'ErrorMessage "' in reason:
        # The toolkit's FailureReason: `ErrorMessage "ModuleNotFoundError\n \n No module named 'x'"`,
        # the error's name and its message on lines of their own.
        message = reason.split('ErrorMessage "', 1)[1].split('"\nCommand', 1)[0]
        parts = [part.strip() for part in message.splitlines() if part.strip()]
        named = [m.group(0).strip() for m in ERROR_LINE.finditer(message)]
        if named and ":" in named[-1]:
            return named[-1][:400]
        return ": ".join(parts[:2])[:400]
    lines = [m.group(0).strip() for m in ERROR_LINE.finditer(reason) if not m.group(0).strip().startswith("Traceback")]
    line = lines[-1] if lines else reason.strip().splitlines()[0] if reason.strip() else text
    # A download's failure says why in a line of its own before the error it raises.
    why = next((m.group(0) for m in NETWORK_LINE.finditer(reason)), "")
    return (f"{line} ({why})" if why and why not in line else line)[:400]


def _jobs(sessions: list[Any], jobs_file: Path) -> list[dict[str, Any]]:
    """Each job the notebook created: its name, the image it named, the one that ran, its status."""
    if not jobs_file.exists() or not sessions:
        return []
    client = sessions[-1].sagemaker_client
    found = []
    for line in jobs_file.read_text().splitlines():
        job = json.loads(line)
        try:
            if job.get("tuning"):
                found += _tuning_rows(client, job)
                continue
            doc = client.describe_training_job(TrainingJobName=job["job"])
        except Exception:  # noqa: BLE001 - a job refused at create has no description
            found.append({**job, "status": "not created"})
            continue
        found.append(_training_row(job, doc))
    return found


def _training_row(job: dict[str, Any], doc: dict[str, Any]) -> dict[str, Any]:
    emulator = doc.get("Emulator") or {}
    return {**job, "status": doc["TrainingJobStatus"], "ran_on": emulator.get("Image", ""),
            "stand_in": emulator.get("StandIn", ""), "failure": doc.get("FailureReason", "")}


def _tuning_rows(client: Any, job: dict[str, Any]) -> list[dict[str, Any]]:
    """A tuning job's trials, then the tuning job: a trial's FailureReason says more than the tuning
    job's ("No training job succeeded after 5 attempts")."""
    doc = client.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName=job["job"])
    summaries = client.list_training_jobs_for_hyper_parameter_tuning_job(
        HyperParameterTuningJobName=job["job"], MaxResults=100)["TrainingJobSummaries"]
    trials = [_training_row({"job": s["TrainingJobName"], "tuning_job": job["job"]},
                            client.describe_training_job(TrainingJobName=s["TrainingJobName"]))
              for s in sorted(summaries, key=lambda s: s["TrainingJobName"])]
    return [*trials, {**job, "status": doc["HyperParameterTuningJobStatus"], "failure": doc.get("FailureReason", "")}]


# --- the parent: the set ----------------------------------------------------------------------------


def prepare(notebook: Notebook, workdir: Path, s3_root: Path) -> None:
    """The notebook's working directory (its files, its local synthetic data) and its S3 data."""
    shutil.copytree(notebook.folder / FILES, workdir, dirs_exist_ok=True)
    for data in notebook.data:
        into = data.into.format(default_bucket=DEFAULT_BUCKET)
        dest = s3_root / into.removeprefix("s3://") if into.startswith("s3://") else workdir / into
        synthetic.MAKERS[data.make](dest, **data.args)


def expected_image(notebook: Notebook) -> str:
    """The local image the notebook's framework maps to, or the framework as written where it maps
    to none (Hugging Face, a version the table does not have: the job's own refusal says why)."""
    from emulator.errors import EmulatorError
    from emulator.training_images import frameworks

    parts = notebook.framework.split()
    if parts[0] not in frameworks.FRAMEWORKS:
        return notebook.framework
    try:
        return frameworks.choose(parts[0], parts[1], parts[2]).tag
    except EmulatorError:
        return notebook.framework


def run_one(notebook: Notebook, out: Path, build: bool, scale: float) -> dict[str, Any]:
    workdir = out / notebook.name
    workdir.mkdir(parents=True)
    s3_root = out / "s3"
    s3_root.mkdir(exist_ok=True)
    image = expected_image(notebook)
    row: dict[str, Any] = {"notebook": notebook.name, "image": image, "source": notebook.source}
    if not build and image.startswith("hetero-emu/") and not image_present(image):
        return {**row, "result": "not runnable here", "seconds": 0,
                "cause": f"{image} is not built (run.py --build builds it)"}
    prepare(notebook, workdir, s3_root)
    env = {**os.environ, "HETERO_EMU_S3_ROOT": str(s3_root), "AWS_REGION": REGION, "AWS_DEFAULT_REGION": REGION,
           "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, str(Path(__file__).resolve()), "--child", notebook.name, "--workdir", str(workdir)]
    if build:
        command.append("--build")
    timeout = notebook.timeout * scale
    started = time.monotonic()
    print(f"== {notebook.name} ({notebook.source}), log: {workdir / 'notebook.log'}", flush=True)
    with (workdir / "notebook.log").open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            stopped = stop_jobs(workdir / "jobs.jsonl", s3_root)
            found = classify(notebook, log_tail(workdir / "notebook.log"))
            return {**row, "result": found["result"], "seconds": round(time.monotonic() - started),
                    "cause": f"timed out after {timeout:.0f} s{stopped}; {found['cause']}"}
        except BaseException:  # Ctrl-C: the notebook's jobs run on, as on the service, unless stopped here
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            print(f"interrupted; stopping its jobs{stop_jobs(workdir / 'jobs.jsonl', s3_root)}", flush=True)
            raise
    result_file = workdir / "result.json"
    if not result_file.exists():
        return {**row, "result": "failed: emulator", "seconds": round(time.monotonic() - started),
                "cause": f"the notebook's process ended with {process.returncode}: "
                         f"{last_line(workdir / 'notebook.log')}"}
    outcome = json.loads(result_file.read_text())
    ran_on = sorted({job["ran_on"] for job in outcome.get("jobs", []) if job.get("ran_on")})
    return {**row, **outcome, "image": ", ".join(ran_on) or outcome.get("image") or image}


def stop_jobs(jobs_file: Path, s3_root: Path) -> str:
    """Stop every job a timed-out notebook created (as StopTrainingJob; a tuning job, and so its
    trials, as StopHyperParameterTuningJob), and say which."""
    if not jobs_file.exists():
        return ""
    from emulator.sagemaker import EmulatorSession

    client = EmulatorSession(s3_root=s3_root).sagemaker_client
    jobs = [json.loads(line) for line in jobs_file.read_text().splitlines()]
    names = [job["job"] for job in jobs]
    for job in jobs:
        name = job["job"]
        try:
            if job.get("tuning"):  # StopHyperParameterTuningJob stops its trials too
                doc = client.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName=name)
                if doc["HyperParameterTuningJobStatus"] == "InProgress":
                    client.stop_hyper_parameter_tuning_job(HyperParameterTuningJobName=name)
            elif client.describe_training_job(TrainingJobName=name)["TrainingJobStatus"] == "InProgress":
                client.stop_training_job(TrainingJobName=name)
        except Exception as err:  # noqa: BLE001 - a job refused at create cannot be stopped
            print(f"   could not stop {name}: {err}", flush=True)
    return f" (stopped {', '.join(names)})" if names else ""


def last_line(log: Path) -> str:
    return _first_line(log_tail(log))


def log_tail(log: Path, lines: int = 300) -> str:
    """The end of a notebook's log, the hosts' `algo-N (group) | ` prefixes taken off."""
    text = log.read_text(errors="replace").splitlines()[-lines:]
    return "\n".join(HOST_PREFIX.sub("", line) for line in text if line.strip()) or "(no output)"


def table(rows: list[dict[str, Any]]) -> str:
    """The results as a Markdown table, one row a notebook."""
    head = "| notebook | framework image | result | seconds | cause |\n|---|---|---|---:|---|\n"
    return head + "".join(
        f"| {r['notebook']} | {r['image']} | {r['result']} | {r['seconds']} | {_cell(r.get('cause', ''))} |\n"
        for r in rows)


def _cell(text: str, limit: int = 220) -> str:
    text = text if len(text) <= limit else text[:limit] + "..."
    return text.replace("|", "\\|").replace("\n", " ")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help="notebooks to run (default: all)")
    parser.add_argument("--build", action="store_true", help="let jobs build the framework images they miss")
    parser.add_argument("--timeout-scale", type=float, default=1.0, help="multiply every notebook's timeout")
    parser.add_argument("--out", type=Path, help="the run's folder (default ~/.cache/hetero-emu/acceptance/<time>)")
    parser.add_argument("--list", action="store_true", help="list the set and exit")
    parser.add_argument("--table", type=Path, help="print the table of a run's results.json and exit")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    missing = [name for name in ("PIL", "pyarrow") if importlib.util.find_spec(name) is None]
    if missing and not (args.list or args.table):
        print(f"error: the synthetic data needs {', '.join(missing)}: "
              f"{sys.executable} -m pip install -r acceptance/requirements.txt", file=sys.stderr)
        return 2
    if args.child:
        return child(args.child, args.workdir, args.build)
    if args.table:
        print(table(json.loads(args.table.read_text())), end="")
        return 0
    notebooks = [notebook_set.named(n) for n in args.names] if args.names else notebook_set.every()
    if args.list:
        for notebook in notebooks:
            print(f"{notebook.name:28} {notebook.framework:36} {notebook.source}")
        return 0
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = (args.out or Path.home() / ".cache" / "hetero-emu" / "acceptance" / stamp).resolve()
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for notebook in notebooks:
        row = run_one(notebook, out, args.build, args.timeout_scale)
        rows.append(row)
        print(f"   {row['result']} in {row['seconds']} s: {row.get('cause', '')}", flush=True)
        (out / "results.json").write_text(json.dumps(rows, indent=1))
    text = table(rows)
    (out / "results.md").write_text(f"Run {stamp}\n\n{text}")
    print(f"\n{text}\nin {out}")
    return 0 if all(r["result"] != "failed: emulator" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
