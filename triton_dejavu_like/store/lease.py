"""A per-key tuning lease beside a cache file: one process tunes a key, the others wait for it.

A lease is a small JSON file ``cache.json.lease-<hash of the key id>`` next to the cache file,
created with ``O_CREAT | O_EXCL`` (never ``flock``, which network file systems implement unevenly):
whoever creates it holds it. It records the holder's host, pid, start time and a random token; its
heartbeat is the file's modification time, which a daemon thread of the holder sets to the holder's
clock every :data:`HEARTBEAT_S` seconds while it tunes. A holder that finds its lease removed or
replaced by another process's at a heartbeat (it was taken over: it looked dead) stops refreshing it
and warns: that key may be tuned twice.

A lease is *stale* when its holder is gone: on the same host and in the same pid namespace (a
container with the host's name, ``--network host``, has its own), its pid no longer exists (or is a
zombie, not yet reaped by its parent), or it
is this process's pid but none of its leases (an earlier process of a restarted container); else,
its heartbeat is older than :data:`STALE_AFTER_S`. A stale lease is taken over by renaming it
to a unique ``cache.json.stale-*`` name (one rename succeeds, the others find it gone); the taker
checks that what it renamed is the lease it judged (else it puts it back with ``os.link``, which
also refuses to overwrite) and then competes for a fresh lease like anyone else.

What this assumes of the file system shared by the processes: an exclusive create and a rename
that are atomic (local file systems, NFSv3+ with its usual semantics, Lustre, GPFS), and clocks of
the hosts that agree within a fraction of :data:`STALE_AFTER_S` (NTP). Lease contents are data:
JSON is parsed and checked, never evaluated.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._log import DejavuTuningWarning, log, warn_once
from .layout import LEASE_SUFFIX, STALE_LEASE_SUFFIX

#: Seconds between two heartbeats of a holder.
HEARTBEAT_S = 5.0
#: A lease of another host whose heartbeat is older than this is stale (6 missed heartbeats).
STALE_AFTER_S = 30.0
#: A lease file is a few hundred bytes; anything bigger is not read.
MAX_LEASE_BYTES = 4096


def _pid_namespace() -> str:
    """This process's pid namespace (Linux: ``pid:[inode]``), or "" where it cannot be told."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


_PID_NAMESPACE = _pid_namespace()
#: The tokens of the leases this process holds now (a lease naming this pid with another token was
#: written by an earlier process that had the same pid).
_held_tokens: set[str] = set()


@dataclass(frozen=True)
class LeaseInfo:
    """What a lease file says about its holder, and its heartbeat (the file's mtime)."""

    host: str
    pid: int
    started: float
    token: str
    heartbeat: float
    pid_namespace: str = ""  # "" when the holder did not say (another system, an older release)

    def same_pid_space(self) -> bool:
        """The holder's pid can be looked up here: same host, and the same pid namespace if both
        sides know theirs."""
        return _same_pid_space(self.host, self.pid_namespace)

    def describe(self) -> str:
        if self.pid < 0:  # created and not written yet (or unreadable): only its age is known
            return "a process not named in its lease file yet"
        return f"pid {self.pid} on {self.host}"

    def age_s(self, now: float | None = None) -> float:
        return (time.time() if now is None else now) - self.heartbeat


def lease_path(cache_path: Path, key_id: str) -> Path:
    """The lease file of ``key_id`` beside ``cache_path`` (a hash: key ids can be long)."""
    digest = hashlib.sha256(key_id.encode("utf-8")).hexdigest()[:16]
    return cache_path.with_name(f"{cache_path.name}{LEASE_SUFFIX}{digest}")


def _same_pid_space(host: str, pid_namespace: str) -> bool:
    if host != socket.gethostname():
        return False
    return not (pid_namespace and _PID_NAMESPACE and pid_namespace != _PID_NAMESPACE)


def this_process() -> dict[str, Any]:
    """What names this process to others (JSON): its host, pid and pid namespace."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "pid_namespace": _PID_NAMESPACE}


def process_gone(host: str, pid: int, pid_namespace: str = "") -> bool:
    """Whether the process named (as :func:`this_process` names it) is known to have ended: its pid
    can be looked up here (same host, same pid namespace) and does not exist or is a zombie. False
    where that cannot be told (another host, another pid namespace): only a timeout tells then."""
    return pid > 0 and _same_pid_space(host, pid_namespace) and not _pid_alive(pid)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: exists, owned by someone else
        pass
    return not _exited(pid)


def _exited(pid: int) -> bool:
    """Whether ``pid`` has ended and only waits for its parent to reap it (a zombie: a holder killed
    whose launcher waits for its children one by one); False where that cannot be told (no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read(4096)
    except OSError:
        return False
    end = stat.rfind(b")")  # the state follows the command name, which may hold any character
    return end >= 0 and stat[end + 2 : end + 3] in (b"Z", b"X")


def read_lease(path: Path) -> LeaseInfo | None:
    """The lease at ``path``, or None when there is none. A lease that cannot be parsed (a holder
    killed between create and write) is reported with host '?' so that only its age can judge it."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    except OSError:  # another user's lease (mode 600), a folder of that name
        return _unreadable(path)
    try:
        info = os.fstat(fd)
        raw = os.read(fd, MAX_LEASE_BYTES)  # a lease is one small write
    except OSError:
        return _unreadable(path)
    finally:
        os.close(fd)
    try:
        data = json.loads(raw.decode("utf-8"))
        host, pid, started, token = data["host"], data["pid"], data["started"], data["token"]
        namespace = data.get("pid_namespace", "")
        if not (
            isinstance(host, str)
            and isinstance(pid, int)
            and not isinstance(pid, bool)
            and isinstance(started, (int, float))
            and isinstance(token, str)
            and isinstance(namespace, str)
        ):
            raise ValueError("wrong types")
    except (ValueError, KeyError, TypeError, UnicodeDecodeError, RecursionError):
        return _by_age(info.st_mtime)
    return LeaseInfo(host, pid, float(started), token, info.st_mtime, namespace)


def _unreadable(path: Path) -> LeaseInfo | None:
    """A lease that exists but cannot be read, as one that cannot be parsed; None if it is gone
    meanwhile."""
    try:
        return _by_age(os.lstat(path).st_mtime)
    except OSError:
        return None


def _by_age(mtime: float) -> LeaseInfo:
    """A lease whose holder is not known (host '?'): only the age of its heartbeat can judge it."""
    return LeaseInfo("?", -1, mtime, "", mtime)


def is_stale(info: LeaseInfo, *, now: float | None = None) -> bool:
    """The holder is gone: a dead pid (or this process's pid, not holding it) where its pid can be
    looked up, or no heartbeat for :data:`STALE_AFTER_S`."""
    if info.pid > 0 and info.same_pid_space():
        if info.pid == os.getpid() and info.token not in _held_tokens:
            return True
        if not _pid_alive(info.pid):
            return True
    return info.age_s(now) > STALE_AFTER_S


class Lease:
    """The lease of one key: :meth:`acquire` it, :meth:`release` it (a context manager too)."""

    def __init__(self, path: Path, key_id: str) -> None:
        self.path = path
        self.key_id = key_id
        self.token = secrets.token_hex(8)
        self.held = False
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    def acquire(self) -> bool:
        """Create the lease file exclusively; True if this process now holds it.

        Raises ``OSError`` when the directory cannot be written (the caller then tunes without a
        lease); ``FileExistsError`` is the ordinary "someone else holds it" and returns False.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            **this_process(),
            "started": time.time(),
            "token": self.token,
            "key": self.key_id[:500],
        }
        # known as this process's before the file exists: another thread that reads it at once must
        # not take it for a predecessor's with the same pid
        _held_tokens.add(self.token)
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
        except FileExistsError:  # another process or thread holds it
            _held_tokens.discard(self.token)
            return False
        except BaseException:
            _held_tokens.discard(self.token)
            raise
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(json.dumps(payload).encode("utf-8"))
                handle.flush()
                os.fsync(handle.fileno())
        except BaseException:
            _held_tokens.discard(self.token)
            with contextlib.suppress(OSError):
                self.path.unlink()
            raise
        self.held = True
        try:  # a KeyboardInterrupt here (in the thread's start, say) must not leave a lease behind
            self._stop.clear()
            self._beat = threading.Thread(target=self._heartbeat, name="dejavu-lease-heartbeat", daemon=True)
            self._beat.start()
            log.debug("took the tuning lease %s", self.path)
        except BaseException:
            self.release()
            raise
        return True

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            lost = self._refresh()
            if lost is not None and not self._stop.is_set():  # taken over (we looked dead), or removed
                warn_once(
                    DejavuTuningWarning,
                    str(self.path),
                    "lost the tuning lease %s of key %s (%s): another process may tune that key "
                    "too (both results are valid; the later record wins). A holder looks dead to the "
                    "other processes, on its host too, when its lease is not refreshed for %.0f s (a "
                    "paused process, clocks that disagree, a storage root removed): keep tuning processes "
                    "running (no SIGSTOP), the clocks synchronised (NTP) and the root in place",
                    self.path,
                    self.key_id[:200],
                    lost,
                    STALE_AFTER_S,
                )
                return

    def _refresh(self) -> str | None:
        """Set the lease's heartbeat to now if it is still ours; else (or if that fails) why not."""
        try:
            current = read_lease(self.path)
            if current is None:
                return "it was removed"
            if current.token != self.token:
                return f"{current.describe()} holds it now"
            now = time.time()
            os.utime(self.path, (now, now))
        except OSError as exc:
            return str(exc)
        return None

    def release(self) -> None:
        """Stop the heartbeat and remove the lease file if it is still ours."""
        if not self.held:
            return
        self._stop.set()
        try:
            # (a start interrupted before the thread said it runs cannot be joined: it sees the
            # stop at its first wait)
            with contextlib.suppress(RuntimeError):
                if self._beat is not None:
                    self._beat.join(timeout=2 * HEARTBEAT_S)
        finally:  # also when interrupted while waiting for the heartbeat to stop
            self.held = False
            _held_tokens.discard(self.token)
            current = read_lease(self.path)
            if current is not None and current.token == self.token:
                with contextlib.suppress(OSError):
                    self.path.unlink()
                log.debug("released the tuning lease %s", self.path)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def take_over(path: Path, stale: LeaseInfo) -> bool:
    """Remove the stale lease ``stale`` from ``path`` so that a new one can be created.

    Renames it to a unique ``*.stale-*`` name: of several processes judging it stale, one rename
    succeeds. If what was renamed is not the lease judged (it was replaced meanwhile by a live
    holder), it is put back with ``os.link`` (which never overwrites) and False is returned.
    """
    aside = path.with_name(f"{path.name}{STALE_LEASE_SUFFIX}{os.getpid()}-{secrets.token_hex(3)}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return False  # someone else took it over (or the holder finished)
    moved = read_lease(aside)
    if moved is not None and (moved.token, moved.pid, moved.host) != (stale.token, stale.pid, stale.host):
        with contextlib.suppress(OSError):
            os.link(aside, path)
        with contextlib.suppress(OSError):
            aside.unlink()
        return False
    with contextlib.suppress(OSError):
        aside.unlink()
    log.info("took over the stale tuning lease of %s (%s)", stale.describe(), path.name)
    return True
