"""Upstream's ``.configs`` and ``.cache`` attributes, which code written for upstream assigns or changes
after decoration (``kernel.configs = [config]`` to pin a config, a config written into ``.cache``, the
dict cleared to decide again): such a change takes effect at the next launch, as upstream's does,
because it empties the launch table of :class:`~triton_dejavu_like.tuner.autotuner.Autotuner`'s fast
path. A ``ConfigSpace`` is listed into ``.configs`` at first use, for the platform of that process."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from .._compat import Config
from ..store import Platform
from .config_space import ConfigSpace, platform_check_for


def _notifying(method: Callable[..., Any]) -> Callable[..., Any]:
    """A method of a :class:`_Watched` container that calls its listeners after changing it."""

    def change(self: _Watched, *args: Any, **kwargs: Any) -> Any:
        with changes:
            result = method(self, *args, **kwargs)
            self._changed()
        return result

    change.__name__ = method.__name__
    return change


_W = TypeVar("_W", bound="_Watched")

#: Held while ``.configs`` or ``.cache`` is changed from outside (with the launch tables forgotten) and
#: while a miss writes its decision, so that a decision made before a change never lands after it. A
#: change and a write are rare and short; the hot path never takes it.
changes = threading.RLock()


def _notifies(*names: str) -> Callable[[type[_W]], type[_W]]:
    """A class decorator: the methods ``names`` of the class's built-in container, notifying."""

    def decorate(cls: type[_W]) -> type[_W]:
        for name in names:
            setattr(cls, name, _notifying(getattr(cls._plain, name)))
        return cls

    return decorate


class _Watched:
    """A container that calls its listeners after a change made to it from outside. The listeners
    are bound methods held weakly: a shallow copy of a tuner shares the container (as upstream's
    copies share theirs) and listens too, without keeping the copy alive. A copy of the container
    itself (``copy.deepcopy`` of its tuner) has no listener until its tuner listens."""

    __slots__ = ()
    _listeners: list[weakref.WeakMethod[Callable[[], None]]]
    _plain: type  # the built-in container it is

    def __init__(self, contents: Any = ()) -> None:
        super().__init__(contents)  # type: ignore[call-arg]
        self._listeners = []

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._plain(self),))

    def listen(self, changed: Callable[[], None]) -> None:
        """Call ``changed`` after each change from outside, while its object lives; the listeners of
        objects gone are dropped here (a process copying a tuner again and again kept one per copy)."""
        with changes:
            self._listeners[:] = [ref for ref in self._listeners if ref() is not None]
            self._listeners.append(weakref.WeakMethod(changed))

    def _changed(self) -> None:
        alive = []
        for ref in self._listeners:
            changed = ref()
            if changed is not None:
                changed()
                alive.append(ref)
        self._listeners[:] = alive


@_notifies("__setitem__", "__delitem__", "__ior__", "clear", "pop", "popitem", "setdefault", "update")
class DecidedKeys(_Watched, dict):  # type: ignore[type-arg]
    """``.cache``: upstream's ``{key tuple: Config}``. A change made to it from outside (a key set or
    removed, the dict cleared) empties the launch tables of the tuners that listen, so that the next
    launch of every key reads it again: code written for upstream pins a config by writing it there,
    or re-decides by clearing it."""

    __slots__ = ("_listeners",)
    _plain = dict


@_notifies(
    "__setitem__",
    "__delitem__",
    "__iadd__",
    "__imul__",
    "append",
    "extend",
    "insert",
    "pop",
    "remove",
    "clear",
    "sort",
    "reverse",
)
class ConfigList(_Watched, list):  # type: ignore[type-arg]
    """``.configs``: upstream's list of candidate configs. Changed in place (``kernel.configs[:] =
    [config]``, ``.append``), it makes its tuners read it again at the next launch of every key."""

    __slots__ = ("_listeners",)
    _plain = list


class UpstreamAttributes:
    """The config list and the decided keys of the tuner it is mixed into (a mixin: the tuner sets
    ``_config_space``, ``_configs_list``, ``_meta_names`` and the launch table ``_launch``)."""

    _config_space: ConfigSpace | None
    _configs_list: ConfigList | None
    _meta_names: frozenset[str]
    _cache: DecidedKeys
    _name: str
    _platform: Callable[[], Platform]

    @property
    def configs(self) -> list[Config]:
        if self._configs_list is None and self._config_space is not None:
            platform = self._platform()
            listed = self._config_space.configs(platform_check_for(platform.backend, platform.capability))
            if not listed:
                raise ValueError(f"{self._name}: the ConfigSpace has no valid config on this platform")
            self._configs_list = self._watched_configs(listed)
        return self._configs_list if self._configs_list is not None else []

    @configs.setter
    def configs(self, value: Sequence[Config] | None) -> None:
        """Upstream's attribute, also assigned after decoration (``kernel.configs = [config]`` pins a
        config): every key is decided again at its next launch."""
        with changes:
            self._configs_list = self._watched_configs(value) if value is not None else None
            self._configs_changed()

    def _watched_configs(self, configs: Sequence[Config]) -> ConfigList:
        watched = ConfigList(configs)
        watched.listen(self._configs_changed)
        return watched

    def _configs_changed(self) -> None:
        if "_meta_names" in self.__dict__:  # not while upstream's __init__ sets it
            self._meta_names = self._tuned_names()
        self._forget_launches()

    def _listen_again(self) -> None:
        """A copy of the tuner (``copy.copy`` shares its containers, ``copy.deepcopy`` copies them)
        listens to its ``.cache`` and ``.configs``."""
        self._cache.listen(self._forget_launches)
        if self._configs_list is not None:
            self._configs_list.listen(self._configs_changed)

    @property
    def cache(self) -> dict[tuple[Any, ...], Config]:
        """Upstream's ``{key tuple: Config}`` of the decided keys; assigning or changing it from outside
        takes effect at the next launch, as upstream's does."""
        return self._cache

    @cache.setter
    def cache(self, value: dict[tuple[Any, ...], Config]) -> None:
        with changes:
            self._cache = DecidedKeys(value)
            self._cache.listen(self._forget_launches)
            self._forget_launches()

    def _forget_launches(self) -> None:
        """Empty the hot path's table: each key's next launch looks at ``.cache`` and ``.configs``. A
        miss being decided meanwhile (in another thread) sees the generation change and keeps its
        decision out of the table and of ``.cache``: it was made over what was there before."""
        with changes:
            self._generation = self.__dict__.get("_generation", 0) + 1
            table = self.__dict__.get("_launch")
            if table:
                table.clear()

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
