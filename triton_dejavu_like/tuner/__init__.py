"""The front: the decorator, the Autotuner, the tuning key, settings, the miss policy, a tuning run."""

from __future__ import annotations

from .autotuner import Autotuner
from .config_space import ConfigSpace
from .decorator import autotune
from .errors import AutotuningError
from .settings import TunerSettings

__all__ = ["Autotuner", "AutotuningError", "ConfigSpace", "TunerSettings", "autotune"]
