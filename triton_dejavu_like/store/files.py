"""Reading and replacing one file safely: bounded reads of regular files, atomic writes that keep
the file's attributes, moving a bad file aside, removing a dead writer's temporary files, the lock.

Nothing here knows what a cache file holds (:mod:`.document` does); :class:`.cache_file.CacheFile`
puts the two together.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
import time
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import BinaryIO

import filelock

from .._log import DejavuStorageWarning, log, warn_once
from .document import Document, InvalidCacheFile, parse_document
from .layout import CORRUPT_SUFFIX, LOCK_SUFFIX

#: A cache file over this size is not read (moved aside): a result file is a few kB per key.
MAX_FILE_BYTES = 64 * 1024 * 1024
LOCK_TIMEOUT_S = 120.0


def read_bounded(path: Path) -> bytes:
    """The bytes of a regular file, refusing anything else (a FIFO would block) or a file too big.

    Raises :class:`InvalidCacheFile` for a file over the limit or not a regular file, ``OSError``
    when it cannot be opened or read.
    """
    with open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > MAX_FILE_BYTES:
            raise InvalidCacheFile(f"{size} bytes, over the {MAX_FILE_BYTES}-byte limit")
        data = handle.read(MAX_FILE_BYTES + 1)  # a file that grew since
    if len(data) > MAX_FILE_BYTES:
        raise InvalidCacheFile(f"over the {MAX_FILE_BYTES}-byte limit")
    return data


def open_regular(path: Path) -> BinaryIO:
    """``path`` opened for reading in binary, refusing anything but a regular file (a FIFO would
    block): :class:`InvalidCacheFile`, or ``IsADirectoryError`` for a directory."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):  # someone's directory: refused, never moved aside
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        raise InvalidCacheFile("not a regular file")
    return os.fdopen(fd, "rb")


def read_document(
    path: Path, *, parameters: Collection[str] | None = None, only: Collection[str] | None = None
) -> Document:
    """Read and parse one cache file (raises ``OSError`` or :class:`InvalidCacheFile`); ``only``: as
    for :func:`parse_document`."""
    return parse_document(read_bounded(path), parameters=parameters, only=only)


# --- writing -------------------------------------------------------------------------------------------


def followed(path: Path) -> Path:
    """``path``, or the file it links to: where a write lands and what its lock guards (links are
    followed everywhere, so two roots whose cache files link to one file share its lock)."""
    return Path(os.path.realpath(path)) if os.path.islink(path) else path


def _temp_name(path: Path) -> str:
    return f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):  # make the rename durable where the platform allows it
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _keep_attributes(fd: int, path: Path) -> None:
    """Give the new file ``fd`` the permission bits, group and owner of the file it replaces at
    ``path`` (nothing when there is none). The group first: a writer of a shared store is mostly
    not its owner, and may give the file to any group it belongs to; the owner only where this
    process may give files away (root). What cannot be kept stays as created."""
    try:
        old = os.stat(path)
    except OSError:
        return
    if hasattr(os, "fchown"):
        for owner in (old.st_uid, -1):
            try:
                os.fchown(fd, owner, old.st_gid)
                break
            except OSError:
                continue
    if hasattr(os, "fchmod"):  # after fchown, which may clear the set-group-ID bit
        with contextlib.suppress(OSError):
            os.fchmod(fd, stat.S_IMODE(old.st_mode))


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old or the new file, never a mix.

    A new file is created with mode 0o666 minus the umask, like any file the user creates; a file
    that is replaced keeps its permission bits and its group (and its owner, where this process may
    give files away). A symbolic link is written through (links are followed everywhere): the file
    it points to is replaced, and the link stays.
    """
    path = followed(path)
    tmp = path.with_name(_temp_name(path))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            _keep_attributes(handle.fileno(), path)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_dir(path.parent)


def aside_name(path: Path, suffix: str) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%S")
    return path.with_name(f"{path.name}{suffix}{stamp}-{os.getpid()}-{secrets.token_hex(3)}")


def quarantine(path: Path, reason: str) -> Path | None:
    """Move a bad file aside (never delete it) and say so once, naming the file."""
    target = aside_name(path, CORRUPT_SUFFIX)
    try:
        os.replace(path, target)
    except OSError as exc:
        warn_once(
            DejavuStorageWarning,
            str(path),
            "ignoring unreadable tuning cache %s (%s); could not move it aside: %s",
            path,
            reason,
            exc,
        )
        return None
    warn_once(  # each file set aside is news, also a second one of the same path
        DejavuStorageWarning,
        str(target),
        "ignoring unreadable tuning cache %s (%s); moved it to %s",
        path,
        reason,
        target.name,
    )
    return target


def remove_orphan_temp_files(path: Path) -> list[Path]:
    """Delete temporary files of ``path`` left by writers that died mid-write.

    Call it only while holding the file's lock: writers create temporary files under the lock, so
    any temporary file seen then belongs to a writer that is gone.
    """
    removed = []
    with contextlib.suppress(OSError):
        for tmp in path.parent.glob(f".{path.name}.*.tmp"):
            with contextlib.suppress(OSError):
                tmp.unlink()
                removed.append(tmp)
    if removed:
        log.debug("removed %d temporary files left by interrupted writers of %s", len(removed), path)
    return removed


@contextlib.contextmanager
def file_lock(path: Path, timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold the lock of the cache file ``path`` (creating its directory).

    On POSIX this is an ``flock`` on ``<path>.lock``: the kernel releases it when its holder exits or
    is killed, so a dead process never blocks the others.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(str(path) + LOCK_SUFFIX, timeout=timeout):
        yield
