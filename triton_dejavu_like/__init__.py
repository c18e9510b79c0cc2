"""A drop-in replacement for ``triton.autotune`` that tunes once and restores from disk forever after.

import triton_dejavu_like as tdl

@tdl.autotune(key=["M", "N", "K"], config_space=tdl.ConfigSpace({...}, num_warps=[4, 8]))
@triton.jit
def kernel(...): ...
"""

from __future__ import annotations

import logging

from . import _env

__version__ = "0.1.0"

from . import utils  # an attribute after a plain import, as triton_dejavu.utils is
from ._compat import Config, NoGpuDriverError
from ._log import DejavuConfigWarning, DejavuStorageWarning, DejavuTuningWarning, DejavuWarning
from .measure.bench import TimingPolicy
from .measure.isolation import IsolationError
from .search import MissingExtraError
from .store.layered import add_store
from .tools.aot.case import TuneCase
from .tuner import Autotuner, AutotuningError, ConfigSpace, autotune
from .tuner.dejavu_extras import global_cache_lock, global_metadata_store, jitcache
from .tuner.misses import misses, reset_misses
from .tuner.mode import tuning
from .tuner.ranks import distributed

_logger = logging.getLogger(__name__)
_logger.addHandler(logging.NullHandler())
if _env.debug():
    _handler = logging.StreamHandler()
    _handler.setFormatter(logging.Formatter("[%(name)s] %(levelname)s %(message)s"))
    _logger.addHandler(_handler)
    _logger.setLevel(logging.DEBUG)

__all__ = [
    "Autotuner",
    "AutotuningError",
    "Config",
    "ConfigSpace",
    "DejavuConfigWarning",
    "DejavuStorageWarning",
    "DejavuTuningWarning",
    "DejavuWarning",
    "IsolationError",
    "MissingExtraError",
    "NoGpuDriverError",
    "TimingPolicy",
    "TuneCase",
    "__version__",
    "add_store",
    "autotune",
    "distributed",
    "global_cache_lock",
    "global_metadata_store",
    "jitcache",
    "misses",
    "reset_misses",
    "tuning",
    "utils",
]
