"""Where an Autotuner's results live: its storage identity, the store it opens, config hashes."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import _compat, _env
from .._compat import Config
from .._log import DejavuStorageWarning, log, warn_once
from ..codec import EncodingError
from ..store import (
    FileStore,
    KernelIdentity,
    LayeredStore,
    MemoryStore,
    Platform,
    Store,
    StoreLayer,
    default_root,
    default_tag,
    inventory,
    registered_stores,
)
from ..store.elsewhere import stored_elsewhere
from ..store.identity import code_version, stable_hash
from ..store.layered import registrations, usable
from .config_ids import ConfigIds
from .mode import tuning_enabled
from .settings import TunerSettings

if TYPE_CHECKING:
    from .deciding import ProcessState


class StorageIdentity:
    """The storage side of :class:`~triton_dejavu_like.tuner.autotuner.Autotuner` (a mixin: it reads
    the tuner's ``settings``, ``fn``, ``keys``, ``configs`` and ``arg_names``)."""

    settings: TunerSettings
    fn: Any
    keys: list[str]
    arg_names: list[str]
    configs: list[Config]
    _name: str
    _label: str
    _platform: Callable[[], Platform]
    _config_ids: ConfigIds

    def _config_id(self, config: Config) -> str:
        """``config_id(config)``, remembered per Config object while its fields stay the same
        (:class:`~triton_dejavu_like.tuner.config_ids.ConfigIds`)."""
        return self._config_ids(config)

    def kernel_identity(self, platform: Platform) -> KernelIdentity:
        return KernelIdentity(
            platform=platform,
            kernel=self._name,
            autotune_config=stable_hash(self.settings.identity()),
            code_version=code_version(self.fn),
            tune_features=stable_hash({"key": list(self.keys), "ignore_dtypes": self.settings.ignore_dtypes}),
            kernel_configs=self._config_ids.hash(self.configs, stored=True),
            tag=self.settings.tag or default_tag(),
        )

    def _root(self) -> Path:
        return self.settings.custom_data_storage or default_root()

    def cache_path(self) -> Path:
        """The ``cache.json`` this kernel reads and writes on this machine."""
        return FileStore(self._root(), self.kernel_identity(self._platform()).as_dict(), self.arg_names).path

    def _open_store(self, platform: Platform) -> tuple[Store, dict[str, Any] | None]:
        """This kernel's store, and its identity (None: it cannot be computed, results stay in memory)."""
        try:
            ident = self.kernel_identity(platform)
        except (OSError, ValueError, TypeError, EncodingError) as exc:
            warn_once(
                DejavuStorageWarning,
                self._label,
                "%s: cannot compute its storage identity (%s); results stay in memory",
                self._label,
                exc,
            )
            return MemoryStore(), None
        identity = ident.as_dict()
        root = self._root()
        # os.path never raises (Path.exists does on a root under a folder this user cannot search);
        # when tuning, the write warns instead
        if not tuning_enabled() and os.path.exists(root) and not os.path.isdir(root):
            warn_once(
                DejavuStorageWarning,
                f"root is not a folder:{root}",
                "the storage root %s is not a folder: nothing is restored from it (point %s at a folder)",
                root,
                _env.STORAGE,
            )
        primary = FileStore(root, identity, self.arg_names)
        layers = self._layers(root)
        if not layers:
            return primary, identity
        return LayeredStore(primary, layers, identity, self.arg_names), identity

    def _note_dejavu_results(self) -> None:
        """One warning when the root holds triton-dejavu's results for this kernel: they are not read,
        so without an import every key would be tuned again (or, under ``TRITON_DEJAVU_FORCE_FALLBACK=1``,
        answered by the fallback instead of the stored winner)."""
        root = self._root()
        files = inventory.triton_dejavu_files(root, self._name)
        if files:
            fn = _compat.python_function(self.fn)
            module = getattr(fn, "__module__", None)
            if module in (None, "__main__"):  # the command imports the kernel: a script is named by its file
                module = getattr(getattr(fn, "__code__", None), "co_filename", None) or "MODULE"
            warn_once(
                DejavuStorageWarning,
                f"{root}:{self._label}",
                "%s: %s holds %d triton-dejavu cache file(s) for this kernel (%s), which are not read "
                "here; nothing of this package's own is stored for it, so its keys are tuned again (or "
                "answered by the fallback under %s=1). Import them once: python -m triton_dejavu_like "
                "import-dejavu %s --kernel %s:%s",
                self._label,
                root,
                len(files),
                files[0],
                _env.FORCE_FALLBACK,
                root,
                module,
                self._name,
            )

    def _stored_elsewhere(self) -> list[str]:
        """The roots (the written one, then the layers) that hold results of this kernel under another
        identity (another code version, config list, Triton, ...): ``"ROOT: WHAT"`` each."""
        try:
            identity = self.kernel_identity(self._platform()).as_dict()
        except (OSError, ValueError, TypeError, EncodingError):
            return []
        root = self._root()
        roots = [(str(root), root), *((layer.label, layer.location) for layer in self._layers(root))]
        return stored_elsewhere(roots, identity)

    @staticmethod
    def _layers(root: Path) -> list[StoreLayer]:
        """The read-only layers: the other roots of ``TRITON_DEJAVU_STORAGE``, then the stores
        registered with :func:`~triton_dejavu_like.add_store` (the writable root is never a layer). A
        root of the variable that is not a folder is reported once and skipped, as by ``add_store``."""
        env = [StoreLayer(p) for p in _env.storage_roots()[1:] if p != root]
        env = [layer for layer in env if usable(layer, _env.STORAGE)]
        return env + _registered_layers(root)

    def _read_late_stores(self, state: ProcessState) -> None:
        """Stores registered with :func:`~triton_dejavu_like.add_store` after this kernel opened its
        store: read now, behind its layers, for the keys not decided yet (a miss is where this runs;
        keys already decided keep their answers, the launch path is not touched)."""
        state.registrations = registrations()
        store = state.store
        if state.identity is None:  # results in memory only: there is no identity to read them for
            return
        have = {layer.label for layer in store.layers} if isinstance(store, LayeredStore) else set()
        root = self._root()
        late = [layer for layer in _registered_layers(root) if layer.label not in have]
        if not late:
            return
        if not isinstance(store, LayeredStore):
            store = state.store = LayeredStore(store, [], state.identity, self.arg_names)
        found = store.add_layers(late, state.restored)
        state.restored.update(found)
        log.info(
            "%s: read %d store(s) registered after its first miss (%s): %d more entries",
            self._label,
            len(late),
            ", ".join(layer.label for layer in late),
            len(found),
        )


def _registered_layers(root: Path) -> list[StoreLayer]:
    """The stores registered with :func:`~triton_dejavu_like.add_store`, but ``root`` (the writable
    root is never a layer)."""
    return [layer for layer in registered_stores() if layer.location != root]
