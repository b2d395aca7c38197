"""Run SageMaker Python SDK code unchanged on the emulator: `EmulatorSession` (needs the `sagemaker`
package, v2: `pip install 'hetero-emu[sagemaker]'`)."""

from emulator.sagemaker.session import EmulatorSession

__all__ = ["EmulatorSession"]
