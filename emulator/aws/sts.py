"""STS answered locally: GetCallerIdentity names one fixed local account, which the SageMaker SDK
uses for its default bucket (`sagemaker-<region>-<account>`) and as the expected bucket owner."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from emulator.aws.stub import Operation, Service

ACCOUNT = "000000000000"
USER_ARN = f"arn:aws:iam::{ACCOUNT}:user/hetero-emu"
USER_ID = "hetero-emu"


class STS(Service):
    name = "sts"
    quick = frozenset({"GetCallerIdentity"})

    def operations(self) -> Mapping[str, Operation]:
        return {"GetCallerIdentity": self.get_caller_identity}

    def get_caller_identity(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"UserId": USER_ID, "Account": ACCOUNT, "Arn": USER_ARN}
