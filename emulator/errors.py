"""The one exception hierarchy. The CLI maps each class to an exit code (docs/failures.md, Exit codes)."""

from __future__ import annotations

from dataclasses import dataclass


class EmulatorError(Exception):
    """Base of every error the emulator raises on purpose; never shown with a traceback."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


@dataclass(frozen=True)
class Problem:
    """One violation found in a spec: where (dotted field path) and what."""

    path: str
    message: str
    hint: str | None = None

    def __str__(self) -> str:
        text = f"{self.path}: {self.message}" if self.path else self.message
        return f"{text} ({self.hint})" if self.hint else text


class SpecError(EmulatorError):
    """The job spec is invalid; carries every problem found, not just the first."""

    exit_code = 2

    def __init__(self, problems: list[Problem], source: str | None = None) -> None:
        self.problems = problems
        self.source = source
        where = f" in {source}" if source else ""
        count = len(problems)
        head = f"invalid job spec{where}: {count} problem{'s' if count != 1 else ''}"
        super().__init__(head + "".join(f"\n  - {p}" for p in problems))


class UsageError(EmulatorError):
    """The command line asks for something that cannot be done (bad option value, unsupported mode)."""

    exit_code = 2


class JobFolderTaken(UsageError):
    """The job's output folder exists already: an existing job's output is never overwritten."""


class EnvironmentProblem(EmulatorError):
    """The machine cannot run the job: no Docker engine, image missing and not buildable, ..."""

    exit_code = 3


class DockerUnavailable(EnvironmentProblem):
    """No Docker engine answers."""


class ImageMissing(EnvironmentProblem):
    """The job's image is not in the engine and cannot be built here."""


class ImageBuildError(EnvironmentProblem):
    """Building the default training image failed."""


class WheelhouseError(EnvironmentProblem):
    """The wheels of a job's requirements.txt cannot be built on this machine (docs/images.md, requirements.txt)."""


class Interrupted(EmulatorError):
    """The user stopped the job (Ctrl-C or SIGTERM)."""

    exit_code = 130


class NotRunning(EnvironmentProblem):
    """The job has no container to run a command in: it ended and its containers were removed."""


@dataclass
class ApiError(Exception):
    """An error answer of an AWS operation, in the service's code and words (ValidationException,
    ResourceInUse, ...): raised by the AWS services and the jobs layer beneath them; botocore turns it
    into the client's exception. Not an EmulatorError: no exit code, it is an answer."""

    code: str
    message: str
    status: int = 400

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"
