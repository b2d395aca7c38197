"""IAM answered locally, for the SDKs' role checks: there is no account, so every role asked for
exists and may do everything.

The SageMaker SDK v3 checks the `role=` of a `ModelTrainer` before it starts a job: it simulates the
role's policies for the actions a training job needs (SimulatePrincipalPolicy, which must answer
`allowed`) and reads the role's trust policy (GetRole, which must let sagemaker.amazonaws.com assume
it). SDK v2's `get_execution_role` reads a role with GetRole too. A role is answered in the local
placeholder account (`emulator.aws.sts.ACCOUNT`), whatever account the caller's ARN names.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote

from emulator.aws.sts import ACCOUNT
from emulator.aws.stub import ApiError, Operation, Service

# Roles "exist since" a fixed time: answers do not change from one call to the next.
CREATED = datetime(2024, 1, 1, tzinfo=timezone.utc)
# What a SageMaker execution role's trust policy says: the service may assume the role.
TRUST_POLICY = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Principal": {"Service": "sagemaker.amazonaws.com"},
                   "Action": "sts:AssumeRole"}],
}
MAX_ROLE_NAME = 64


class IAM(Service):
    name = "iam"

    def operations(self) -> Mapping[str, Operation]:
        return {"SimulatePrincipalPolicy": self.simulate_principal_policy, "GetRole": self.get_role}

    def simulate_principal_policy(self, params: dict[str, Any]) -> dict[str, Any]:
        """Every action allowed, one result per action and resource (`*` when none are named), as
        IAM answers a simulation."""
        resources = list(params.get("ResourceArns") or ["*"])
        results = [{"EvalActionName": action, "EvalResourceName": resource, "EvalDecision": "allowed",
                    "MatchedStatements": [], "MissingContextValues": []}
                   for action in params.get("ActionNames") or [] for resource in resources]
        return {"EvaluationResults": results, "IsTruncated": False}

    def get_role(self, params: dict[str, Any]) -> dict[str, Any]:
        name = str(params.get("RoleName") or "")
        if not name or len(name) > MAX_ROLE_NAME:
            raise ApiError("ValidationError", f"1 validation error detected: Value '{name}' at 'roleName' failed to "
                           "satisfy constraint: Member must have length between 1 and 64")
        # IAM sends the policy document URL-encoded; botocore decodes it (a handler registered for
        # iam's after-call), so the answer carries it encoded as IAM's does.
        return {"Role": {"Path": "/", "RoleName": name, "RoleId": _role_id(name),
                         "Arn": role_arn(name), "CreateDate": CREATED, "MaxSessionDuration": 3600,
                         "AssumeRolePolicyDocument": quote(json.dumps(TRUST_POLICY))}}


def role_arn(name: str) -> str:
    return f"arn:aws:iam::{ACCOUNT}:role/{name}"


def _role_id(name: str) -> str:
    """A role ID as IAM forms them (AROA and 17 more), the same for the same name every time."""
    return "AROA" + hashlib.sha256(name.encode()).hexdigest()[:17].upper()
