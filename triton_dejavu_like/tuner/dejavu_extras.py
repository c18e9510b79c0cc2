"""triton-dejavu's module-level extras: ``global_metadata_store``, ``jitcache`` and ``global_cache_lock``;
and its ``post_hook(args)``, which took no ``exception``.

``metadata_key=`` makes a tuner record its chosen config in :data:`global_metadata_store` at each
launch, in dejavu's format (for proton's ``metadata_fn``). ``jitcache`` is accepted for code written
for dejavu: it checks the names it is given and returns the kernel unchanged, since the launch here
always goes through Triton's own path (safe on every release).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from .._compat import Config

#: ``metadata_key -> "<autotune:{config}>"`` (spaces removed) of the config each tuner last launched.
global_metadata_store: dict[str, str] = {}

_Kernel = TypeVar("_Kernel")


def metadata_text(config: Config | None) -> str:
    """What triton-dejavu stores for a config: ``"<autotune:" + str(config) + ">"`` without spaces."""
    return f"<autotune:{config}>".replace(" ", "")


class MetadataRecorder:
    """Writes one tuner's chosen config under its ``metadata_key`` (the text is made once per config)."""

    def __init__(self, key: str) -> None:
        self.key = key
        self._config: Config | None = None
        self._text = metadata_text(None)

    def record(self, config: Config | None) -> None:
        if config is not self._config:
            self._config, self._text = config, metadata_text(config)
        global_metadata_store[self.key] = self._text


class CacheLock:
    """triton-dejavu's ``global_cache_lock``: ``lock()``/``unlock()`` and ``is_locked``. Nothing here
    caches launches, so the flag only records what the program asked for."""

    def __init__(self) -> None:
        self.is_locked = False

    def lock(self) -> None:
        self.is_locked = True

    def unlock(self) -> None:
        self.is_locked = False


global_cache_lock = CacheLock()


def jitcache(
    check_keys: Sequence[str],
    check_specialization: Sequence[str],
    cache_lock: CacheLock | None = None,
    cache_launch_grid: bool = False,
    assume_const: Sequence[str] | None = None,
    autotuner_args: Sequence[str] | None = None,
) -> Callable[[_Kernel], _Kernel]:
    """triton-dejavu's ``jitcache`` decorator: checks that ``check_keys``, ``check_specialization`` and
    ``assume_const`` name kernel arguments, and returns the kernel itself (Triton's own launch path;
    ``TRITON_DEJAVU_DISABLE_JITCACHE=1`` therefore changes nothing)."""

    def decorator(fn: _Kernel) -> _Kernel:
        arg_names = list(getattr(fn, "arg_names", ()))
        lists = {"check_keys": check_keys, "check_specialization": check_specialization}
        lists["assume_const"] = assume_const or ()
        for what, names in lists.items():
            for name in [names] if isinstance(names, str) else names:
                if name not in arg_names:
                    raise ValueError(
                        f"{what} names {name!r}, which is not a kernel argument "
                        f"(the kernel's arguments are: {', '.join(arg_names)})"
                    )
        return fn

    return decorator


def post_hook_as_called(hook: Callable[..., Any] | None) -> Callable[..., Any] | None:
    """``hook`` as the tuner calls a ``post_hook``: ``hook(args, exception=...)``, as upstream does. A
    hook written for triton-dejavu, which called ``post_hook(args)``, takes one argument (no
    ``exception``): it is called without one. A hook with a second parameter of another name is called
    as upstream calls it, and fails as it fails there (``unexpected keyword argument 'exception'``)."""
    if hook is None or not _written_for_dejavu(hook):
        return hook

    @functools.wraps(hook)
    def without_exception(args: Any, exception: BaseException | None = None) -> Any:
        return hook(args)

    return without_exception


def _written_for_dejavu(hook: Callable[..., Any]) -> bool:
    """One parameter (or ``*args``) and none that takes ``exception``: triton-dejavu's ``post_hook(args)``."""
    try:
        parameters = inspect.signature(hook).parameters.values()
    except (TypeError, ValueError):  # no signature to read: called as upstream calls it
        return False
    by_keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    if any(
        p.kind is inspect.Parameter.VAR_KEYWORD or (p.name == "exception" and p.kind in by_keyword)
        for p in parameters
    ):
        return False
    return sum(p.kind is not inspect.Parameter.VAR_POSITIONAL for p in parameters) <= 1


__all__ = [
    "CacheLock",
    "MetadataRecorder",
    "global_cache_lock",
    "global_metadata_store",
    "jitcache",
    "post_hook_as_called",
]
