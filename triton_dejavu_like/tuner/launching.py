"""The launch path of :class:`~triton_dejavu_like.tuner.autotuner.Autotuner` (a mixin): ``kernel[grid]``
and ``.run`` look the call's key up in the in-memory launch table and launch its config; a key not
there goes to the tuner's ``_on_miss``. Also the launches that decide nothing: a call that passes
every tuned meta-parameter itself, and ``warmup=True``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import _compat
from .._compat import Config
from ..measure.launch import launch_kwargs
from ..store import Platform
from .calls import CallCheck
from .dejavu_extras import MetadataRecorder
from .key import NO_DTYPE, KeyPlan, Tensor

#: What a hit launches with: the config, its launch kwargs, and its pre_hook (or None).
Launch = tuple[Config, dict[str, Any], Callable[..., Any] | None]
#: The options a Config sets besides its kwargs (num_warps, num_stages, ...).
_OPTION_NAMES = frozenset(_compat.CONFIG_FIELDS)


class LaunchPath:
    """Reads the tuner's function, key plan and launch table; ``_on_miss`` decides a key not in it."""

    fn: Any
    arg_names: list[str]
    configs: list[Config]
    best_config: Config | None
    last_decision: str | None
    _name: str
    _keys: KeyPlan
    _launch: dict[tuple[Any, ...], Launch]
    _meta_names: frozenset[str]
    _calls: CallCheck
    _metadata: MetadataRecorder | None
    _platform: Callable[[], Platform]
    prune_configs: Callable[..., list[Config]]
    _on_miss: Callable[[tuple[Any, ...], tuple[Any, ...], dict[str, Any]], Launch]

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        """``kernel[grid](*args)``: a launcher whose in-memory hit costs as little as possible.

        The common launch passes every kernel argument positionally: then the lookup key is the
        key arguments' values and the dtype objects of the arguments (no string formatting, no
        dict building), and a hit launches the kernel directly (after the config's ``pre_hook``,
        if it has one). Everything else goes through :meth:`run`.
        """
        fn_run = self.fn.run if self._metadata is None else self._fn_run()
        table = self._launch
        positions = self._keys.positions
        low, high = self._keys.last_position, self._keys.n_args
        dtypes = self._keys.with_dtypes

        def launch(*args: Any, **kwargs: Any) -> Any:
            if not kwargs and low < len(args) <= high:
                key = []
                for p in positions:  # a loop, not a comprehension: cheaper before Python 3.12
                    key.append(args[p])
                if dtypes:
                    for arg in args:
                        kind = type(arg)
                        if kind is Tensor or (kind not in NO_DTYPE and hasattr(arg, "dtype")):
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
        lookup = self._keys.lookup(args, kwargs)
        launch = self._launch.get(lookup)
        if launch is None:
            self._check_call(args, kwargs)
            if kwargs.get("warmup"):
                return self._warm_up(args, kwargs)
            launch = self._on_miss(lookup, args, kwargs)
        config, options, config_pre_hook = launch
        if not _OPTION_NAMES.isdisjoint(kwargs):
            # the call passes num_warps=... itself: launch with all of the config's options, so that
            # it is upstream's TypeError whatever the backend's defaults are (with an option equal to
            # its default left out, the call's value replaced the one that was tuned)
            options = self._launch_kwargs(config, every_option=True)
        self.best_config = config
        if config_pre_hook is not None:
            config_pre_hook(self._hook_args(args, kwargs, config))
        return self._fn_run()(*args, **kwargs, **options)

    def _check_call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """A call that cannot launch whichever config wins is a ``TypeError`` naming the argument,
        before its key is looked up, tuned or stored (a miss only: a decided key launches as a plain
        launch, which reports the same mistakes): one that binds wrongly to the kernel
        (:class:`~.calls.CallCheck`), or one that passes an option every config sets (``num_warps=``:
        upstream's TypeError at the launch after tuning)."""
        self._calls.check(args, kwargs, self._meta_names)
        if not _OPTION_NAMES.isdisjoint(kwargs):
            every = set(kwargs).intersection(
                *(self._launch_kwargs(c, every_option=True) for c in self.configs)
            )
            self._calls.check_options(every, self._meta_names)

    def _fn_run(self) -> Callable[..., Any]:
        """``fn.run``; with ``metadata_key``, preceded by recording the chosen config (so a tuner
        without it pays nothing on its hot path)."""
        fn_run = self.fn.run
        if self._metadata is None:
            return fn_run
        record, tuner = self._metadata.record, self

        def run_and_record(*args: Any, **kwargs: Any) -> Any:
            record(tuner.best_config)
            return fn_run(*args, **kwargs)

        return run_and_record

    def _hook_args(self, args: tuple[Any, ...], kwargs: dict[str, Any], config: Config) -> dict[str, Any]:
        """What a config's ``pre_hook`` receives at launch: every argument by name, the call's
        keywords and all of the config's values (as upstream passes them)."""
        return {**dict(zip(self.arg_names, args)), **kwargs, **config.all_kwargs()}

    def _launch_kwargs(self, config: Config, *, every_option: bool = False) -> dict[str, Any]:
        """What a launch with ``config`` passes; its options equal to the backend's defaults are left
        out unless ``every_option`` or a ``@triton.heuristics`` under this tuner may read them (its
        functions get the launch's keywords: upstream passes every option)."""
        if _compat.is_interpreted(self.fn):
            return launch_kwargs(config, interpreted=True, parameters=self.arg_names)
        if every_option or _compat.heuristics_under(self.fn):
            return launch_kwargs(config)
        return launch_kwargs(config, _compat.launch_option_defaults(self._platform().backend))

    def _passthrough(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        missing = sorted(self._meta_names.difference(kwargs))
        if missing:
            given = sorted(self._meta_names.intersection(kwargs))
            raise ValueError(
                f"{self._name}: the call passes tuned meta-parameters {given} but not {missing}; pass all "
                "of them to launch with your own config, or none to let the autotuner choose"
            )
        self.last_decision = "passthrough"
        # triton-dejavu's passthrough takes a pre_hook with the call: it gets the named arguments and
        # is not passed on (Triton's launch rejects an unknown keyword)
        call_pre_hook = kwargs.pop("pre_hook", None)
        # what is launched: wrappers that read best_config after a launch see the call's values
        meta = {name: kwargs[name] for name in self._meta_names}
        options = {name: kwargs[name] for name in _OPTION_NAMES.intersection(kwargs)}
        self.best_config = Config(meta, **options)
        if call_pre_hook is not None:
            call_pre_hook({**dict(zip(self.arg_names, args)), **kwargs})
        return self.fn.run(*args, **kwargs)

    def _warm_up(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        """``warmup=True`` for a key not decided yet (``kernel.run(..., warmup=True)``, or ``.warmup()``
        of ``@triton.heuristics`` above the autotuner): compile every candidate, as upstream's
        ``Autotuner.warmup`` does, and decide nothing. A warmup launch runs no kernel, so timing it
        would pick a config at random and store it for every later process."""
        run = self.fn.run
        candidates = self._candidates(dict(zip(self.arg_names, args)), kwargs)
        return [run(*args, **kwargs, **self._launch_kwargs(c)) for c in candidates]

    def _candidates(self, nargs: dict[str, Any], kwargs: dict[str, Any]) -> list[Config]:
        """The configs a call chooses among: upstream prunes only a choice (a single config is
        launched as it is)."""
        if len(self.configs) > 1:
            return self.prune_configs(kwargs, nargs)
        return list(self.configs)
