"""The decorator and the Autotuner: key, miss policy, hooks, launch.

``Autotuner`` subclasses ``triton.runtime.autotuner.Autotuner``, so tools that inspect upstream
autotuners keep working (``.cache``, ``.best_config``, ``.configs_timings``, ``.bench_time``,
``.configs``). A call computes the tuning key as upstream does and looks it up in memory; only a
miss reaches storage, the miss policy and the search.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import math
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from . import _compat, _env, identity
from ._compat import Config
from .bench import QUANTILES, Benchmarker, TimingPolicy, make_benchmarker
from .codec import (
    EncodingError,
    config_id,
    decode_config,
    describe_config,
    encode_config,
    encode_key,
    key_id,
)
from .config_space import ConfigSpace, platform_check_for
from .evaluate import Evaluator, InProcessEvaluator, LaunchContext, one_line_reason
from .isolation import IsolatedEvaluator, IsolationSettings
from .numerics import CheckedEvaluator, NumericalCheck
from .progress import progress_bar
from .search import Budget, SearchRun, SearchSpace, drive, make_strategy, require_smac
from .storage import CACHE_FILE_NAME, CacheFile, KernelIdentity, default_root, default_tag, warn_once

log = logging.getLogger(__name__)

#: How many of the best candidates an entry keeps with their timings.
TOP_K = 5
#: How many ruled-out candidates an entry lists with their reasons.
MAX_RULED_OUT = 64


#: What a hit launches with: the config, its launch kwargs, and its pre_hook (or None).
_Launch = tuple[Config, dict[str, Any], Callable[..., Any] | None]
#: Types that never carry a dtype: skipped without an attribute lookup on the hot path.
_NO_DTYPE = frozenset({int, float, bool, str, type(None)})
_Tensor = torch.Tensor


class AutotuningError(_compat.AutotunerErrorBase):
    """Tuning could not produce a config (every candidate failed, or a bad heuristic)."""


@dataclass
class _Decision:
    config: Config
    source: str  # "tuned" | "restored" | "heuristic" | "single"
    timings: list[float] | None = None
    configs_timings: dict[Config, list[float]] = field(default_factory=dict)
    duration_s: float = 0.0
    entry: dict[str, Any] | None = None


@dataclass
class _ProcessState:
    """What a tuner learns once per process, at its first miss."""

    interpreted: bool
    platform: identity.Platform
    benchmarker: Benchmarker
    cache_file: CacheFile | None
    restored: dict[str, dict[str, Any]]


class Autotuner(_compat.UpstreamAutotuner):
    """An upstream-compatible autotuner that stores its results and restores them in later processes."""

    def __init__(
        self,
        fn: Any,
        arg_names: Sequence[str],
        configs: Sequence[Config] | None,
        key: Sequence[str],
        reset_to_zero: Sequence[str] | None = None,
        restore_value: Sequence[str] | None = None,
        pre_hook: Callable[..., Any] | None = None,
        post_hook: Callable[..., Any] | None = None,
        prune_configs_by: dict[str, Any] | None = None,
        warmup: float | None = None,
        rep: float | None = None,
        use_cuda_graph: bool = False,
        do_bench: Callable[..., Any] | None = None,
        *,
        config_space: ConfigSpace | None = None,
        fallback_heuristic: Callable[[tuple[Any, ...]], Config] | None = None,
        use_bo: bool = False,
        use_random_search: bool = False,
        search_max_search_t: float = 180,
        search_max_share: float = 1.0,
        search_max_repeat: int = 1,
        search_seed: int = 0,
        custom_data_storage: str | Path | None = None,
        ignore_dtypes: bool = False,
        timing: TimingPolicy | None = None,
        tag: str | None = None,
        use_isolated_process: bool | None = None,
        isolation_timeout_s: float | None = None,
        isolation_start_method: str | None = None,
        numerical_check: bool | None = None,
        reference_fn: Callable[..., Any] | None = None,
        check_outputs: Sequence[str] | None = None,
        check_rtol: float | None = None,
        check_atol: float | None = None,
    ) -> None:
        arg_names = list(arg_names)
        key = list(key)
        _check_names(
            arg_names,
            key=key,
            reset_to_zero=reset_to_zero,
            restore_value=restore_value,
            check_outputs=check_outputs,
        )
        if configs and config_space is not None:
            raise ValueError("give either configs or config_space, not both")
        if config_space is not None and not isinstance(config_space, ConfigSpace):
            raise TypeError(f"config_space must be a ConfigSpace, got {type(config_space).__name__}")
        if use_bo and use_random_search:
            raise ValueError("use_bo and use_random_search exclude each other")
        if use_bo:
            require_smac()
        if fallback_heuristic is not None and not callable(fallback_heuristic):
            raise TypeError("fallback_heuristic must be a callable taking the tuning key")
        self._config_space = config_space
        self._configs_list: list[Config] | None = None
        super().__init__(
            fn,
            arg_names,
            None if config_space is not None else (list(configs) if configs else None),
            key,
            reset_to_zero,
            restore_value,
            pre_hook=pre_hook,
            post_hook=post_hook,
            prune_configs_by=prune_configs_by,
            **_compat.upstream_init_kwargs(do_bench=self._bench_dispatch),
        )
        _compat.disable_upstream_disk_cache(self)
        if config_space is not None:
            self._configs_list = None  # listed on the machine that runs it, at first use
        if not pre_hook and (self.reset_to_zero or self.restore_value):
            self.pre_hook = self._default_pre_hook
        if not post_hook and self.restore_value:
            self.post_hook = self._default_post_hook
        self.restore_copies: dict[str, Any] = {}
        self.num_warmups = warmup
        self.num_reps = rep
        self.use_cuda_graph = use_cuda_graph
        self.user_do_bench = do_bench
        self.fallback_heuristic = fallback_heuristic
        self.ignore_dtypes = bool(ignore_dtypes)
        self.custom_data_storage = Path(custom_data_storage) if custom_data_storage is not None else None
        self.tag = tag
        self.timing = timing or TimingPolicy()
        self.strategy_name = "bayesian" if use_bo else ("random" if use_random_search else "exhaustive")
        self.budget = (
            Budget()
            if self.strategy_name == "exhaustive"
            else Budget(
                max_time_s=float(search_max_search_t),
                max_share=float(search_max_share),
                max_repeat=int(search_max_repeat),
                seed=int(search_seed),
            )
        )
        self.bench_time = 0.0
        self.configs_timings: dict[Config, list[float]] = {}
        self.best_config: Config | None = None
        self.last_decision: str | None = None
        self.nargs: dict[str, Any] | None = None
        self._config_ids: dict[int, tuple[Config, str]] = {}
        self._state: _ProcessState | None = None
        self._lock = threading.RLock()
        # hot path
        self._launch: dict[tuple[Any, ...], _Launch] = {}
        self._arg_set = frozenset(arg_names)
        self._n_args = len(arg_names)
        self._key_plan = tuple((name, arg_names.index(name)) for name in key)
        self._key_positions = tuple(pos for _, pos in self._key_plan)
        self._last_key_position = max(self._key_positions, default=-1)
        self._dtypes_in_key = not self.ignore_dtypes
        self._meta_names = self._tuned_names()
        self.isolation = IsolationSettings(use_isolated_process, isolation_timeout_s, isolation_start_method)
        self.numerical_check = NumericalCheck(
            numerical_check,
            reference_fn,
            tuple(check_outputs) if check_outputs is not None else None,
            check_rtol,
            check_atol,
        )

    # --- the config list ----------------------------------------------------------------------

    @property
    def configs(self) -> list[Config]:
        if self._configs_list is None and self._config_space is not None:
            space = self._config_space
            interpreted = _compat.is_interpreted(self.fn)
            platform = identity.detect_platform(interpreted)
            space.bind_platform(platform_check_for(platform.backend, platform.capability))
            listed = space.configs()
            if not listed:
                raise ValueError(f"{self._name}: the ConfigSpace has no valid config on this platform")
            self._configs_list = listed
        return self._configs_list if self._configs_list is not None else []

    @configs.setter
    def configs(self, value: Sequence[Config] | None) -> None:
        self._configs_list = list(value) if value is not None else None

    @property
    def config_space(self) -> ConfigSpace | None:
        return self._config_space

    def _tuned_names(self) -> frozenset[str]:
        if self._config_space is not None:
            return frozenset(self._config_space.kwargs_with_lists)
        names: set[str] = set()
        for config in self._configs_list or ():
            names.update(config.kwargs)
        return frozenset(names)

    @property
    def _name(self) -> str:
        return self.base_fn.__name__

    # --- hooks (upstream semantics, the same on every Triton release) ------------------------------

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

    # --- the hot path ------------------------------------------------------------------------------

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        """``kernel[grid](*args)``: a launcher whose in-memory hit costs as little as possible.

        The common launch passes every kernel argument positionally: then the lookup key is the
        key arguments' values and the dtype objects of the arguments (no string formatting, no
        dict building), and a hit launches the kernel directly (after the config's ``pre_hook``,
        if it has one). Everything else goes through :meth:`run`.
        """
        fn_run = self.fn.run
        table = self._launch
        positions = self._key_positions
        low, high = self._last_key_position, self._n_args
        dtypes = self._dtypes_in_key

        def launch(*args: Any, **kwargs: Any) -> Any:
            if not kwargs and low < len(args) <= high:
                key = []
                for p in positions:  # a loop, not a comprehension: cheaper before Python 3.12
                    key.append(args[p])
                if dtypes:
                    for arg in args:
                        kind = type(arg)
                        if kind is _Tensor or (kind not in _NO_DTYPE and hasattr(arg, "dtype")):
                            key.append(arg.dtype)
                hit = table.get(tuple(key))
                if hit is not None:
                    config, launch_kwargs, config_pre_hook = hit
                    self.best_config = config
                    if config_pre_hook is not None:
                        config_pre_hook(self._hook_args(args, {"grid": grid, "warmup": False}, config))
                    return fn_run(*args, grid=grid, warmup=False, **launch_kwargs)
            return self.run(*args, grid=grid, warmup=False, **kwargs)

        return launch

    def run(self, *args: Any, **kwargs: Any) -> Any:
        if self._meta_names and not self._meta_names.isdisjoint(kwargs):
            return self._passthrough(args, kwargs)
        key = self._key(args, kwargs, dtype_strings=False)
        launch = self._launch.get(key)
        if launch is None:
            launch = self._on_miss(key, args, kwargs)
        config, launch_kwargs, config_pre_hook = launch
        self.best_config = config
        if config_pre_hook is not None:
            config_pre_hook(self._hook_args(args, kwargs, config))
        return self.fn.run(*args, **kwargs, **launch_kwargs)

    def _hook_args(self, args: tuple[Any, ...], kwargs: dict[str, Any], config: Config) -> dict[str, Any]:
        """What a config's ``pre_hook`` receives at launch: every argument by name, the call's
        keywords and all of the config's values (as upstream passes them)."""
        return {**dict(zip(self.arg_names, args)), **kwargs, **config.all_kwargs()}

    def _launch_kwargs(self, config: Config) -> dict[str, Any]:
        interpreted = _compat.is_interpreted(self.fn)
        backend = identity.detect_platform(interpreted).backend
        return launch_kwargs(config, {} if interpreted else _compat.launch_option_defaults(backend))

    def _key(self, args: tuple[Any, ...], kwargs: dict[str, Any], *, dtype_strings: bool) -> tuple[Any, ...]:
        """Values of the key arguments passed (in key order), then the dtype of every argument that
        has one (positional, then keyword), as upstream builds it; with ``dtype_strings`` the dtypes
        are ``str(dtype)`` exactly as in upstream's key, otherwise the dtype objects (cheaper)."""
        n = len(args)
        key = []
        for name, pos in self._key_plan:
            if pos < n:
                key.append(args[pos])
            elif name in kwargs:
                key.append(kwargs[name])
        if self._dtypes_in_key:
            named = [*args[: self._n_args], *(v for k, v in kwargs.items() if k in self._arg_set)]
            for arg in named:
                if type(arg) not in _NO_DTYPE and hasattr(arg, "dtype"):
                    key.append(str(arg.dtype) if dtype_strings else arg.dtype)
        return tuple(key)

    def _passthrough(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        missing = sorted(self._meta_names.difference(kwargs))
        if missing:
            given = sorted(self._meta_names.intersection(kwargs))
            raise ValueError(
                f"{self._name}: the call passes tuned meta-parameters {given} but not {missing}; pass all "
                "of them to launch with your own config, or none to let the autotuner choose"
            )
        self.last_decision = "passthrough"
        return self.fn.run(*args, **kwargs)

    # --- a miss ---------------------------------------------------------------------------------------

    def _on_miss(self, lookup: tuple[Any, ...], args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Launch:
        with self._lock:
            hit = self._launch.get(lookup)
            if hit is not None:
                return hit
            key = self._key(args, kwargs, dtype_strings=True)
            config = self.cache.get(key)  # decided for an equal key, or filled in by the caller
            if config is None:
                state = self._process_state()
                nargs = dict(zip(self.arg_names, args))
                decision = self._decide(state, key, args, kwargs, nargs)
                config = decision.config
                self.cache[key] = config
                self.last_decision = decision.source
                if decision.source == "tuned":
                    self.configs_timings = decision.configs_timings
                    self.bench_time = decision.duration_s
                self._report(key, decision, state)
            launch = (config, self._launch_kwargs(config), config.pre_hook)
            self._launch[lookup] = launch
            return launch

    def _process_state(self) -> _ProcessState:
        if self._state is None:
            interpreted = _compat.is_interpreted(self.fn)
            platform = identity.detect_platform(interpreted)
            benchmarker = self.make_benchmarker(interpreted)
            cache_file = self._open_storage(platform)
            restored = cache_file.load() if cache_file is not None else {}
            if restored:
                log.debug("%s: restored %d tuned keys from %s", self._name, len(restored), cache_file.path)
            self._state = _ProcessState(interpreted, platform, benchmarker, cache_file, restored)
        return self._state

    def make_benchmarker(self, interpreted: bool) -> Benchmarker:
        """The benchmarker for this tuner's settings (in this process, or in an isolation worker)."""
        return make_benchmarker(
            do_bench=self.user_do_bench,
            warmup=self.num_warmups,
            rep=self.num_reps,
            use_cuda_graph=self.use_cuda_graph,
            interpreted=interpreted,
            policy=self.timing,
        )

    def settings(self) -> dict[str, Any]:
        """The tuner settings that change its decisions (hashed into the storage path)."""
        settings: dict[str, Any] = {
            "warmup": self.num_warmups,
            "rep": self.num_reps,
            "use_cuda_graph": bool(self.use_cuda_graph),
            "quantiles": list(QUANTILES),
            "do_bench": identity.callable_name(self.user_do_bench),
            "strategy": self.strategy_name,
        }
        if self.user_do_bench is None:
            settings["timing"] = self.timing.settings()
        if self.strategy_name != "exhaustive":
            settings["budget"] = self.budget.as_dict()
        if self.numerical_check.active():  # it can rule out the config that would otherwise win
            settings["numerical_check"] = self.numerical_check.settings()
        return settings

    def _config_id(self, config: Config) -> str:
        """``config_id(config)``, remembered per Config object (configs are hashed several times
        on a miss: for the storage identity, the candidate set and matching a stored winner)."""
        known = self._config_ids.get(id(config))
        if known is None or known[0] is not config:
            known = self._config_ids[id(config)] = (config, config_id(config))
        return known[1]

    def _configs_hash(self, configs: Sequence[Config]) -> str:
        """Hash of a set of configs, independent of their order."""
        return identity.stable_hash(sorted(self._config_id(c) for c in configs))

    def kernel_identity(self, platform: identity.Platform) -> KernelIdentity:
        return KernelIdentity(
            platform=platform,
            kernel=self._name,
            autotune_config=identity.stable_hash(self.settings()),
            code_version=identity.code_version(self.fn),
            tune_features=identity.stable_hash({"key": list(self.keys), "ignore_dtypes": self.ignore_dtypes}),
            kernel_configs=self._configs_hash(self.configs),
            tag=self.tag or default_tag(),
        )

    def cache_path(self) -> Path:
        """The ``cache.json`` this kernel reads and writes on this machine."""
        platform = identity.detect_platform(_compat.is_interpreted(self.fn))
        root = self.custom_data_storage or default_root()
        return root / self.kernel_identity(platform).relative_dir() / CACHE_FILE_NAME

    def _open_storage(self, platform: identity.Platform) -> CacheFile | None:
        try:
            ident = self.kernel_identity(platform)
        except (OSError, ValueError, TypeError, EncodingError) as exc:
            warn_once(
                "identity",
                self._name,
                "%s: cannot compute its storage identity (%s); results stay in memory",
                self._name,
                exc,
            )
            return None
        root = self.custom_data_storage or default_root()
        return CacheFile.for_identity(root, ident.as_dict(), parameters=self.arg_names)

    def _decide(
        self,
        state: _ProcessState,
        key: tuple[Any, ...],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        nargs: dict[str, Any],
    ) -> _Decision:
        candidates = self.prune_configs(kwargs, nargs)
        if len(candidates) == 1:
            return _Decision(candidates[0], "single")
        try:
            kid: str | None = key_id(key)
        except (EncodingError, ValueError) as exc:  # ValueError: e.g. an int too long to print
            warn_once(
                "key",
                self._name,
                "%s: tuning key %r cannot be stored (%s); results for it stay in memory",
                self._name,
                key,
                exc,
            )
            kid = None
        candidates_hash = self._configs_hash(candidates)
        entry = state.restored.get(kid) if kid is not None else None
        if entry is not None:
            config = self._restore(entry, candidates, candidates_hash)
            if config is not None:
                timings = [float(t) for t in entry["timings_ms"]]
                return _Decision(config, "restored", timings, entry=entry)
        if _env.force_fallback():
            if self.fallback_heuristic is not None:
                return _Decision(self._heuristic(key), "heuristic")
            warn_once(
                "fallback",
                self._name,
                "%s: %s=1 but no fallback_heuristic was given; tuning instead",
                self._name,
                _env.FORCE_FALLBACK,
            )
        if _env.use_only_restored():
            winners = {config_id_of_entry(e) for e in state.restored.values()}
            restricted = [c for c in candidates if self._config_id(c) in winners]
            if len(restricted) == 1:
                return _Decision(restricted[0], "single")
            if restricted:
                candidates = restricted
        decision = self._tune(state, key, args, kwargs, nargs, candidates, candidates_hash)
        if kid is not None and decision.entry is not None:
            state.restored[kid] = decision.entry
            if state.cache_file is not None:
                state.cache_file.record({kid: decision.entry})
        return decision

    def _restore(
        self, entry: dict[str, Any], candidates: list[Config], candidates_hash: str
    ) -> Config | None:
        pruning = bool(self.early_config_prune or self.perf_model)
        if pruning and entry.get("candidates") != candidates_hash:
            log.debug("%s: pruning gives another candidate set than the stored one; re-tuning", self._name)
            return None
        wanted = config_id_of_entry(entry)
        for config in candidates:
            if self._config_id(config) == wanted:
                return config
        warn_once(
            "unmatched",
            self._name + wanted,
            "%s: stored config %s is not among the current candidates; ignoring it",
            self._name,
            wanted[:200],
        )
        return None

    def _heuristic(self, key: tuple[Any, ...]) -> Config:
        assert self.fallback_heuristic is not None
        config = self.fallback_heuristic(key)
        if not isinstance(config, Config):
            raise AutotuningError(
                f"{self._name}: fallback_heuristic returned {type(config).__name__}, not a triton.Config"
            )
        return config

    def prune_configs(self, kwargs: dict[str, Any], nargs: dict[str, Any] | None = None) -> list[Config]:
        """Upstream's pruning (early_config_prune, then perf_model top-k), on explicit arguments."""
        if nargs is None:
            nargs = self.nargs or {}
        configs = list(self.configs)
        if self.early_config_prune:
            configs = list(self.early_config_prune(configs, nargs, **kwargs))
            if not configs:
                raise AutotuningError(f"{self._name}: early_config_prune returned no config")
        if self.perf_model:
            top_k = self.configs_top_k
            if isinstance(top_k, float) and top_k <= 1.0:
                top_k = max(1, int(len(configs) * top_k))
            elif not isinstance(top_k, int):
                raise TypeError("prune_configs_by['top_k'] must be a float <= 1.0 or an int")
            if len(configs) > top_k:
                estimates = [self.perf_model(**nargs, **kwargs, **c.all_kwargs()) for c in configs]
                order = sorted(range(len(configs)), key=estimates.__getitem__)
                configs = [configs[i] for i in order[:top_k]]
        return configs

    # --- tuning ----------------------------------------------------------------------------------------

    def _bench_dispatch(self, kernel_call: Callable[[], Any], quantiles: Sequence[float] = QUANTILES) -> Any:
        """The ``do_bench`` upstream code paths see: our benchmarker for this process."""
        return self._process_state().benchmarker(kernel_call, quantiles)

    def _evaluator(
        self, state: _ProcessState, args: tuple[Any, ...], kwargs: dict[str, Any], nargs: dict[str, Any]
    ) -> Evaluator:
        ctx = LaunchContext(
            fn=self.fn,
            args=args,
            kwargs=kwargs,
            nargs=nargs,
            pre_hook=self.pre_hook,
            post_hook=self.post_hook,
            benchmarker=state.benchmarker,
            kernel_name=self._name,
            interpreted=state.interpreted,
        )
        check = self.numerical_check if self.numerical_check.active() else None
        if self.isolation.active():
            return IsolatedEvaluator(ctx, tuner=self, settings=self.isolation, check=check)
        evaluator = InProcessEvaluator(ctx)
        return CheckedEvaluator(evaluator, check) if check is not None else evaluator

    def _tune(
        self,
        state: _ProcessState,
        key: tuple[Any, ...],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        nargs: dict[str, Any],
        candidates: list[Config],
        candidates_hash: str,
    ) -> _Decision:
        space = SearchSpace.from_configs(candidates)
        strategy = make_strategy(self.strategy_name)
        trial = _Trial(self._name, candidates)
        warm = self._warm_start(state, candidates)
        start = time.perf_counter()
        self.nargs = nargs
        try:
            with self._evaluator(state, args, kwargs, nargs) as evaluator:
                run = SearchRun(space, lambda index: trial.measure(evaluator, index), self.budget)
                planned = strategy.planned(run, warm, self.budget.seed)
                with trial.phase("compile"):
                    if planned:
                        for config, reason in evaluator.prepare([candidates[i] for i in planned]).items():
                            trial.rule_out(config, reason)
                bar = progress_bar(len(planned) if planned else run.limit, f"tuning {self._name}")
                trial.on_measured = bar.update
                try:
                    with trial.phase("measure"):
                        drive(strategy, run, warm)
                finally:
                    bar.close()
                with trial.phase("refine"):
                    trial.refine(evaluator, state.benchmarker.finalists)
        finally:
            self.nargs = None
        duration = time.perf_counter() - start
        best = trial.best()
        if best is None:
            details = "; ".join(f"[{describe_config(c)}] {r}" for c, r in list(trial.failures.items())[:5])
            raise AutotuningError(
                f"{self._name}: all {len(run.results)} candidate configs failed for key {key!r}"
                + (f": {details}" if details else "")
            )
        self.pre_hook({**nargs, **kwargs, **best.all_kwargs()}, reset_only=True)
        entry = self._entry(key, best, trial, run, duration, candidates_hash)
        return _Decision(best, "tuned", trial.timings[best], trial.timings, duration, entry)

    def _warm_start(self, state: _ProcessState, candidates: list[Config]) -> list[int]:
        """Indices of candidates that won other stored keys, then of the winners of this kernel
        stored for other GPUs and platforms (a few): good first guesses for a new key."""
        if self.strategy_name == "exhaustive":
            return []
        from .warm_start import MAX_FOREIGN_SEEDS, foreign_winners

        index = {self._config_id(c): i for i, c in enumerate(candidates)}
        winners = [config_id_of_entry(entry) for entry in state.restored.values()]
        store = state.cache_file
        if store is not None:
            try:
                foreign = foreign_winners(store.root, store.identity, store.path, store.parameters)
            except (OSError, ValueError, KeyError) as exc:
                log.debug("%s: no warm start from other platforms (%s)", self._name, exc)
                foreign = []
            winners += [cid for cid in foreign if cid in index][:MAX_FOREIGN_SEEDS]
        seeds: list[int] = []
        for cid in winners:
            i = index.get(cid)
            if i is not None and i not in seeds:
                seeds.append(i)
        return seeds

    def _entry(
        self,
        key: tuple[Any, ...],
        best: Config,
        trial: _Trial,
        run: SearchRun,
        duration: float,
        candidates_hash: str,
    ) -> dict[str, Any] | None:
        try:
            return {
                "key": encode_key(key),
                "config": encode_config(best),
                "timings_ms": [float(t) for t in trial.timings[best]],
                "evaluated": len(run.results),
                "space_size": len(run.space),
                "strategy": self.strategy_name,
                "budget": self.budget.as_dict() if self.strategy_name != "exhaustive" else None,
                "refined": len(trial.refined),
                "tuning_time_s": round(duration, 6),
                "phases_s": trial.phases,
                "tuned_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                "candidates": candidates_hash,
                "top": [
                    {"config": encode_config(config), "timings_ms": [float(t) for t in timings]}
                    for config, timings in trial.ranking()[:TOP_K]
                ],
                "ruled_out": [
                    {"config": encode_config(c), "reason": r}
                    for c, r in list(trial.failures.items())[:MAX_RULED_OUT]
                ],
            }
        except EncodingError as exc:
            warn_once(
                "config",
                self._name,
                "%s: a config cannot be stored (%s); results stay in memory",
                self._name,
                exc,
            )
            return None

    # --- reporting ------------------------------------------------------------------------------------

    def _report(self, key: tuple[Any, ...], decision: _Decision, state: _ProcessState) -> None:
        if decision.source == "single":
            return
        if _compat.print_autotuning():
            how = {
                "tuned": lambda: (
                    f"tuned ({self.strategy_name}, {len(decision.configs_timings)} configs benchmarked)"
                ),
                "restored": lambda: (
                    f"restored from {state.cache_file.path if state.cache_file else 'storage'}"
                ),
                "heuristic": lambda: "fallback heuristic, no tuning",
            }[decision.source]()
            best = describe_config(decision.config)
            sys.stdout.write(
                f"Triton autotuning for function {self._name}, with key as {key}, finished after "
                f"{decision.duration_s:.2f}s, {how}, best config selected: {best};\n"
            )
            sys.stdout.flush()
        log.debug("%s: key %r -> %s (%s)", self._name, key, describe_config(decision.config), decision.source)
        listener = _compat.autotuning_listener()
        if listener is not None and decision.source in ("tuned", "restored"):
            listener(
                fn=_compat.jit_function(self.fn) or self.fn,
                key=key,
                best_config=decision.config,
                configs_timings=decision.configs_timings,
                duration=decision.duration_s if decision.source == "tuned" else None,
                cache_hit=decision.source == "restored",
            )


class _Trial:
    """The measurements of one tuning run: screened timings, failures, and refined finalists."""

    def __init__(self, kernel_name: str, candidates: list[Config]) -> None:
        self.kernel_name = kernel_name
        self.candidates = candidates
        self.timings: dict[Config, list[float]] = {}
        self.failures: dict[Config, str] = {}
        self.refined: dict[Config, list[float]] = {}
        self.on_measured: Callable[[int], Any] = lambda n: None
        self.phases: dict[str, float] = {}

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time a phase of the run (compile, measure, refine): stored with the entry."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.phases[name] = round(self.phases.get(name, 0.0) + time.perf_counter() - start, 6)

    def rule_out(self, config: Config, reason: str) -> float:
        self.failures[config] = reason[:500]
        self.timings[config] = [math.inf] * len(QUANTILES)
        log.debug("%s: ruled out %s: %s", self.kernel_name, describe_config(config), reason[:300])
        return math.inf

    def measure(self, evaluator: Evaluator, index: int) -> float:
        config = self.candidates[index]
        if config in self.failures:
            return math.inf
        try:
            result = evaluator.measure(config)
        except Exception as exc:  # the candidate is ruled out, tuning goes on
            return self.rule_out(config, one_line_reason(exc))
        finally:
            self.on_measured(1)
        self.timings[config] = result
        return result[0]

    def ranking(self) -> list[tuple[Config, list[float]]]:
        """Valid candidates, best first: refined finalists (if any) by their careful median."""
        source = self.refined or self.timings
        valid = [(c, t) for c, t in source.items() if math.isfinite(t[0])]
        return sorted(valid, key=lambda item: item[1][0])

    def refine(self, evaluator: Evaluator, finalists: int) -> None:
        """Re-measure the ``finalists`` best screened candidates carefully, if timing has two stages."""
        if finalists <= 0:
            return
        best = [config for config, _ in self.ranking()[:finalists]]
        refined = evaluator.refine(best) if len(best) > 1 else None
        if refined:
            self.refined = refined
            self.timings.update(refined)

    def best(self) -> Config | None:
        ranked = self.ranking()
        return ranked[0][0] if ranked else None


def launch_kwargs(config: Config, defaults: dict[str, Any]) -> dict[str, Any]:
    """What a launch with ``config`` passes: its meta-parameters, and its options except those
    equal to the backend's defaults (the same kernel, and a cheaper launch)."""
    options = {k: v for k, v in config.all_kwargs().items() if k not in config.kwargs}
    return {**config.kwargs, **{k: v for k, v in options.items() if k not in defaults or defaults[k] != v}}


def config_id_of_entry(entry: dict[str, Any]) -> str:
    config, _ = decode_config(entry["config"])
    return config_id(config)


def _check_names(arg_names: list[str], **lists: Sequence[str] | None) -> None:
    for what, names in lists.items():
        if names is None:
            continue
        if isinstance(names, str):
            raise TypeError(f"{what} must be a list of argument names, not the string {names!r}")
        unknown = [n for n in names if n not in arg_names]
        if unknown:
            raise ValueError(
                f"{what} names {', '.join(map(repr, unknown))}, which are not kernel arguments "
                f"(the kernel's arguments are: {', '.join(arg_names)})"
            )


def autotune(
    key: Sequence[str],
    configs: Sequence[Config] | None = None,
    config_space: ConfigSpace | None = None,
    reset_to_zero: Sequence[str] | None = None,
    restore_value: Sequence[str] | None = None,
    pre_hook: Callable[..., Any] | None = None,
    post_hook: Callable[..., Any] | None = None,
    prune_configs_by: dict[str, Any] | None = None,
    warmup: float | None = None,
    rep: float | None = None,
    use_cuda_graph: bool = False,
    do_bench: Callable[..., Any] | None = None,
    fallback_heuristic: Callable[[tuple[Any, ...]], Config] | None = None,
    use_bo: bool = False,
    use_random_search: bool = False,
    search_max_search_t: float = 180,
    search_max_share: float = 1.0,
    search_max_repeat: int = 1,
    custom_data_storage: str | Path | None = None,
    ignore_dtypes: bool = False,
    *,
    search_seed: int = 0,
    timing: TimingPolicy | None = None,
    tag: str | None = None,
    use_isolated_process: bool | None = None,
    isolation_timeout_s: float | None = None,
    isolation_start_method: str | None = None,
    numerical_check: bool | None = None,
    reference_fn: Callable[..., Any] | None = None,
    check_outputs: Sequence[str] | None = None,
    check_rtol: float | None = None,
    check_atol: float | None = None,
) -> Callable[[Any], Autotuner]:
    """Tune a ``@triton.jit`` kernel once per identity and restore the result in every later process.

    A drop-in for ``triton.autotune`` (same arguments and hooks) and for triton-dejavu's ``autotune``.
    Give the candidates as ``configs`` (a list of ``triton.Config``) or as ``config_space`` (a
    :class:`ConfigSpace`); with neither, upstream's single default config is used.

    ``use_random_search=True`` or ``use_bo=True`` (extra ``bo``) search within ``search_max_search_t``
    seconds and ``search_max_share`` of the space, restarting up to ``search_max_repeat`` times when
    nothing valid was found, seeded by ``search_seed``. ``fallback_heuristic(key) -> triton.Config``
    answers a miss when ``TRITON_DEJAVU_FORCE_FALLBACK=1``. ``custom_data_storage`` stores this
    kernel's results under another root; ``tag`` (default ``$TRITON_DEJAVU_TAG`` or "default") names
    the deployment. ``ignore_dtypes=True`` leaves argument dtypes out of the tuning key.

    On a GPU, candidates are compiled in parallel first, then each is screened with a few
    L2-flushed launches and the best ``timing.finalists`` are re-measured carefully, interleaved
    (``timing=TimingPolicy(...)`` sets the budgets; ``TimingPolicy(finalists=0)`` times every
    candidate with ``triton.testing.do_bench(warmup, rep)`` as upstream does). ``warmup``, ``rep``
    and ``use_cuda_graph`` keep upstream's meaning for the careful stage.

    ``use_isolated_process=True`` (None: ``TRITON_DEJAVU_USE_ISOLATED_PROCESS``) compiles and times
    the candidates in a reusable worker process: a candidate that crashes it or takes longer than
    ``isolation_timeout_s`` (None: ``TRITON_DEJAVU_ISOLATION_TIMEOUT``, else 120 s) is ruled out and
    tuning goes on in a new worker. ``isolation_start_method`` ("fork", "forkserver", "spawn"; None:
    fork under the interpreter, forkserver on a GPU); with forkserver/spawn the decorated kernel must
    be a module-level global. ``numerical_check=True`` (None: on with ``TRITON_DEJAVU_NUMERICAL_CHECK=1``
    or any of the next arguments) rules out candidates whose outputs differ from the reference's:
    ``reference_fn(**kernel_args)`` (writes the expected outputs, or returns ``{name: tensor}``) or
    else the first candidate that runs. ``check_outputs`` names the output arguments (default: the
    tensor arguments the reference changes); ``check_rtol``/``check_atol`` replace the dtype-aware
    tolerances. See docs/isolation.md.
    """
    if _looks_like_configs(key) and (configs is None or _looks_like_names(configs)):
        # upstream order: triton.autotune(configs, key)
        key, configs = (configs or []), key  # type: ignore[assignment]

    def decorator(fn: Any) -> Autotuner:
        return Autotuner(
            fn,
            fn.arg_names,
            configs,
            key,
            reset_to_zero,
            restore_value,
            pre_hook=pre_hook,
            post_hook=post_hook,
            prune_configs_by=prune_configs_by,
            warmup=warmup,
            rep=rep,
            use_cuda_graph=use_cuda_graph,
            do_bench=do_bench,
            config_space=config_space,
            fallback_heuristic=fallback_heuristic,
            use_bo=use_bo,
            use_random_search=use_random_search,
            search_max_search_t=search_max_search_t,
            search_max_share=search_max_share,
            search_max_repeat=search_max_repeat,
            search_seed=search_seed,
            custom_data_storage=custom_data_storage,
            ignore_dtypes=ignore_dtypes,
            timing=timing,
            tag=tag,
            use_isolated_process=use_isolated_process,
            isolation_timeout_s=isolation_timeout_s,
            isolation_start_method=isolation_start_method,
            numerical_check=numerical_check,
            reference_fn=reference_fn,
            check_outputs=check_outputs,
            check_rtol=check_rtol,
            check_atol=check_atol,
        )

    return decorator


def _looks_like_configs(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and all(isinstance(v, Config) for v in value)


def _looks_like_names(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
