"""Fold the training toolkit's environment dump into one console line per host.

Before it runs the script, the sagemaker-training toolkit logs one message of ~150 lines on every host
(sagemaker_training/logging_config.py `log_script_invocation`, through the logger's default format
"%(asctime)s %(name)-12s %(levelname)-8s %(message)s"):

    2026-12-01 13:00:00,123 sagemaker-training-toolkit INFO     Invoking user script
    <blank>
    Training Env:
    <blank>
    {                                  json.dumps(training_env, indent=4)
        "additional_framework_parameters": {},
        ...
    }
    <blank>
    Environment variables:
    <blank>
    SM_HOSTS=["algo-1","algo-2"]       one KEY=value line per variable
    ...
    <blank>
    Invoking script with the following command:
    <blank>
    /opt/venv/bin/python3 train.py --epochs 2
    <blank>
    <blank>

On the console that block becomes `[toolkit environment: 152 lines, in logs/algo-1.log] invoking:
/opt/venv/bin/python3 train.py --epochs 2`; the log file keeps every byte (emulator.run.logs).

Only that exact shape is folded, and at most MAX_LINES lines / MAX_BYTES bytes of it: the block's lines
are held back while they follow the shape, and the first line that does not (a script printing a
similar header, a variable whose value holds a newline, output cut short) ends the fold and shows
everything held back as it was, then that line. Nothing the host prints is hidden, except the
toolkit's own complete block.
"""

from __future__ import annotations

import re
from collections.abc import Callable

HEADER = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} sagemaker-training-toolkit INFO +Invoking user script")
ENV_LINE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*")
COMMAND_TITLE = "Invoking script with the following command:"
# The longest block folded: the environment grows with the hyperparameters and channels (each
# appears in the JSON and as variables), a few hundred lines and some 100 KB for a large job.
MAX_LINES = 5000
MAX_BYTES = 4 * 1024 * 1024
# Blank lines the toolkit prints after the command (the message's two newlines, then the handler's).
TRAILING_BLANKS = 2


def _exactly(text: str) -> Callable[[str], bool]:
    return lambda line: line == text


# The block after its header, step by step: (does this line belong here, may the step repeat).
_BLANK = _exactly("")
_STEPS: tuple[tuple[Callable[[str], bool], bool], ...] = (
    (_BLANK, False),
    (_exactly("Training Env:"), False),
    (_BLANK, False),
    (_exactly("{"), False),
    (lambda line: line.startswith(" "), True),  # json.dumps(indent=4): every inner line is indented
    (_exactly("}"), False),
    (_BLANK, False),
    (_exactly("Environment variables:"), False),
    (_BLANK, False),
    (lambda line: ENV_LINE.fullmatch(line) is not None, True),
    (_BLANK, False),
    (_exactly(COMMAND_TITLE), False),
    (_BLANK, False),
)


class EnvironmentFold:
    """One stream of one host: `feed` each console line, show what it returns; `flush` at the end."""

    def __init__(self, log_name: str) -> None:
        self.log_name = log_name
        self._held: list[str] = []
        self._bytes = 0
        self._step = 0  # index into _STEPS of the next line expected; len(_STEPS): the command
        self._repeated = False  # the current repeatable step has matched at least once
        self._blanks = 0  # trailing blank lines still to swallow after a folded block

    def feed(self, line: str) -> list[str]:
        """The lines to show for `line` (none while a block is held back)."""
        if self._blanks:
            self._blanks -= 1
            if line == "":
                return []
            self._blanks = 0
        if not self._held:
            if "Invoking user script" in line and HEADER.fullmatch(line):
                self._hold(line)
                return []
            return [line]
        if self._step == len(_STEPS):
            if line:
                return [self._summary(line)]
            return self._release(line)
        if self._fits(line) and len(self._held) < MAX_LINES and self._bytes + len(line) < MAX_BYTES:
            self._hold(line)
            return []
        return self._release(line)

    def flush(self) -> list[str]:
        """What is still held back (the output ended inside a block), to show as it was."""
        shown, self._held, self._bytes, self._step, self._repeated = self._held, [], 0, 0, False
        return shown

    def _fits(self, line: str) -> bool:
        """Whether `line` continues the block, advancing through the steps."""
        while self._step < len(_STEPS):
            matches, repeats = _STEPS[self._step]
            if matches(line):
                if repeats:
                    self._repeated = True
                else:
                    self._step += 1
                return True
            if not (repeats and self._repeated):
                return False
            # A repeatable step that matched before ends here: try the next step.
            self._step += 1
            self._repeated = False
        return False

    def _hold(self, line: str) -> None:
        self._held.append(line)
        self._bytes += len(line) + 1

    def _summary(self, command: str) -> str:
        count = len(self._held) + 1
        self.flush()
        self._blanks = TRAILING_BLANKS
        return f"[toolkit environment: {count} lines, in {self.log_name}] invoking: {command}"

    def _release(self, line: str) -> list[str]:
        """Not the toolkit's block after all: everything held, as it was, then `line` (which may start
        a block of its own)."""
        return self.flush() + self.feed(line)
