"""Upstream's semantics that do not depend on storage: the default hooks behind ``reset_to_zero`` and
``restore_value``, and pruning (``early_config_prune``, ``perf_model``/``top_k``) with upstream's
error texts. A mixin of :class:`~triton_dejavu_like.tuner.autotuner.Autotuner`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._compat import Config
from .errors import AutotuningError, failed_as

#: Upstream's texts (3.6+ and 3.3+), on every release.
PRUNED_EVERYTHING = (
    "No valid autotuner configs after pruning. `early_config_prune` should return at least one config."
)
BAD_TOP_K = "Error while pruning configs, top_k must be either 1) a float <= 1.0 or 2) an int"


class UpstreamSemantics:
    """Reads the upstream ``Autotuner`` attributes it is mixed with."""

    reset_to_zero: list[str]
    restore_value: list[str]
    restore_copies: dict[str, Any]
    configs: list[Config]
    nargs: dict[str, Any] | None
    early_config_prune: Callable[..., Any] | None
    perf_model: Callable[..., Any] | None
    configs_top_k: float | int

    def _default_pre_hook(self, kwargs: dict[str, Any], reset_only: bool = False) -> None:
        for name in self.reset_to_zero:
            if kwargs.get(name) is not None:
                kwargs[name].zero_()
        if not reset_only:
            self.restore_copies = {
                name: kwargs[name].clone() for name in self.restore_value if kwargs.get(name) is not None
            }

    def _default_post_hook(self, kwargs: dict[str, Any], exception: BaseException | None) -> None:
        for name, value in self.restore_copies.items():
            kwargs[name].copy_(value)
        self.restore_copies = {}

    def prune_configs(self, kwargs: dict[str, Any], nargs: dict[str, Any] | None = None) -> list[Config]:
        """Upstream's pruning (early_config_prune, then perf_model top-k), on explicit arguments."""
        if nargs is None:
            nargs = self.nargs or {}
        configs = list(self.configs)
        if self.early_config_prune:
            pruned = self.early_config_prune(configs, nargs, **kwargs)
            configs = list(pruned) if pruned is not None else []  # None (no return): nothing left
            if not configs:
                raise AutotuningError(PRUNED_EVERYTHING)
        if self.perf_model:
            top_k = self.configs_top_k
            if isinstance(top_k, float) and top_k <= 1.0:
                top_k = max(1, int(len(configs) * top_k))
            elif not isinstance(top_k, int):
                raise TypeError(BAD_TOP_K)
            if len(configs) > top_k:
                estimates = [self.perf_model(**nargs, **kwargs, **c.all_kwargs()) for c in configs]
                order = sorted(range(len(configs)), key=estimates.__getitem__)
                configs = [configs[i] for i in order[:top_k]]
            if not configs:  # upstream fails later, with min() of an empty sequence
                raise failed_as(ValueError, f"prune_configs_by's top_k={top_k!r} left no config to benchmark")
        return configs
