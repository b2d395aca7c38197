"""The `hetero-emu` command line: a thin typer app over `emulator.api`: it parses arguments and prints.

Every EmulatorError is mapped to its exit code here and only here (docs/failures.md, Exit codes): 0 Completed,
1 Failed, 2 invalid spec or usage, 3 environment problem, 130 stopped by the user.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import shutil
import signal
import sys
import traceback
from collections.abc import Iterator
from datetime import datetime, timezone
from enum import Enum
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from emulator import api
from emulator.backend import ExecIO, Resource
from emulator.backend.networks import RESTART_FIX, STUCK_STATUS
from emulator.defaults import DEFAULT_ENGINE
from emulator.errors import EmulatorError, Interrupted, Problem, SpecError, UsageError
from emulator.jobspec import JobSpec, request, spec_warnings
from emulator.jobspec.faults import Injection, parse_injection
from emulator.jobspec.hardware_modes import CpuMode, GpuMode, parse_cpu_mode, parse_gpu_mode
from emulator.jobspec.instance_types import catalog, families
from emulator.jobspec.placement import parse_option
from emulator.options import DEFAULT_GRACE, RunOptions
from emulator.planning import contract, secrets
from emulator.planning.debug_host import DEBUGPY_PORT, DebugTarget
from emulator.planning.plan import (
    LABEL_GROUP,
    LABEL_HOST,
    MemoryLimit,
    parse_memory,
    summary,
)
from emulator.reports import trials as trial_views
from emulator.reports import tuning_table
from emulator.reports.console import ConsoleReporter
from emulator.reports.progress import StepPrinter
from emulator.result import JobResult
from emulator.run.metrics import final as final_metrics
from emulator.training_images.image_recipes import DEFAULT_VARIANT, variant_names

app = typer.Typer(
    name="hetero-emu",
    help="Run SageMaker heterogeneous-cluster training jobs locally on Docker, offline.\n\n"
    "Each instance group becomes containers algo-1..N with the /opt/ml files the service writes.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
image_app = typer.Typer(help="Build the training images from their recipes in images/ (offline); save and "
                        "load them for a CI cache.",
                        no_args_is_help=True)
app.add_typer(image_app, name="image")

_PACKAGE = Path(__file__).resolve().parent
#: Where `hetero-emu demo`'s job is: the wheel carries examples/data-offload as emulator/demo
#: (pyproject.toml: package-dir), so an installed hetero-emu runs it from anywhere; a checkout that
#: was never installed has only the examples folder itself.
DEMO_SPECS = (_PACKAGE / "demo" / "job.yaml", _PACKAGE.parent / "examples" / "data-offload" / "job.yaml")


class HostOrder(str, Enum):
    spec = "spec"
    shuffled = "shuffled"


class _State:
    debug = False
    # A Ctrl-C or SIGTERM arrived, and whether a line saying what it stopped was printed already.
    interrupted = False
    reported = False


SpecArg = Annotated[Path, typer.Argument(help="The job spec (YAML), or a CreateTrainingJob request (JSON or YAML).",
                                         show_default=False, metavar="SPEC")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="Stream the image build's tool output (mmdebstrap, "
                                          "pip wheel, docker build) instead of only its steps; it always goes to "
                                          "the build log file too.")]
EngineOpt = Annotated[str, typer.Option(
    "--engine", envvar="HETERO_EMU_ENGINE",
    help="The container engine: docker (this machine's), or swarm (one job across the nodes of a Docker swarm, "
    "through its manager: HETERO_EMU_SWARM_MANAGER or DOCKER_HOST; docs/swarm.md).")]
HostOrderOpt = Annotated[
    HostOrder,
    typer.Option("--host-order", help="spec: algo-1..N in group order; shuffled: hosts assigned to groups "
                 "in a seeded random order, as the service may do."),
]
SeedOpt = Annotated[int | None, typer.Option("--seed", help="Seed for --host-order shuffled (printed when chosen).")]
JobNameOpt = Annotated[str | None, typer.Option("--job-name", help="Exact job name (overrides the spec's).")]
MemoryOpt = Annotated[
    str,
    typer.Option("--memory", help="Each host's memory limit (swap included): 'instance' = its instance type's "
                 "memory, as on the service, so a script that would run out of memory there is OOM-killed here too; "
                 "a size such as 512m or 2g; or 'none'."),
]
ShmOpt = Annotated[
    str | None,
    typer.Option("--shm-size", help="Each host's /dev/shm size, e.g. 2g (overrides the spec's shm_size); default: "
                 "half the host's memory limit, as Linux sizes an instance's /dev/shm, or 1g without a limit.",
                 show_default=False),
]
GpusOpt = Annotated[
    str | None,
    typer.Option("--gpus", metavar="MODE", help="How hosts of GPU instance types get GPUs: 'real' = this machine's "
                 "(NVIDIA's container runtime), each host its type's count by device id, none shared; 'share' = "
                 "the same, round robin when there are too few; 'emulate' = the type's count and model through an "
                 "emulated nvidia-smi, without CUDA (checks the launch shape: SM_NUM_GPUS, ranks per host); "
                 "'none'; 'auto' (default, or the spec's gpus) = real where the engine has GPUs, else none.",
                 show_default=False),
]
CpusOpt = Annotated[
    str,
    typer.Option("--cpus", metavar="MODE", help="What the training toolkit counts as a host's CPUs (SM_NUM_CPUS): "
                 "'instance' = its type's vCPUs, as on the service (the script itself still sees this machine's "
                 "cores); 'machine' = this machine's cores."),
]
InterruptOpt = Annotated[
    list[str] | None,
    typer.Option("--interrupt-at", metavar="TIME", help="A spot interruption when the hosts have run TIME in all "
                 "(30s, 2m; repeatable): every host is stopped as the service stops reclaimed spot instances, and "
                 "the job starts again on new hosts with its checkpoints. Needs use_spot_instances.",
                 show_default=False),
]
InjectOpt = Annotated[
    list[str] | None,
    typer.Option("--inject", metavar="KIND@TIME", help="A fault when the hosts have run TIME in all (repeatable): "
                 "'platform-error@10s' = the instances are lost as in an internal error (the job is retried as its "
                 "RetryStrategy says, else it fails); 'spot-interruption@30s' = --interrupt-at 30s.",
                 show_default=False),
]
S3RootOpt = Annotated[
    Path | None, typer.Option("--s3-root", help="The folder s3://bucket/key maps to (<s3-root>/bucket/key); "
                              "above $HETERO_EMU_S3_ROOT, the spec's local_s3_root and ~/.local/share/hetero-emu/s3.",
                              show_default=False)
]
DebugHostOpt = Annotated[
    str | None,
    typer.Option("--debug-host", metavar="HOST", help="Run this host's entry point (e.g. algo-3) under debugpy, "
                 "its port published on 127.0.0.1 only; prints VS Code's launch.json to attach with.",
                 show_default=False),
]
DebugPortOpt = Annotated[int | None, typer.Option("--debug-port", metavar="PORT", show_default=False,
                                                  help=f"The port on 127.0.0.1 to attach to (default {DEBUGPY_PORT}).")]
DebugWaitOpt = Annotated[bool, typer.Option("--debug-wait", help="The debugged script waits for the debugger to "
                                            "attach before its first line.")]
PlacementOpt = Annotated[
    list[str] | None,
    typer.Option("--placement", metavar="GROUP:KEY=VALUE", show_default=False,
                 help="Run that instance group's hosts only on swarm nodes with this node label (`docker node "
                 "update --label-add KEY=VALUE NODE`); repeatable; adds to, or overrides, the group's `placement` "
                 "in the spec. Matters on the swarm engine only: the others run every host on this machine."),
]
OutputOpt = Annotated[
    Path | None, typer.Option("--output-path", help="Where <job_name>/ goes (overrides the spec's output_path).")
]


def _version() -> str:
    """The installed distribution's version (pyproject.toml's); the package's own when run from a
    checkout that was never installed."""
    try:
        return metadata.version("hetero-emu")
    except metadata.PackageNotFoundError:
        from emulator import __version__

        return __version__


def _print_version(wanted: bool) -> None:
    if wanted:
        typer.echo(f"hetero-emu {_version()}")
        raise typer.Exit(0)


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors (anywhere on the command "
                                        "line).")] = False,
    version: Annotated[bool, typer.Option("--version", "-V", help="Print the version and exit.",
                                          callback=_print_version, is_eager=True)] = False,
) -> None:
    # main() takes --debug out of the arguments wherever it is; it reaches here only through the app
    # called directly (typer's CliRunner).
    _State.debug = _State.debug or debug


def _load(spec_path: Path, job_name: str | None = None, output_path: Path | None = None,
          s3_root: Path | None = None, shm_size: str | None = None, *, as_json: bool = False) -> JobSpec:
    """The checked spec; with `as_json`, an invalid one prints `validate --json`'s document on stdout
    before the exit code 2, so that `run --json` and `demo --json` say why they did not run."""
    try:
        return api.load(spec_path, job_name=job_name, output_path=output_path, s3_root=s3_root, shm_size=shm_size)
    except SpecError as err:
        if not as_json:
            raise
        _emit_json({"valid": False, "problems": _problems_json(err.problems)})
        raise typer.Exit(err.exit_code) from None


def _problems_json(problems: list[Problem]) -> list[dict[str, str | None]]:
    return [{"path": p.path, "message": p.message, "hint": p.hint} for p in problems]


def _warn_spec(spec: JobSpec) -> list[Problem]:
    """Print what is allowed but probably not meant (`emulator.jobspec.spec_warnings`) on stderr."""
    found = spec_warnings(spec)
    for problem in found:
        typer.echo(f"warning: {problem}", err=True)
    return found


def _emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def _memory(text: str) -> MemoryLimit:
    try:
        return parse_memory(text)
    except ValueError as err:
        raise UsageError(f"--memory: {err}", hint="e.g. --memory 2g; the default is each instance type's memory") \
            from None


def _gpus(text: str | None) -> GpuMode | None:
    try:
        return None if text is None else parse_gpu_mode(text)
    except ValueError as err:
        raise UsageError(f"--gpus: {err}", hint="emulate shows each GPU host its type's GPUs without CUDA") from None


def _injections(interrupt_at: list[str] | None, inject: list[str] | None) -> tuple[Injection, ...] | None:
    """--interrupt-at and --inject as one list (None: neither given, the spec's `inject` stands)."""
    if not interrupt_at and not inject:
        return None
    found = []
    for option, texts, make in (("--interrupt-at", interrupt_at or [], lambda t: f"spot-interruption@{t}"),
                                ("--inject", inject or [], lambda t: t)):
        for text in texts:
            try:
                found.append(parse_injection(make(text)))
            except ValueError as err:
                raise UsageError(f"{option} {text}: {err}",
                                 hint="e.g. --interrupt-at 30s, --inject platform-error@1m") from None
    return tuple(found)


def _cpus(text: str) -> CpuMode:
    try:
        return parse_cpu_mode(text)
    except ValueError as err:
        raise UsageError(f"--cpus: {err}", hint="instance (the default) or machine") from None


def _placement(options: list[str] | None) -> dict[str, dict[str, str]]:
    """The --placement options as node labels per group name (the last value of a label wins)."""
    out: dict[str, dict[str, str]] = {}
    for text in options or ():
        group, key, value = parse_option(text)
        out.setdefault(group, {})[key] = value
    return out


def _debug_target(host: str | None, port: int | None, wait: bool) -> DebugTarget | None:
    if host is None:
        if port is not None or wait:
            option = "--debug-port" if port is not None else "--debug-wait"
            raise UsageError(f"{option} needs --debug-host", hint="name the host to debug, e.g. --debug-host algo-1")
        return None
    return DebugTarget(host, DEBUGPY_PORT if port is None else port, wait)


def _run(spec: JobSpec, options: RunOptions, *, as_json: bool, quiet: bool, engine_name: str = DEFAULT_ENGINE,
         verbose: bool = False, placement: dict[str, dict[str, str]] | None = None) -> JobResult:
    # With --json, stdout carries only the JSON document; host logs go to stderr.
    reporter = ConsoleReporter(out=sys.stderr if as_json else None, quiet=quiet, verbose=verbose)
    result = api.run(spec, options, engine_name=engine_name, reporter=reporter, placement=placement)
    _State.reported = True  # a stopped job's summary says so
    if as_json:
        _emit_json(json.loads((result.job_dir / "job.json").read_text()))
    else:
        _print_summary(result, secrets.Masker(spec.environment))
    return result


def _times(result: JobResult) -> str:
    """`Completed: training 9.3 s, total 12.1 s (artifacts packed in 2.5 s, billable 12 s)`: the hosts'
    run apart from the whole wait; billable is job.json's TrainingTimeInSeconds, which on the service
    counts the artifacts' upload too (see JobResult.training_end)."""
    verb = "copied" if result.model_artifact is not None and result.model_artifact.is_dir() else "packed"
    return (f"{result.status}: training {result.seconds:.1f} s, total {result.total_seconds:.1f} s "
            f"(artifacts {verb} in {result.artifact_seconds:.1f} s, billable {round(result.billable_seconds)} s)")


def _print_summary(result: JobResult, masker: secrets.Masker) -> None:
    rows = [("HOST", "GROUP", "INSTANCE TYPE", "EXIT", "SECONDS")]
    for h in result.hosts:
        rows.append((h.host, h.group, h.instance_type, "-" if h.exit_code is None else str(h.exit_code),
                     f"{h.seconds:.1f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    err = sys.stderr
    err.write("\n")
    for r in rows:
        err.write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n")
    err.write(f"\n{result.job_name}: {_times(result)}\n")
    if result.failure_reason:
        if result.failed_host:
            err.write(f"failed first: {result.failed_host}\n")
        err.write(f"FailureReason: {masker.mask_truncated(result.failure_reason)}\n")
    if result.seed is not None:
        err.write(f"host order seed: {result.seed}\n")
    for note in result.image_notes:
        err.write(f"image:  {note}\n")
    err.write(f"job:    {result.job_dir / 'job.json'}\n")
    if result.model_artifact:
        err.write(f"model:  {result.model_artifact}\n")
    if result.output_artifact:
        err.write(f"output: {result.output_artifact}\n")
    err.write(f"logs:   {result.job_dir / 'logs'}\n")
    if result.kept:
        first = result.hosts[0].host if result.hosts else "algo-1"
        err.write(f"kept:   the stopped containers and network of {result.job_name}:\n"
                  f"        hetero-emu exec {result.job_name} {first} -- bash   (a shell in a copy of that host)\n"
                  f"        docker cp {result.job_name}-{first}:/opt/ml/model ./   (copy its files)\n"
                  f"        hetero-emu clean --job {result.job_name}   (remove them)\n")


@app.command()
def run(
    spec_path: SpecArg,
    host_order: HostOrderOpt = HostOrder.spec,
    seed: SeedOpt = None,
    job_name: JobNameOpt = None,
    output_path: OutputOpt = None,
    keep: Annotated[bool, typer.Option("--keep", help="Keep containers and network afterwards, for debugging.")]
    = False,
    keep_on_failure: Annotated[bool, typer.Option(
        "--keep-on-failure", help="If the job fails, keep its stopped containers and network for `hetero-emu exec` "
        "and `docker cp`, until `hetero-emu clean --job NAME`.")] = False,
    grace: Annotated[float, typer.Option("--grace", min=0, help="Seconds between SIGTERM and SIGKILL when stopping "
                                          "hosts.")] = DEFAULT_GRACE,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress or host logs, only the summary.")]
    = False,
    memory: MemoryOpt = "instance",
    shm_size: ShmOpt = None,
    gpus: GpusOpt = None,
    cpus: CpusOpt = "instance",
    as_json: JsonOpt = False,
    engine_name: EngineOpt = DEFAULT_ENGINE,
    s3_root: S3RootOpt = None,
    no_build: Annotated[bool, typer.Option("--no-build", help="Never build the default image: exit 3 when it is "
                                           "missing.")] = False,
    verbose: VerboseOpt = False,
    debug_host: DebugHostOpt = None,
    debug_port: DebugPortOpt = None,
    debug_wait: DebugWaitOpt = False,
    placement: PlacementOpt = None,
    interrupt_at: InterruptOpt = None,
    inject: InjectOpt = None,
) -> None:
    """Run a job in the foreground: every host's log, then a table of hosts and the status.

    Exit code: 0 Completed, 1 Failed, 2 invalid spec, 3 environment problem, 130 stopped.
    """
    limit = _memory(memory)
    gpu_mode, cpu_mode = _gpus(gpus), _cpus(cpus)
    debug = _debug_target(debug_host, debug_port, debug_wait)
    labels = _placement(placement)
    spec = _load(spec_path, job_name, output_path, s3_root, shm_size, as_json=as_json)
    if spec.tuning is not None and not quiet:
        # Not a warning: one training job with the static hyperparameters is how a script is tried
        # before it is tuned (docs/tuning.md); the note only says which command tunes.
        typer.echo("note: run runs the training job once, with the spec's hyperparameters; its tuning: section "
                   "is for `hetero-emu tune`", err=True)
    options = RunOptions(host_order=host_order.value, seed=seed, keep=keep, keep_on_failure=keep_on_failure,
                         grace=grace, memory=limit, build_image=not no_build, debug=debug, gpus=gpu_mode,
                         cpus=cpu_mode, inject=_injections(interrupt_at, inject))
    result = _run(spec, options, as_json=as_json, quiet=quiet, engine_name=engine_name, verbose=verbose,
                  placement=labels)
    raise typer.Exit(result.exit_code)


@app.command()
def tune(
    spec_path: SpecArg,
    name: Annotated[str | None, typer.Option(
        "--name", help="The tuning job's name (at most 32 characters; default: the spec's tuning.job_name, else "
        "its base job name and the time).")] = None,
    max_parallel: Annotated[int | None, typer.Option(
        "--max-parallel", min=1, help="Run at most this many trials at once, whatever max_parallel_jobs says "
        "(default: max_parallel_jobs, cut with a warning to what this machine holds: 2 hosts per core).")] = None,
    detach: Annotated[bool, typer.Option(
        "--detach", help="Start the tuning job, print its name and return; it runs on its own (`describe NAME`, "
        "`stop NAME`).")] = False,
    as_json: JsonOpt = False,
    engine_name: EngineOpt = DEFAULT_ENGINE,
    s3_root: S3RootOpt = None,
) -> None:
    """Run a hyperparameter tuning job of the spec's job as its `tuning:` section says (docs/tuning.md):
    trials as training jobs of their own, a row for each as it ends, then the best trial. tuning.json
    and tuning.svg (the objective per trial, the best so far) are written in the tuning job's folder,
    beside its trials' folders. Ctrl-C stops the tuning job and every running trial.

    Exit code: 0 Completed, 1 Failed, 2 invalid spec, 3 environment problem, 130 stopped.
    """
    spec = _load(spec_path, None, None, s3_root, as_json=as_json)
    if spec.tuning is None:
        raise UsageError(f"{spec_path} has no tuning: section", hint="add one (docs/tuning.md), or run the job "
                         "once with `hetero-emu run`")
    api.check_engine(engine_name=engine_name)
    tuning = api.tune(spec, spec.tuning.config, warm_start=spec.tuning.warm_start, name=name or spec.tuning.name,
                      engine_name=engine_name, max_parallel=max_parallel)
    if detach:
        _emit_json({"HyperParameterTuningJobName": tuning}) if as_json else typer.echo(tuning)
        return
    out = sys.stderr if as_json else sys.stdout
    colour = out.isatty() and "NO_COLOR" not in os.environ
    described = api.tuning_description(tuning)
    kind = trial_views.objective(described)[1]
    print(tuning_table.header(described, colour), file=out, flush=True)
    best: list[float | None] = [None]

    def on_trial(row: dict[str, Any]) -> None:
        value = trial_views.objective_value(row)
        leads = value is not None and trial_views.better(value, best[0], kind)
        if leads:
            best[0] = value
        print(tuning_table.row(row, kind, leads, colour), file=out, flush=True)

    try:
        described = api.follow_tuning(tuning, on_trial)
    except KeyboardInterrupt:
        print(f"stopping the tuning job {tuning} and its running trials (StopHyperParameterTuningJob)...",
              file=sys.stderr, flush=True)
        described = api.follow_tuning(tuning, on_trial, stop=lambda: True)
    if as_json:
        _emit_json(described)
    else:
        _print_tuning_end(described, colour)
    status = described.get("HyperParameterTuningJobStatus")
    raise typer.Exit({"Completed": 0, "Stopped": 130}.get(str(status), 1))


@app.command()
def demo(
    output_path: Annotated[Path, typer.Option("--output-path", help="Where the demo job's folder goes.")]
    = Path("hetero-emu-output"),
    keep: Annotated[bool, typer.Option("--keep", help="Keep containers and network afterwards.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Run the data-offload example: a CPU group serves preprocessed batches to a GPU group's trainer."""
    found = [path for path in DEMO_SPECS if path.is_file()]
    if not found:
        raise UsageError(f"the demo example is not here: {' nor '.join(map(str, DEMO_SPECS))}",
                         hint="reinstall hetero-emu; the demo's job is part of the package")
    spec = _load(found[0], None, output_path, as_json=as_json)
    result = _run(spec, RunOptions(keep=keep), as_json=as_json, quiet=False)
    raise typer.Exit(result.exit_code)


@app.command()
def validate(spec_path: SpecArg, as_json: JsonOpt = False, s3_root: S3RootOpt = None) -> None:
    """Check a spec against SageMaker's rules without touching Docker; report every problem at once. A
    `tuning:` section is checked as CreateHyperParameterTuningJob checks its request (`hetero-emu tune`)."""
    spec = _load(spec_path, s3_root=s3_root, as_json=as_json)
    try:
        api.check_tuning(spec)
    except SpecError as err:
        if not as_json:
            raise SpecError(err.problems, str(spec_path)) from None
        _emit_json({"valid": False, "problems": _problems_json(err.problems)})
        raise typer.Exit(err.exit_code) from None
    warnings = _warn_spec(spec)
    groups = [{"instance_group_name": g.instance_group_name, "instance_type": g.instance_type,
               "instance_count": g.instance_count, "placement": dict(g.placement)} for g in spec.instance_groups]
    if as_json:
        _emit_json({"valid": True, "instance_groups": groups, "channels": list(spec.inputs),
                    "warnings": _problems_json(warnings),
                    **({"tuning": spec.tuning.config} if spec.tuning is not None else {})})
    else:
        tuned = ""
        if spec.tuning is not None:
            config = spec.tuning.config
            limits = config.get("ResourceLimits") or {}
            most = limits.get("MaxNumberOfTrainingJobs")
            tuned = (f"; tuning: {config.get('Strategy', 'Bayesian')}, "
                     f"{f'{most} trials' if most else 'every combination'}, "
                     f"{limits.get('MaxParallelTrainingJobs', 1)} at once")
        typer.echo(f"{spec_path}: valid ({len(groups)} group(s), {spec.host_count} host(s), "
                   f"{len(spec.inputs)} channel(s)){tuned}")


@app.command("render")
def render_cmd(
    spec_path: SpecArg,
    out: Annotated[Path | None, typer.Option("--output", "-o", help="Folder to write (must be new or empty); "
                                             "with --as-request, the request file to write (must be new).")] = None,
    host_order: HostOrderOpt = HostOrder.spec,
    seed: SeedOpt = None,
    job_name: JobNameOpt = None,
    memory: MemoryOpt = "instance",
    shm_size: ShmOpt = None,
    gpus: GpusOpt = None,
    cpus: CpusOpt = "instance",
    engine_name: EngineOpt = DEFAULT_ENGINE,
    as_request: Annotated[bool, typer.Option("--as-request", help="Write the CreateTrainingJob request (JSON) the "
                                             "spec corresponds to instead: to stdout, or to -o FILE.")] = False,
    s3_root: S3RootOpt = None,
    debug_host: DebugHostOpt = None,
    debug_port: DebugPortOpt = None,
    debug_wait: DebugWaitOpt = False,
    placement: PlacementOpt = None,
    compose_template: Annotated[Path | None, typer.Option(
        "--compose-template", metavar="FILE",
        help="The compose template DIR/compose.yaml is filled from, instead of the package's "
        "compose-templates/compose.yaml: copy that file and edit it (its comments say which places the "
        "plan fills; `x-host` becomes one service per host).")] = None,
) -> None:
    """Write the plan, the per-host /opt/ml files and a compose project, without Docker.

    DIR/plan.json, DIR/compose.yaml, DIR/hosts/algo-N/ (that host's /opt/ml), and the cluster's diagram
    DIR/cluster.dot (and DIR/cluster.svg when Graphviz is installed). `docker-compose -f
    DIR/compose.yaml up` runs the same containers (without the service's lifecycle). compose.yaml is
    filled from a template: --compose-template FILE gives your own.
    """
    limit = _memory(memory)
    gpu_mode, cpu_mode = _gpus(gpus), _cpus(cpus)
    debug = _debug_target(debug_host, debug_port, debug_wait)
    labels = _placement(placement)
    spec = _load(spec_path, job_name, s3_root=s3_root, shm_size=shm_size)
    if as_request:
        text = request.dumps_request(api.as_request(spec, job_name=job_name))
        if out is None:
            sys.stdout.write(text)
            return
        if out.exists() or out.is_symlink():
            raise UsageError(f"-o {out} exists", hint="write the request to a new file, or to stdout without -o")
        out.write_text(text)
        typer.echo(f"wrote {out}")
        return
    if out is None:
        raise UsageError("Missing option '--output' / '-o' DIR",
                         hint="the folder to write the plan and the hosts' files into; or --as-request to print "
                         "the request")
    out = out.resolve()
    plan = api.render(spec, out, host_order=host_order.value, seed=seed, memory=limit, engine_name=engine_name,
                      warn=lambda message: typer.echo(f"warning: {message}", err=True), debug=debug,
                      placement=labels, compose_template=compose_template, gpus=gpu_mode, cpus=cpu_mode)
    typer.echo(summary(plan))
    pictures = ", ".join(f"{out}/{name}" for name in ("cluster.dot", "cluster.svg") if (out / name).exists())
    typer.echo(f"\nwrote {out}/plan.json, {out}/compose.yaml, {out}/hosts/ and {pictures}")


VariantOpt = Annotated[str, typer.Option(
    "--variant", metavar="NAME",
    help=f"The recipe to build, a folder of images/: {', '.join(variant_names()) or DEFAULT_VARIANT}.")]
FrameworkOpt = Annotated[str | None, typer.Option(
    "--framework", metavar="FRAMEWORK:VERSION",
    help="Build the image of a framework version instead, as AWS's training image of it: pytorch:1.11 "
    "(torch, torchvision, torchaudio, sagemaker-pytorch-training) or tensorflow:2.9 (TensorFlow, Horovod "
    "with MPI, sagemaker-tensorflow-training). A Hugging Face image is huggingface-pytorch:TRANSFORMERS or "
    "huggingface-tensorflow:TRANSFORMERS (transformers_version, e.g. huggingface-pytorch:4.36: the framework "
    "image the SDK lists beside it plus transformers, datasets, accelerate... as AWS's image has them), "
    "with :VERSION after it for the PyTorch/TensorFlow version where the SDK lists several "
    "(huggingface-pytorch:4.6.1:1.8). Jobs build the one they need on their own.")]
PythonOpt = Annotated[str | None, typer.Option(
    "--python", metavar="PY_VERSION",
    help="With --framework: the estimator's py_version (py38, py310). The image runs it where Debian has "
    "it (3.9, 3.11, 3.13), else the nearest Python the framework has wheels for, and says so.")]


@image_app.command("build")
def image_build(
    rebuild: Annotated[bool, typer.Option("--rebuild", help="Build again even if the image is up to date.")]
    = False,
    variant: VariantOpt = DEFAULT_VARIANT,
    framework: FrameworkOpt = None,
    python: PythonOpt = None,
    for_file: Annotated[Path | None, typer.Option(
        "--for", metavar="FILE", show_default=False,
        help="Build the image the job of FILE (a YAML spec, or a CreateTrainingJob request) would run, its "
        "ECR name's framework image included, so that its first run does not wait for the build.")] = None,
    s3_root: S3RootOpt = None,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Build an image offline from its recipe (default: the training image, Debian rootfs + the real
    sagemaker-training toolkit + Open MPI): one line per step, the tools' output in a log file."""
    report = api.build_image(variant=variant, rebuild=rebuild, progress=StepPrinter(sys.stderr, verbose=verbose),
                             verbose=verbose, framework=framework, python=python, for_file=for_file,
                             s3_root=s3_root)
    if as_json:
        _emit_json({"image": report.image, "built": report.built, "seconds": round(report.seconds, 1),
                    "size_bytes": report.size_bytes})
    else:
        verb = "built" if report.built else "up to date:"
        typer.echo(f"{verb} {report.image} ({report.size_bytes / 1e6:.0f} MB, {report.seconds:.1f} s)")


@image_app.command("key")
def image_key(variant: VariantOpt = DEFAULT_VARIANT, framework: FrameworkOpt = None, python: PythonOpt = None,
              as_json: JsonOpt = False) -> None:
    """Print the cache key of the image `image build` with these options builds: its name and its recipe's
    hash, from the recipe files alone (no engine is asked, nothing is built). A CI cache keyed by it is
    restored before the build, and the archive `image save` writes is named by it (docs/ci.md)."""
    key = api.image_key(variant=variant, framework=framework, python=python)
    if as_json:
        _emit_json({"image": key.image, "recipe": key.recipe, "key": key.text, "file": key.file_name})
    else:
        typer.echo(key.text)


FolderArg = Annotated[Path, typer.Argument(metavar="FOLDER", show_default=False,
                                           help="The folder of saved images (a CI cache's path).")]


@image_app.command("save")
def image_save(folder: FolderArg, variant: VariantOpt = DEFAULT_VARIANT, framework: FrameworkOpt = None,
               python: PythonOpt = None, as_json: JsonOpt = False) -> None:
    """Save the image `image build` with these options built into FOLDER as KEY.tar (`image key`), as
    `docker save` does; nothing to write when that file is there, and the archives of the same image
    under older keys are removed. Exit 3 when the image is missing or out of date: build it first."""
    saved = api.save_image(folder, variant=variant, framework=framework, python=python,
                           progress=StepPrinter(sys.stderr))
    if as_json:
        _emit_json({"image": saved.key.image, "key": saved.key.text, "archive": str(saved.archive),
                    "written": saved.written, "size_bytes": saved.size_bytes, "seconds": round(saved.seconds, 1),
                    "removed": [str(p) for p in saved.removed]})
    else:
        verb = "saved" if saved.written else "already saved:"
        typer.echo(f"{verb} {saved.key.image} in {saved.archive} ({saved.size_bytes / 1e6:.0f} MB, "
                   f"{saved.seconds:.1f} s)")


@image_app.command("load")
def image_load(
    path: Annotated[Path, typer.Argument(metavar="PATH", show_default=False,
                                         help="An archive `image save` wrote, or the folder it wrote into.")],
    variant: VariantOpt = DEFAULT_VARIANT, framework: FrameworkOpt = None, python: PythonOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Load the image `image build` with these options builds from PATH: an archive `image save` wrote,
    or its folder (the archive of the image's current key is taken; none there is a cache miss, said
    with exit 0, and `image build` builds it). A loaded image is up to date exactly as a built one: `image
    build` then does nothing. Exit 2 for a missing or wrong file, 3 without an engine."""
    loaded = api.load_image(path, variant=variant, framework=framework, python=python,
                            progress=StepPrinter(sys.stderr))
    if as_json:
        _emit_json({"image": loaded.key.image, "key": loaded.key.text,
                    "archive": None if loaded.archive is None else str(loaded.archive), "loaded": list(loaded.loaded),
                    "up_to_date": loaded.up_to_date, "seconds": round(loaded.seconds, 1)})
    elif loaded.archive is None:
        typer.echo(f"not saved: {loaded.key.image} (key {loaded.key.text})")
    else:
        state = "up to date" if loaded.up_to_date else "not up to date"
        typer.echo(f"loaded {', '.join(loaded.loaded) or 'nothing named'} from {loaded.archive} ({state}, "
                   f"{loaded.seconds:.1f} s)")


@app.command()
def ps(as_json: JsonOpt = False, engine_name: EngineOpt = DEFAULT_ENGINE) -> None:
    """List the containers and networks of emulated jobs (found by their Docker labels)."""
    found = api.ps(engine_name=engine_name)
    pools = api.pools()
    now = datetime.now(timezone.utc)
    pool_rows = [{"kind": "warm-pool", "name": str(p.cache()), "job": p.job, "host": None, "group": None,
                  "status": f"Available, ends in {max(0, int(((p.expires or now) - now).total_seconds()))} s",
                  "driver": "-"} for p in pools]
    if as_json:
        _emit_json([{"kind": r.kind, "name": r.name, "job": r.job, "host": r.labels.get(LABEL_HOST),
                     "group": r.labels.get(LABEL_GROUP), "status": r.status, "driver": _driver_state(r)}
                    for r in found] + pool_rows)
        return
    if not found and not pools:
        typer.echo("no emulated jobs running, no warm pools")
        return
    typer.echo(f"{'JOB':<48} {'KIND':<9} {'NAME':<56} {'GROUP':<16} {'DRIVER':<8} STATUS")
    for r in sorted(found, key=lambda r: (r.job, r.kind, r.name)):
        typer.echo(f"{r.job:<48} {r.kind:<9} {r.name:<56} {r.labels.get(LABEL_GROUP, ''):<16} "
                   f"{_driver_state(r):<8} {STUCK_STATUS if r.stuck else r.status}")
    for row in pool_rows:
        typer.echo(f"{row['job']:<48} {row['kind']:<9} {row['name']:<56} {'':<16} {'-':<8} {row['status']}")


def _driver_state(resource: Resource) -> str:
    """running: a `hetero-emu run` on this machine owns it; gone: left behind (`clean` removes it);
    stuck: a network only an engine restart frees (its status says how)."""
    if resource.stuck:
        return "stuck"
    if resource.driver_alive is None:
        return "unknown"
    return "running" if resource.driver_alive else "gone"


@app.command()
def logs(
    job: Annotated[str, typer.Argument(help="A job name (running, kept or ended) or a job's output folder.")],
    host: Annotated[str | None, typer.Option("--host", help="Only this host, e.g. algo-2.")] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing lines as the hosts write them, "
                                         "until the job ends.")] = False,
    engine_name: EngineOpt = DEFAULT_ENGINE,
) -> None:
    """Print a job's host logs with `algo-N (group) |` prefixes (its logs/ files, written as the hosts run).

    With --follow: what is there, then every line as it is written, until the job ends (also when its
    driver died). Ctrl-C ends it (exit 130).
    """
    if follow:
        _follow(job, host, engine_name)
        return
    found = api.logs(job, host=host, engine_name=engine_name)
    reporter = ConsoleReporter([(h.host, h.group) for h in found])
    for h in found:
        for line in h.path.read_text(errors="replace").splitlines():
            reporter.log_line(h.host, h.group, line)


def _follow(job: str, host: str | None, engine_name: str) -> None:
    follower = api.LogFollower(job, host=host, engine_name=engine_name)
    hosts = follower.hosts()
    reporter = ConsoleReporter(hosts)
    try:
        for name, group, line in follower.lines():
            if name not in {h for h, _ in hosts}:  # a log file that appeared after the start
                hosts = follower.hosts()
                reporter.set_hosts(hosts)
            reporter.log_line(name, group, line)
    except KeyboardInterrupt:
        # Ctrl-C is how a follow ends by hand, as with `docker logs -f`: quietly, exit 130.
        _State.reported = True
        raise typer.Exit(130) from None
    if follower.ended == "gone":
        typer.echo(f"the driver of {follower.folder.name} is gone: the job ended without saying how "
                   f"(`hetero-emu clean --job {follower.folder.name}` removes what it left)", err=True)


@app.command("exec")
def exec_cmd(
    job: Annotated[str, typer.Argument(help="A job name (running, or kept by --keep/--keep-on-failure).",
                                       metavar="JOB")],
    host: Annotated[str, typer.Argument(help="The host, e.g. algo-2.", metavar="HOST")],
    command: Annotated[list[str], typer.Argument(help="The command and its arguments, after `--`.",
                                                 show_default=False, metavar="-- CMD")],
    engine_name: EngineOpt = DEFAULT_ENGINE,
) -> None:
    """Run a command in a host of a job: `hetero-emu exec JOB algo-2 -- bash` gives a shell in it.

    A running host runs it (docker exec; with a TTY when stdin is a terminal); a stopped one (kept
    by --keep or --keep-on-failure) runs it in a throwaway copy of its container, removed afterwards.
    The exit code is the command's; 2 for an unknown job or host; 3 when the job's containers are gone.
    """
    tty = sys.stdin.isatty() and sys.stdout.isatty()
    size = shutil.get_terminal_size() if tty else None

    def notice(message: str) -> None:
        # A raw terminal does not turn \n into a new line at column 0.
        sys.stderr.write(f"note: {message}" + ("\r\n" if tty else "\n"))
        sys.stderr.flush()

    io = ExecIO(stdout=sys.stdout.buffer, stderr=sys.stderr.buffer, stdin=sys.stdin.buffer if tty else None,
                tty=tty, size=(size.lines, size.columns) if size else None, notice=notice)
    sys.stdout.flush()
    with _raw_terminal(tty):
        code = api.exec_in_host(job, host, command, io, engine_name=engine_name)
    raise typer.Exit(code)


@contextlib.contextmanager
def _raw_terminal(enabled: bool) -> Iterator[None]:
    """The terminal in raw mode while a command with a TTY runs (as `docker exec -it` does): every key,
    Ctrl-C included, goes to the command; restored however the command ends."""
    if not enabled:
        yield
        return
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    try:
        tty.setraw(fd)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


@app.command()
def describe(
    job: Annotated[str, typer.Argument(help="A job name or a job's output folder.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print job.json exactly as written.")] = False,
    engine_name: EngineOpt = DEFAULT_ENGINE,
) -> None:
    """Describe a job as DescribeTrainingJob does (its job.json): status and its transitions, failure
    reason, times, hosts, channels, hyperparameters, artifacts and logs. A hyperparameter tuning job's
    name describes it as DescribeHyperParameterTuningJob does, with a row per trial."""
    if api.is_tuning_job(job):
        _describe_tuning(job, as_json=as_json)
        return
    found = api.description(job, engine_name=engine_name)
    if as_json:
        if found.text is not None:
            sys.stdout.write(found.text)  # the file as it is, byte for byte
        else:
            _emit_json(found.doc)  # running: no job.json yet
        return
    for line in describe_lines(found.doc, found.folder):
        typer.echo(line)


def _describe_tuning(name: str, *, as_json: bool) -> None:
    described = api.tuning_description(name)
    if as_json:
        _emit_json(described)
        return
    colour = sys.stdout.isatty() and "NO_COLOR" not in os.environ
    kind = trial_views.objective(described)[1]
    typer.echo(tuning_table.header(described, colour))
    best = (described.get("BestTrainingJob") or {}).get("TrainingJobName")
    for row in described.get("TrainingJobSummaries") or []:
        typer.echo(tuning_table.row(row, kind, row.get("TrainingJobName") == best, colour))
    _print_tuning_end(described, colour)


def _print_tuning_end(described: dict[str, Any], colour: bool) -> None:
    """A tuning job's status, counters and best trial, why it ended and where its files are."""
    for line in tuning_table.final_lines(described, colour):
        typer.echo(line)
    emulated = described.get("Emulator") or {}
    if emulated.get("StatusMessage"):
        typer.echo(f"ended: {emulated['StatusMessage']}")
    if emulated.get("Folder"):
        typer.echo(f"tuning.json and tuning.svg: {emulated['Folder']}")


@app.command("metrics")
def metrics_cmd(
    job: Annotated[str, typer.Argument(help="A job name or a job's output folder.")],
    as_json: Annotated[bool, typer.Option("--json", help="Every value: host, metric, value, time (JSON).")] = False,
    engine_name: EngineOpt = DEFAULT_ENGINE,
) -> None:
    """The values a job's metric_definitions took from its hosts' lines (running or ended): per metric
    and host, the count, last, minimum and maximum; the job's final values as DescribeTrainingJob's
    FinalMetricDataList gives them."""
    samples = api.job_metrics(job, engine_name=engine_name)
    if as_json:
        _emit_json([{"host": s.host, "metric": s.name, "value": s.value,
                     "time": datetime.fromtimestamp(s.at, timezone.utc).isoformat()} for s in samples])
        return
    if not samples:
        typer.echo(f"{job}: no metric values (no metric_definitions, or no line of the hosts matched one yet)")
        return
    typer.echo(f"{'METRIC':<24} {'HOST':<8} {'COUNT':>5} {'LAST':>12} {'MIN':>12} {'MAX':>12}")
    keys = sorted({(s.name, s.host) for s in samples}, key=lambda k: (k[0], contract.host_sort_key(k[1])))
    for name, host in keys:
        values = [s.value for s in samples if (s.name, s.host) == (name, host)]
        typer.echo(f"{name:<24} {host:<8} {len(values):>5} {values[-1]:>12.6g} {min(values):>12.6g} "
                   f"{max(values):>12.6g}")
    typer.echo("\nFinalMetricDataList: " + ", ".join(f"{m['MetricName']}={m['Value']:g}"
                                                      for m in final_metrics(samples)))


def describe_lines(doc: dict[str, Any], folder: Path) -> list[str]:
    """job.json as a few readable sections (`hetero-emu describe`)."""
    status, secondary = doc.get("TrainingJobStatus"), doc.get("SecondaryStatus")
    out = [f"{doc.get('TrainingJobName')}: {status}" + (f" ({secondary})" if secondary not in (None, status) else "")]
    failed = (doc.get("Emulator") or {}).get("FailedHost") if isinstance(doc.get("Emulator"), dict) else None
    if failed:
        out.append(f"failed first: {failed}")
    if doc.get("FailureReason"):
        out.append(f"FailureReason: {doc['FailureReason']}")
    created, started, ended = (_when(doc.get(k)) for k in ("CreationTime", "TrainingStartTime", "TrainingEndTime"))
    if created:
        out.append(f"created:  {created:%Y-%m-%d %H:%M:%S %Z}")
    if started:
        out.append(f"started:  {started:%Y-%m-%d %H:%M:%S %Z}" + (f" (+{_span(created, started)})" if created else ""))
    if ended:
        out.append(f"ended:    {ended:%Y-%m-%d %H:%M:%S %Z}" + (f" (training {_span(started, ended)})" if started
                                                                   else ""))
    if doc.get("BillableTimeInSeconds") is not None:
        out.append(f"billable: {doc['BillableTimeInSeconds']} s")
    pool = doc.get("WarmPoolStatus")
    if isinstance(pool, dict):
        out.append(f"warm pool: {pool.get('Status')}, retained {pool.get('ResourceRetainedBillableTimeInSeconds', 0)} s"
                   + (f", reused by {pool['ReusedByJob']}" if pool.get("ReusedByJob") else ""))
    emulator: dict[str, Any] = doc["Emulator"] if isinstance(doc.get("Emulator"), dict) else {}
    named = (doc.get("AlgorithmSpecification") or {}).get("TrainingImage")
    if emulator.get("Image") or named:
        out.append(f"image:    {emulator.get('Image') or named}")
    stand_in: dict[str, Any] = emulator["StandIn"] if isinstance(emulator.get("StandIn"), dict) else {}
    for note in stand_in.get("Notes") or []:  # which image stood in for the one named, on which Python
        out.append(f"          {note}")
    steps = [t for t in doc.get("SecondaryStatusTransitions") or [] if isinstance(t, dict)]
    if steps:
        out.append("\nstatus transitions:")
        for t in steps:
            start, end = _when(t.get("StartTime")), _when(t.get("EndTime"))
            took = f"{_span(start, end):>8}" if start and end else f"{'...':>8}"
            out.append(f"  {str(t.get('Status')):<20} {took}  {t.get('StatusMessage', '')}")
    hosts = [h for h in doc.get("Hosts") or [] if isinstance(h, dict)]
    if hosts:
        rows = [("HOST", "GROUP", "INSTANCE TYPE", "EXIT", "SECONDS")]
        rows += [(str(h.get("Host")), str(h.get("InstanceGroupName")), str(h.get("InstanceType")),
                  "-" if h.get("ExitCode") is None else str(h["ExitCode"]),
                  "-" if h.get("Seconds") is None else f"{h['Seconds']:.1f}") for h in hosts]
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        out.append("")
        out += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    channels = [c for c in doc.get("InputDataConfig") or [] if isinstance(c, dict)]
    if channels:
        out.append("\nchannels:")
        for c in channels:
            source = ((c.get("DataSource") or {}).get("S3DataSource") or {})
            where = source.get("S3Uri", "?")
            extra = ", ".join(str(x) for x in (source.get("S3DataDistributionType"), c.get("InputMode")) if x)
            groups = source.get("InstanceGroupNames")
            out.append(f"  {c.get('ChannelName')}: {where}" + (f" ({extra})" if extra else "")
                       + (f" -> {', '.join(groups)}" if groups else ""))
    params = doc.get("HyperParameters") or {}
    if isinstance(params, dict) and params:
        out.append("\nhyperparameters: " + ", ".join(f"{k}={v}" for k, v in sorted(params.items())))
    out.append("")
    model = (doc.get("ModelArtifacts") or {}).get("S3ModelArtifacts")
    if model:
        out.append(f"model:  {model}")
    output = folder / "output" / "output.tar.gz"
    if output.exists():
        out.append(f"output: {output}")
    out.append(f"logs:   {folder / 'logs'}")
    written = (folder / "job.json").is_file()
    out.append(f"job:    {folder / 'job.json'}" if written else "job:    (running: no job.json yet)")
    return out


def _when(text: object) -> datetime | None:
    try:
        return datetime.fromisoformat(text) if isinstance(text, str) else None
    except ValueError:
        return None


def _span(start: datetime | None, end: datetime | None) -> str:
    if start is None or end is None:
        return "?"
    seconds = (end - start).total_seconds()
    return f"{seconds:.1f} s" if seconds < 120 else f"{int(seconds // 60)} min {int(seconds % 60)} s"


@app.command()
def stop(
    job: Annotated[str, typer.Argument(help="The job name.")],
    grace: Annotated[float, typer.Option("--grace", min=0, help="Seconds between SIGTERM and SIGKILL.")]
    = DEFAULT_GRACE,
    engine_name: EngineOpt = DEFAULT_ENGINE,
) -> None:
    """Stop a running job's hosts (SIGTERM, then SIGKILL); its driver then collects and cleans up. A
    hyperparameter tuning job's name stops it as StopHyperParameterTuningJob does: every running trial
    is stopped and the tuning job ends Stopped."""
    if api.is_tuning_job(job):
        api.stop_tuning(job)
        typer.echo(f"stopping the tuning job {job} and its running trials")
        return
    count = api.stop(job, grace=grace, engine_name=engine_name)
    typer.echo(f"stopped {count} container(s) of {job}")


@app.command()
def clean(
    job: Annotated[str | None, typer.Option("--job", help="Only this job (even if a driver is running it).")]
    = None,
    everything: Annotated[bool, typer.Option("--all", help="Also jobs whose driver is still running.")] = False,
    as_json: JsonOpt = False,
    engine_name: EngineOpt = DEFAULT_ENGINE,
) -> None:
    """Remove the containers and networks of emulated jobs (found by label) whose driver is gone:
    killed, crashed, or run with --keep. A job another `hetero-emu run` is running now is left alone
    unless named with --job or --all is given."""
    chosen, skipped = api.clean(job, everything=everything, engine_name=engine_name)
    ended = api.end_pools(job)  # warm pools are kept on purpose, for a later job: clean ends them
    # Said, not failed (exit 0): a stuck network blocks no later job, and no retry removes it.
    stuck = [r.name for r in api.stuck_networks(job, engine_name=engine_name)]
    if as_json:
        _emit_json({"removed": [{"kind": r.kind, "name": r.name, "job": r.job} for r in chosen]
                    + [{"kind": "warm-pool", "name": str(p.cache()), "job": p.job} for p in ended],
                    "skipped_running_jobs": skipped, "stuck_networks": stuck})
        return
    typer.echo(f"removed {sum(r.kind == 'container' for r in chosen)} container(s) and "
               f"{sum(r.kind == 'network' for r in chosen)} network(s)"
               + (f", and ended {len(ended)} warm pool(s): {', '.join(p.job for p in ended)}" if ended else ""))
    if skipped:
        typer.echo(f"left alone, a driver is running them: {', '.join(skipped)} (--job NAME or --all to remove)")
    if stuck:
        typer.echo(f"left, the engine will not remove them until it restarts: {', '.join(stuck)} (it counts "
                   f"endpoints they no longer have, moby#42119; restart the engine: {RESTART_FIX}, then "
                   "`hetero-emu clean`)")


@app.command()
def serve(
    host: Annotated[str, typer.Option("--host", help="The address to listen on. Beyond 127.0.0.1 other machines "
                                      "reach it, so --credentials are then required.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="The port (0: any free one).")] = 4590,
    region: Annotated[str | None, typer.Option("--region", help="The region it serves (default: $AWS_REGION, "
                                               "$AWS_DEFAULT_REGION, us-west-2); requests signed for another "
                                               "get the service's error.", show_default=False)] = None,
    credentials: Annotated[str | None, typer.Option(
        "--credentials", metavar="KEY:SECRET", envvar="HETERO_EMU_CREDENTIALS", show_default=False,
        help="Check every request's SigV4 signature with this access key and secret (clients set them as "
        "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY); the page then asks for the token printed at start.")] = None,
    stop_jobs_on_exit: Annotated[bool, typer.Option("--stop-jobs-on-exit", help="Stop the jobs and tuning jobs "
                                                    "this server started when it stops (by default they run on to "
                                                    "their end, as on the service).")] = False,
    s3_root: S3RootOpt = None,
    engine_name: EngineOpt = DEFAULT_ENGINE,
    allow_host_path: Annotated[list[Path] | None, typer.Option(
        "--allow-host-path", metavar="DIR", show_default=False,
        help="Let requests name local paths under DIR (repeatable) where the service takes an S3 URI; without "
        "it, only s3:// and https:// locations (docs/serve.md).")] = None,
    host_names: Annotated[list[str] | None, typer.Option(
        "--host-name", metavar="NAME", show_default=False,
        help="Also answer requests for this name (repeatable): a name of this machine that clients put in the "
        "URL. Requests for other names get 421, so that no web page can reach the server by DNS rebinding; "
        "localhost, this machine's addresses and, beyond 127.0.0.1, its host name are always answered.")] = None,
    max_connections: Annotated[int | None, typer.Option(
        "--max-connections", min=1, show_default=False,
        help="Connections open at once (default 1000, fewer when the open-file limit is low); more are "
        "answered 503 and closed.")] = None,
) -> None:
    """An AWS endpoint for SageMaker training jobs, S3, CloudWatch (Logs), STS and IAM, and a live page
    of each job, until Ctrl-C. Point any SDK or the AWS CLI at it: AWS_ENDPOINT_URL=http://127.0.0.1:4590
    (docs/serve.md)."""

    from emulator.serve import app as serve_app  # the server's modules only when serving

    def ready(serving: serve_app.Serving) -> None:
        page = serving.url + "/" + (f"?token={serving.token}" if serving.token else "")
        typer.echo(f"serving {serving.region} on {serving.url} (S3 root {serving.s3_root})\n"
                   f"  export AWS_ENDPOINT_URL={serving.url} AWS_REGION={serving.region} "
                   f"AWS_DEFAULT_REGION={serving.region}"
                   + ("" if credentials else " AWS_ACCESS_KEY_ID=emu AWS_SECRET_ACCESS_KEY=emu")
                   + f"\n  export SAGEMAKER_USER_CONFIG_OVERRIDE={serving.sdk_config}  # the SageMaker SDK's "
                   "default bucket, so it never asks AWS's STS (docs/serve.md)"
                   + f"\n  live page: {page}"
                   + "".join(f"\n  also as {url}" for url in serving.also)
                   + "\n  Ctrl-C stops the server"
                   + ("" if stop_jobs_on_exit else " (jobs it started run on)"))

    try:
        serve_app.serve(host=host, port=port, region=region, s3_root=s3_root, credentials=credentials,
                        stop_jobs_on_exit=stop_jobs_on_exit, engine_name=engine_name, ready=ready,
                        host_names=host_names or (), max_connections=max_connections,
                        allow_host_paths=allow_host_path or ())
    except KeyboardInterrupt:
        # Ctrl-C: the server has stopped and the process ends now. The interpreter's last garbage
        # collections would walk every object it loaded (botocore's service models above all), most of
        # a second on a busy machine; frozen objects are left to the exit itself
        # (https://docs.python.org/3/library/gc.html#gc.freeze).
        gc.freeze()
        raise


@app.command("instance-types")
def instance_types(
    family: Annotated[str | None, typer.Option("--family", help="Only this family, e.g. p3 or ml.p3.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """List the instance types the emulator knows (vCPUs, memory, GPUs)."""
    wanted = None if family is None else _family(family)
    types = sorted((t for t in catalog().values() if wanted in (None, t.family)),
                   key=lambda t: (t.family, t.vcpus, t.memory_gib))
    if as_json:
        _emit_json([{"name": t.name, "vcpus": t.vcpus, "memory_gib": t.memory_gib, "gpus": t.gpus,
                     "gpu_model": t.gpu_model} for t in types])
        return
    typer.echo(f"{'INSTANCE TYPE':<22} {'VCPUS':>5} {'MEMORY GIB':>10} {'GPUS':>4}  GPU MODEL")
    for t in types:
        typer.echo(f"{t.name:<22} {t.vcpus:>5} {t.memory_gib:>10g} {t.gpus:>4}  {t.gpu_model or '-'}")


def _family(text: str) -> str:
    """`p3`, `ML.P3` or `ml.p3.` -> `ml.p3`; a family the catalogue does not list is a usage error."""
    name = text.strip().lower().rstrip(".")
    if not name.startswith("ml."):
        name = "ml." + name
    known = families()
    if name not in known:
        raise UsageError(f"--family {text!r}: no such instance family",
                         hint=f"known families: {', '.join(sorted(known))}")
    return name


# --------------------------------------------------------------------------------------------------


def _fail(err: EmulatorError) -> NoReturn:
    sys.stderr.write(f"{'stopped by the user' if isinstance(err, Interrupted) else 'error'}: {err.message}\n")
    if err.hint:
        sys.stderr.write(f"hint: {err.hint}\n")
    if _State.debug:
        traceback.print_exception(err)
    sys.exit(err.exit_code)


def _raise_interrupt(signum: int, frame: object) -> None:
    # SIGTERM (e.g. from CI's timeout) stops the job like Ctrl-C does: teardown runs in `finally`.
    # Recorded, because typer turns a KeyboardInterrupt that leaves a command into a silent exit 130.
    _State.interrupted = True
    raise KeyboardInterrupt


def _is_click_error(err: BaseException) -> bool:
    """click's ClickException, whichever copy raised it: typer >= 0.29 bundles its own click (and no
    longer depends on the click package), older typer uses click's. Both have `show` and `exit_code`."""
    return callable(getattr(err, "show", None)) and isinstance(getattr(err, "exit_code", None), int)


def _without_debug(args: list[str]) -> tuple[list[str], bool]:
    """The arguments without `--debug`, wherever it stands (before or after the command name, as a user
    adds it when an error asks for it), and whether it was there. After `--` it is an argument."""
    end = args.index("--") if "--" in args else len(args)
    kept = [a for a in args[:end] if a != "--debug"] + args[end:]
    return kept, len(kept) != len(args)


def main() -> None:
    signal.signal(signal.SIGTERM, _raise_interrupt)
    signal.signal(signal.SIGINT, _raise_interrupt)
    args, _State.debug = _without_debug(sys.argv[1:])
    try:
        # The program's name, however it was started (`python -m emulator` too): shell completion
        # reads it into its variable, _HETERO_EMU_COMPLETE, and the script it installs completes it.
        code = app(args=args, prog_name="hetero-emu", standalone_mode=False)
    except EmulatorError as err:
        _fail(err)
    except KeyboardInterrupt:
        sys.stderr.write("stopped by the user\n")
        sys.exit(130)
    except Exception as err:
        if _is_click_error(err):
            # Usage errors (unknown option, missing argument, bad choice): click's own message.
            err.show()  # type: ignore[attr-defined]
            sys.exit(err.exit_code)  # type: ignore[attr-defined]
        if type(err).__name__ == "Abort":  # click turns Ctrl-C at a prompt into Abort
            sys.stderr.write("stopped by the user\n")
            sys.exit(130)
        # A bug: say so plainly, traceback only with --debug.
        if _State.debug:
            raise
        sys.stderr.write(f"internal error: {type(err).__name__}: {err}\nhint: rerun with --debug and report it\n")
        sys.exit(1)
    if code == 130 and _State.interrupted and not _State.reported:
        # typer ended the command on a KeyboardInterrupt without a word: say what was stopped.
        command = " ".join(["hetero-emu", *sys.argv[1:]])
        sys.stderr.write(f"stopped by the user during `{command[:200]}`\n")
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
