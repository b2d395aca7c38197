"""Run SageMaker Python SDK code unchanged on the emulator: `EmulatorSession` for SDK v2 (its
`sagemaker.Session`; `pip install 'hetero-emu[sagemaker]'`), `EmulatorSessionV3` for SDK v3 (its
`sagemaker.core` Session, for `ModelTrainer`; `pip install 'hetero-emu[sagemaker3]'`).

The two SDKs cannot be installed together and each module imports its own, so the names are
imported when first asked for: `from emulator.sagemaker import EmulatorSessionV3` under v3 never
imports the v2 session module."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from emulator.sagemaker.session import EmulatorSession
    from emulator.sagemaker.v3 import EmulatorSessionV3

__all__ = ["EmulatorSession", "EmulatorSessionV3"]


def __getattr__(name: str) -> Any:
    if name == "EmulatorSession":
        from emulator.sagemaker.session import EmulatorSession

        return EmulatorSession
    if name == "EmulatorSessionV3":
        from emulator.sagemaker.v3 import EmulatorSessionV3

        return EmulatorSessionV3
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
