"""The names of a tuning job's trials, as the service names them: `<tuning job name>-<NNN>-<8 hex>`,
e.g. `mytuning-001-a1b2c3d4`: the trial's number from 1, three digits at least, then a random token
(a real tuning job's trial, as DescribeTrainingJob shows it: `xgboost-190407-1532-005-0e830ada`).

A tuning job's name has at most 32 characters, so a trial's name (at most 32 + 1 + 3 + 1 + 8 = 45 for
the first 999 trials) stays within a training job's 63.
"""

from __future__ import annotations

import secrets


def trial_job_name(tuning_job_name: str, number: int, token: str | None = None) -> str:
    """The training job name of trial `number` (from 1); `token` is the 8 hex digits, random if not given."""
    if number < 1:
        raise ValueError(f"a trial's number starts at 1, not {number}")
    token = secrets.token_hex(4) if token is None else token
    return f"{tuning_job_name}-{number:03d}-{token}"
