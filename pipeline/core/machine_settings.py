"""What the machine fingerprint reads of a config: its build settings' backend and
compatibility. A PipelineConfig gives them, and so does pipeline.machine.build_settings'
Params, which the always-run fingerprint stage reads without OmegaConf. Here, in core,
so every stage's face (flow/stages.py) can name the type without depending on the machine
layer. The fingerprint record those settings make is records/fingerprint_file.py."""

from collections.abc import Sequence
from typing import Protocol


class MachineSettings(Protocol):
    """The build settings the machine fingerprint reads."""

    @property
    def backend(self) -> str: ...
    @property
    def hardware_compatibility(self) -> str: ...
    @property
    def version_compatible(self) -> bool: ...
    @property
    def compute_capabilities(self) -> Sequence[str]: ...


class FingerprintParams(Protocol):
    """What fingerprint() reads of a config: PipelineConfig, or on the always-run
    fingerprint stage pipeline.machine.build_settings.Params (read without OmegaConf).
    That type is not named at this module's top: every stage would depend on its module."""

    @property
    def build(self) -> "MachineSettings": ...
