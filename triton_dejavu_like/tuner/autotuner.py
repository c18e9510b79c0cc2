"""The Autotuner: its construction, and what happens on a miss.

``Autotuner`` subclasses ``triton.runtime.autotuner.Autotuner``, so tools that inspect upstream
autotuners keep working (``.cache``, ``.best_config``, ``.configs_timings``, ``.bench_time``,
``.configs``). A call computes the tuning key as upstream does and looks it up in memory
(:mod:`.launching`); only a miss reaches the store (read once per process), the miss policy and a
tuning run.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from .. import _compat
from .._compat import Config
from .._log import DejavuStorageWarning, warn_once
from ..codec import short_repr
from ..measure import KernelRecipe
from ..store import Platform, detect_platform
from ..store.identity import callable_name
from ..store.layered import registrations
from .arguments import (
    argument_names,
    check_callables,
    check_configs,
    config_list,
    warn_ignored,
    warn_tuned_key,
)
from .attributes import UpstreamAttributes, changes
from .calls import CallCheck
from .config_ids import ConfigIds
from .config_space import ConfigSpace
from .deciding import KeyDecision, ProcessState
from .dejavu_extras import MetadataRecorder, post_hook_as_called
from .key import KeyPlan, TuningKey, same_nan
from .launching import Launch, LaunchPath
from .mode import tuning_enabled
from .nearest import RestoredEntries
from .policy import MissPolicy
from .report import report
from .settings import TunerSettings
from .storage import StorageIdentity
from .trial import Outcome
from .upstream import UpstreamSemantics

#: Every Autotuner of this process (and copies), for the locks a forked child must not inherit held.
_tuners: weakref.WeakSet[Autotuner] = weakref.WeakSet()


def _unlock_in_child() -> None:
    """A child forked while another thread decided a key (which holds its tuner's lock for the
    whole tuning run) would wait at its first miss of that kernel for a thread it does not have:
    each tuner gets a fresh lock (a key the parent is tuning is waited for through its lease)."""
    for tuner in list(_tuners):
        tuner._lock = threading.RLock()


os.register_at_fork(after_in_child=_unlock_in_child)


class Autotuner(
    LaunchPath, UpstreamSemantics, StorageIdentity, UpstreamAttributes, _compat.UpstreamAutotuner
):
    """An upstream-compatible autotuner that stores its results and restores them in later processes.

    The first arguments are upstream's (``triton.runtime.autotuner.Autotuner``); ``settings`` holds
    everything else the :func:`~triton_dejavu_like.autotune` decorator accepts.
    """

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
        cache_results: bool = False,  # upstream 3.4+'s own disk cache: accepted, results are always stored
        *,
        config_space: ConfigSpace | None = None,
        settings: TunerSettings | None = None,
    ) -> None:
        arg_names = list(arg_names)
        key = argument_names(arg_names, "key", key) or []
        reset_to_zero = argument_names(arg_names, "reset_to_zero", reset_to_zero)
        restore_value = argument_names(arg_names, "restore_value", restore_value)
        function = _compat.python_function(fn)
        configs = config_list(configs)  # a generator is read once, here
        check_callables(function, pre_hook, post_hook, prune_configs_by)
        check_configs(fn, arg_names, configs, config_space)
        if settings is None:
            settings = TunerSettings.from_arguments(
                {"warmup": warmup, "rep": rep, "use_cuda_graph": use_cuda_graph, "do_bench": do_bench}
            )
        argument_names(arg_names, "check_outputs", settings.numerical_check.outputs)
        warn_ignored(function, settings, _compat.is_interpreted(fn))
        self.settings = settings
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
            post_hook=post_hook_as_called(post_hook),
            prune_configs_by=prune_configs_by,
            # upstream's ``.do_bench``: the user's function as given, else our benchmarker
            **_compat.upstream_init_kwargs(do_bench=settings.timing.do_bench or self._bench_dispatch),
        )
        _compat.disable_upstream_disk_cache(self)
        # upstream records its timing arguments (torch.compile reads them, and refuses a kernel given
        # any); they are not forwarded to its __init__ (see upstream_init_kwargs)
        timing = settings.timing
        self.num_warmups, self.num_reps, self.use_cuda_graph = (
            timing.warmup,
            timing.rep,
            timing.use_cuda_graph,
        )
        if config_space is not None:
            self._configs_list = None  # upstream's __init__ set its default config list: listed at first use
        if not pre_hook and (self.reset_to_zero or self.restore_value):
            self.pre_hook = self._default_pre_hook
        if not post_hook and self.restore_value:
            self.post_hook = self._default_post_hook
        made_by = "/".join(name for name in ("reset_to_zero", "restore_value") if getattr(self, name))
        #: What errors call the hooks: the user's, or the ones reset_to_zero and restore_value make
        self._hook_names = (
            "pre_hook" if pre_hook or not made_by else f"the hook of {made_by}",
            "post_hook" if post_hook or not self.restore_value else "the hook of restore_value",
        )
        self._init_state(arg_names, key, settings)
        warn_tuned_key(function, key, self._meta_names)

    def _init_state(self, arg_names: list[str], key: list[str], settings: TunerSettings) -> None:
        """Upstream's result attributes, the hot path's table and the helpers a miss uses."""
        self.restore_copies: dict[str, Any] = {}
        self.bench_time = 0.0
        self.configs_timings: dict[Config, Any] = {}  # lists, or numbers as the user's do_bench answers
        self.best_config: Config | None = None
        self.last_decision: str | None = None
        self.nargs: dict[str, Any] | None = None
        self._config_ids = ConfigIds()
        self._state: ProcessState | None = None
        self._lock = threading.RLock()
        _tuners.add(self)
        self._launch: dict[tuple[Any, ...], Launch] = {}  # the hot path's table
        self._generation = 0  # of .configs and .cache: changed from outside, the table is emptied
        self._keys = KeyPlan(arg_names, key, ignore_dtypes=settings.ignore_dtypes)
        self._meta_names = self._tuned_names()
        self._calls = CallCheck(self.fn, arg_names)
        self._policy = MissPolicy(
            self._name,
            self._label,
            settings.fallback_heuristic,
            self._config_id,
            settings.informed_fallback,
            settings.prepare_informed_fallback,
            settings.custom_data_storage,
            tuple(arg_names),
        )
        self._metadata = (
            MetadataRecorder(settings.metadata_key) if settings.metadata_key is not None else None
        )

    # --- copies ---------------------------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        """What ``copy.copy``/``copy.deepcopy`` (of a model holding a kernel, say) take: everything
        but the lock and what this process learnt at the first miss (the store, the benchmarker),
        which the copy learns again at its own first miss. The decided keys are kept, as upstream's
        ``.cache`` is (``copy.copy`` shares that dict, as upstream's copies do); a copy launches from a
        launch table of its own, so that assigning its ``.configs`` or ``.cache`` leaves the original
        as it was."""
        state = self.__dict__.copy()
        state["_lock"] = None
        state["_state"] = None
        state["_config_ids"] = ConfigIds()  # (weak references, id()) the copy learns its configs' ids again
        # a snapshot (one C-level copy): another thread deciding a key meanwhile adds to the table,
        # and deepcopy walking the live dict raised "dictionary changed size during iteration"
        state["_launch"] = self._launch.copy()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()  # the launch table is __getstate__'s snapshot: the copy's own
        _tuners.add(self)
        # the hooks of reset_to_zero / restore_value are this tuner's methods: bound to the original,
        # a shallow copy's launches kept their restore_value copies in the original (two threads
        # tuning both restored each other's tensors)
        for name, default in (("pre_hook", "_default_pre_hook"), ("post_hook", "_default_post_hook")):
            hook = getattr(self, name, None)
            if getattr(hook, "__func__", None) is getattr(type(self), default) and hook.__self__ is not self:
                setattr(self, name, getattr(self, default))
        self.restore_copies = {}
        self._listen_again()

    def _platform(self) -> Platform:
        return detect_platform(_compat.is_interpreted(self.fn))

    @property
    def _name(self) -> str:
        """The kernel's short name: what the store, the misses and the autotuning report call it."""
        return self.base_fn.__name__

    @property
    def _label(self) -> str:
        """``module.qualname``: what warnings and errors call the kernel, so that two kernels of one
        name in different modules are told apart (each warned about once)."""
        return callable_name(self.base_fn) or self._name

    # --- a miss ---------------------------------------------------------------------------------------

    def _on_miss(self, lookup: tuple[Any, ...], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Launch:
        lookup = same_nan(lookup)  # a call with a NaN key value finds its launch here
        with self._lock:
            hit = self._launch.get(lookup)
            if hit is not None:
                return hit
            generation = self._generation
            key = self._keys.key(args, kwargs)
            # decided for an equal key, or filled in by the caller; upstream launches a list of one
            # config without reading or writing .cache
            choice = len(self.configs) > 1
            config = self.cache.get(key.values) if choice else None
            outcome = None
            if config is None:
                state = self._process_state()
                outcome = self._decide(state, key, args, kwargs)
                config = outcome.config
                with changes:  # a change from another thread lands wholly before or after this
                    if choice and generation == self._generation:
                        dict.__setitem__(self.cache, key.values, config)  # not a change from outside
                self.last_decision = outcome.source
                answered = state.benchmarker.as_answered(outcome.configs_timings)
                if outcome.source == "tuned":
                    self.configs_timings = answered
                    self.bench_time = outcome.duration_s
                report(
                    self._name,
                    self.fn,
                    key.values,
                    outcome,
                    strategy=self.settings.strategy,
                    where=state.store.where(key.id),
                    answered=answered,
                )
            launch = (config, self._launch_kwargs(config), config.pre_hook)
            with changes:
                if generation == self._generation:  # else .configs or .cache changed meanwhile: decide again
                    self._launch[lookup] = launch
            if outcome is not None and outcome.after_error is not None:
                raise outcome.after_error  # the winner is kept: the next call launches it
            return launch

    def _configs_changed(self) -> None:
        super()._configs_changed()
        # the storage identity hashes the config list: another list's results are kept in (and
        # restored from) its own file, opened at the next miss
        self.__dict__["_state"] = None
        ids = self.__dict__.get("_config_ids")  # (none yet while the decorator sets .configs)
        if ids is not None:
            ids.forget_sets()  # the old list's sets are not asked for again

    def _process_state(self) -> ProcessState:
        if self._state is None:
            _compat.require_gpu_driver(self._name, self.fn)
            platform = self._platform()
            benchmarker = self.settings.timing.benchmarker(_compat.is_interpreted(self.fn))
            seen = registrations()  # before the store opens: one registered meanwhile is read next time
            store, identity = self._open_store(platform)
            # with tuning off, reading the store writes nothing (no lock file, nothing set aside)
            restored = RestoredEntries(store.load(repair=tuning_enabled()))
            if not restored and identity is not None:
                self._note_dejavu_results()
            self._state = ProcessState(platform, benchmarker, store, restored, identity, seen)
        elif self._state.registrations != registrations():
            self._read_late_stores(self._state)
        return self._state

    def _decide(
        self, state: ProcessState, key: TuningKey, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Outcome:
        nargs = dict(zip(self.arg_names, args))
        candidates = self._candidates(nargs, kwargs)
        if len(candidates) == 1:
            return Outcome(candidates[0], "single")
        if key.id is None:
            warn_once(
                DejavuStorageWarning,
                self._label,
                "%s: tuning key %s cannot be stored (%s); results for it stay in memory",
                self._label,
                short_repr(key.values),
                key.problem,
            )
        ids = self._config_ids
        chosen = ids.candidates(candidates, self.configs)
        with ids.deciding(chosen):
            return KeyDecision(
                name=self._label,
                state=state,
                key=key,
                args=args,
                kwargs=kwargs,
                nargs=nargs,
                candidates=candidates,
                candidates_hash=chosen.hash,
                pruning=bool(self.early_config_prune or self.perf_model),
                policy=self._policy,
                settings=self.settings,
                recipe=self.kernel_recipe,
                config_id=self._config_id,
                candidate_set=lambda configs: ids.candidates(configs, self.configs),
                expose_nargs=self._expose_nargs,
                find_elsewhere=self._stored_elsewhere,
            ).outcome()

    def _expose_nargs(self, nargs: dict[str, Any] | None) -> None:
        """Upstream's ``nargs``: the arguments of the call being tuned, which hooks and
        ``prune_configs`` read (None between tuning runs)."""
        self.nargs = nargs

    # --- measuring ------------------------------------------------------------------------------------

    @property
    def do_bench(self) -> Callable[..., Any]:
        """Upstream's ``.do_bench``: the user's timing function (given to the decorator, or assigned
        here), else our benchmarker (:meth:`_bench_dispatch`)."""
        return self.settings.timing.do_bench or self._bench_dispatch

    @do_bench.setter
    def do_bench(self, value: Callable[..., Any] | None) -> None:
        """Upstream times with whatever ``.do_bench`` holds, so code written for it assigns a timing
        function after decoration: it times every later tuning, as if given to the decorator (it is
        part of the storage identity: the next miss opens the results timed by it; keys decided stay
        decided, as in upstream's ``.cache``). None: our benchmarker again."""
        given = None if value is None or value == self._bench_dispatch else value
        if given is self.settings.timing.do_bench:
            return  # unchanged (upstream 3.2/3.3's __init__ assigns the one it is given)
        if given is not None and not callable(given):
            raise TypeError(f"do_bench must be callable, got {type(given).__name__}")
        settings = dataclasses.replace(
            self.settings, timing=dataclasses.replace(self.settings.timing, do_bench=given)
        )
        warn_ignored(_compat.python_function(self.fn), settings, _compat.is_interpreted(self.fn))
        with self._lock:
            self.settings = settings
            self._state = None  # the benchmarker and the store (the identity names do_bench), made again

    def _bench_dispatch(
        self, kernel_call: Callable[[], Any], quantiles: Sequence[float] | None = None
    ) -> Any:
        """``.do_bench`` when the user gave none: our benchmarker for this process, answering the
        times at ``quantiles``, or one time (the median) for None, the default, as upstream's
        ``.do_bench`` (``triton.testing.do_bench``) answers one number then."""
        if quantiles is None:
            return self._process_state().benchmarker(kernel_call, (0.5,))[0]
        return self._process_state().benchmarker(kernel_call, quantiles)

    def kernel_recipe(self) -> KernelRecipe:
        """What measuring this kernel's candidates needs (also what an isolated worker rebuilds)."""
        check = self.settings.numerical_check
        return KernelRecipe(
            fn=self.fn,
            kernel_name=self._label,
            arg_names=tuple(self.arg_names),
            configs=self.configs,
            pre_hook=self.pre_hook,
            post_hook=self.post_hook,
            timing=self.settings.timing,
            check=check if check.active() else None,
            isolation=self.settings.isolation,
            hook_names=self._hook_names,
        )
