"""Results of a kernel stored under another identity: what a kernel that finds nothing stored for
itself tells its user (its code, config list, Triton or GPU changed since it was tuned).

A kernel's identity is the path of its cache file, so an upgrade (a new kernel source, another
config list, another Triton) finds none of the results shipped for the previous one, and never
launches them: with tuning off, every key is then a miss. :func:`stored_elsewhere` says which
identity fields the same kernel's files under the roots differ in, from their folder names only
(nothing is read, parsed or written), so that the warning can say why nothing was found.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._log import log
from .layout import IDENTITY_FIELDS, component, level_value
from .resource import Traversable
from .warm_start import sibling_folders

#: Every field but the kernel's name may differ.
_VARYING = tuple(name for name in IDENTITY_FIELDS if name != "kernel")
#: What a field that differs means to a user (a field with a readable value names it as well).
_MEANING = {
    "dejavu": "storage version {}",
    "triton": "Triton {}",
    "toolchain": "toolchain {}",
    "gpu": "GPU {}",
    "autotune_config": "other tuner settings",
    "code_version": "another version of the kernel's code",
    "tune_features": "another tuning key",
    "kernel_configs": "another config list",
    "tag": "tag {}",
}
#: At most this many folders of one root are compared (a store kept for years holds many versions).
MAX_FOLDERS = 64


def differences(identity: Mapping[str, Any], parts: Sequence[str]) -> list[str]:
    """What the folder ``parts`` (a cache file's path under a root, by level) stores for, where it is
    not ``identity``: ``["another version of the kernel's code", "Triton 3.8.0"]``."""
    out = []
    for field, folder in zip(IDENTITY_FIELDS, parts):
        if folder != component(field, identity[field]):
            out.append(_MEANING[field].format(level_value(field, folder)))
    return out


def stored_elsewhere(roots: Sequence[tuple[str, Traversable]], identity: Mapping[str, Any]) -> list[str]:
    """For each root (``(label, folder)``) holding results of the kernel of ``identity`` under another
    identity: ``"LABEL: WHAT[; WHAT...]"``, the differences of each folder joined. Never raises:
    a root that cannot be listed is skipped."""
    found = []
    for label, root in roots:
        try:
            folders = sibling_folders(root, identity, _VARYING)[:MAX_FOLDERS]
        except (OSError, ValueError, KeyError) as exc:
            log.debug("cannot look for other versions of %s in %s (%s)", identity.get("kernel"), label, exc)
            continue
        what = list(dict.fromkeys(", ".join(differences(identity, parts)) for parts, _ in folders))
        if what:
            found.append(f"{label}: {'; '.join(what)}")
    return found
