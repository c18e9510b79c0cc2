"""Single-flight tuning: of the processes that miss one key of one store, one tunes, the others wait.

:func:`tune_once` wraps a miss that needs tuning. With a writable :class:`~triton_dejavu_like.store.FileStore`
(alone, or as the written store of a :class:`~triton_dejavu_like.store.LayeredStore`) it takes the
key's lease (:mod:`triton_dejavu_like.store.lease`) before tuning and removes it once the result is
recorded (or the tuning failed). A process that finds the lease held by a live process
polls the cache file for the key and restores the result when it appears, measuring nothing (the
first wait of a kernel is a warning, each later one a log record); a lease whose holder died is
taken over; a wait longer than :func:`wait_timeout_s` ends in tuning here (with a warning).
Without a writable file store (memory, read-only, a key with no stored form), or with
``TRITON_DEJAVU_SINGLE_FLIGHT=0``, the miss is tuned as before.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from .. import _env
from .._log import DejavuTuningWarning, log, warn_once
from ..store import CacheFile, FileStore, LayeredStore, Store, StoredEntry
from ..store.lease import STALE_AFTER_S, Lease, LeaseInfo, is_stale, lease_path, read_lease, take_over
from .key import TuningKey
from .trial import Outcome

#: Without stored tuning times, a candidate is assumed to take this long to compile and time.
DEFAULT_SECONDS_PER_CANDIDATE = 3.0
#: The wait for another process is this many times its expected tuning time, plus a margin ...
WAIT_FACTOR = 3.0
WAIT_MARGIN_S = 30.0
#: ... within these bounds.
MIN_WAIT_S = 60.0
MAX_WAIT_S = 7200.0
#: What turns a result another process stored into this process's outcome (None: it does not fit).
Adopt = Callable[[StoredEntry], "Outcome | None"]

#: A waiting process logs a progress line this often.
PROGRESS_EVERY_S = 10.0
#: Polling of the cache file starts fast and slows down to this interval.
MAX_POLL_S = 1.0

#: Keys each kernel (by name) waited for in this process.
_waits: Counter[str] = Counter()
_waits_lock = threading.Lock()


def wait_timeout_s(n_candidates: int, history: Mapping[str, StoredEntry]) -> float:
    """How long to wait for another process tuning ``n_candidates``: ``TRITON_DEJAVU_SINGLE_FLIGHT_TIMEOUT``,
    else from the median seconds per candidate of the kernel's stored keys (default 3 s), times
    :data:`WAIT_FACTOR` plus :data:`WAIT_MARGIN_S`, bounded by :data:`MIN_WAIT_S` and :data:`MAX_WAIT_S`."""
    override = _env.single_flight_timeout_s()
    if override is not None:
        return override
    per_candidate = [e.tuning_time_s / e.evaluated for e in history.values() if e.evaluated > 0]
    seconds = statistics.median(per_candidate) if per_candidate else DEFAULT_SECONDS_PER_CANDIDATE
    expected = seconds * max(1, n_candidates)
    return min(MAX_WAIT_S, max(MIN_WAIT_S, WAIT_FACTOR * expected + WAIT_MARGIN_S))


class _Watcher:
    """Re-reads the cache file only when it changed (its inode, size or mtime) and looks up one key."""

    def __init__(self, cache_file: CacheFile, key_id: str) -> None:
        self.cache_file = cache_file
        self.key_id = key_id
        self._seen: tuple[int, int, int] | None = None

    def entry(self, *, force: bool = False) -> StoredEntry | None:
        try:
            info = os.stat(self.cache_file.path)
        except OSError:
            return None
        signature = (info.st_ino, info.st_size, info.st_mtime_ns)
        if signature == self._seen and not force:
            return None
        self._seen = signature
        return self.cache_file.peek(self.key_id)


def _writable_cache_file(store: Store) -> CacheFile | None:
    if isinstance(store, LayeredStore):  # read-only layers behind it: results are recorded to its primary
        store = store.primary
    if isinstance(store, FileStore) and store.cache_file.writable:
        return store.cache_file
    return None


def tune_once(
    store: Store,
    key: TuningKey,
    kernel_name: str,
    n_candidates: int,
    history: Mapping[str, StoredEntry],
    tune: Callable[[], Outcome],
    adopt: Adopt,
    keep: Callable[[Outcome], None],
) -> Outcome:
    """``tune()`` (which tunes the key) and ``keep(outcome)`` (which records it), unless another
    process is doing it: then the result it records, through ``adopt(entry)`` (None: the entry does
    not fit this process's candidates, which are then tuned here). A result another process
    recorded while this one tuned (it took over a lease this one held while stopped, or stopped
    waiting for this one) is adopted in place of this one's, which is not recorded: the first
    result recorded for a key is the one every process launches."""
    cache_file = _writable_cache_file(store)
    if cache_file is None or key.id is None or not _env.single_flight():
        outcome = tune()
        keep(outcome)
        return outcome
    flight = _Flight(cache_file, key.id, kernel_name, wait_timeout_s(n_candidates, history))
    return flight.run(lambda: flight.tuned(tune, adopt, keep), adopt)


def stored_meanwhile(store: Store, key: TuningKey, adopt: Adopt) -> Outcome | None:
    """What another process recorded for ``key`` since this one loaded its store (the cache file
    read again), through ``adopt``; None when nothing is there or it does not fit."""
    cache_file = _writable_cache_file(store)
    if cache_file is None or key.id is None:
        return None
    entry = cache_file.peek(key.id)
    return adopt(entry) if entry is not None else None


@contextlib.contextmanager
def lease_held(store: Store, key: TuningKey) -> Iterator[None]:
    """The key's lease held while the block runs, if it can be taken at once: the leader of ranks
    tuning together holds it so that processes outside the group wait for the group's result.
    Held by another process, or not creatable, the block runs without it."""
    lease: Lease | None = None
    cache_file = _writable_cache_file(store)
    try:  # released (if taken) however the block or the taking ends, a KeyboardInterrupt included
        if cache_file is not None and key.id is not None and _env.single_flight():
            lease = Lease(lease_path(cache_file.path, key.id), key.id)
            with contextlib.suppress(OSError):
                lease.acquire()
        yield
    finally:
        if lease is not None:
            lease.release()  # (nothing to do when it was not taken)


class _Flight:
    def __init__(self, cache_file: CacheFile, key_id: str, kernel_name: str, timeout_s: float) -> None:
        self.watcher = _Watcher(cache_file, key_id)
        self.path: Path = lease_path(cache_file.path, key_id)
        self.kernel_name = kernel_name
        self.key_id = key_id
        self.timeout_s = timeout_s

    def _adopted(self, entry: StoredEntry | None, adopt: Adopt) -> Outcome | None:
        if entry is None:
            return None
        outcome = adopt(entry)
        if outcome is None:
            log.info(
                "%s: the stored result for %s does not fit these candidates", self.kernel_name, self.key_id
            )
        return outcome

    def tuned(self, tune: Callable[[], Outcome], adopt: Adopt, keep: Callable[[Outcome], None]) -> Outcome:
        """``tune()``'s outcome, recorded by ``keep``; or, when another process recorded the key
        meanwhile, that result (if it fits), so that both processes launch the same config."""
        outcome = tune()
        recorded = self.watcher.entry(force=True) if outcome.entry is not None else None
        adopted = adopt(recorded) if recorded is not None else None
        if adopted is None:
            keep(outcome)
            return outcome
        log.info(
            "%s: another process recorded key %s while this one tuned it; using its result, not "
            "this one's, so that both launch the same config",
            self.kernel_name,
            self.key_id[:200],
        )
        return adopted

    def _announce_wait(self, holder: LeaseInfo) -> None:
        """Say that this process waits for ``holder``: a warning at the kernel's first wait (a warm-up
        of many keys would otherwise give one per key), then a log record per key, with the count."""
        with _waits_lock:
            _waits[self.kernel_name] += 1
            count = _waits[self.kernel_name]
        args = (self.kernel_name, self.key_id[:200], holder.describe(), self.timeout_s)
        if not warn_once(
            DejavuTuningWarning,
            f"{self.kernel_name}:wait",
            "%s: key %s is being tuned by %s; waiting for its result (at most %g s; waits for "
            "other keys of this kernel are only logged)",
            *args,
        ):
            log.info(
                "%s: key %s is being tuned by %s; waiting for its result (at most %g s; "
                "%d keys of this kernel waited for so far)",
                *args,
                count,
            )

    def run(self, tune: Callable[[], Outcome], adopt: Adopt) -> Outcome:
        lease = Lease(self.path, self.key_id)
        try:
            return self._run(lease, tune, adopt)
        finally:  # after the result is recorded, or when tuning (or a KeyboardInterrupt) ends the run;
            lease.release()  # nothing to do when it was not taken

    def _run(self, lease: Lease, tune: Callable[[], Outcome], adopt: Adopt) -> Outcome:
        announced = False
        start = time.monotonic()
        next_progress = start + PROGRESS_EVERY_S
        poll = 0.02
        while True:
            entry = self.watcher.entry()
            if entry is not None:
                return self._adopted(entry, adopt) or tune()
            try:
                acquired = lease.acquire()
            except OSError as exc:  # a read-only or full store: tune as without a lease
                log.debug("%s: no tuning lease at %s (%s); tuning", self.kernel_name, self.path, exc)
                return tune()
            if acquired:  # (released by run) recorded between our last look and the lease: use it
                return self._adopted(self.watcher.entry(force=True), adopt) or tune()
            holder = read_lease(self.path)
            if holder is None:
                continue  # released just now: look for the result, or take the lease
            if is_stale(holder):
                try:
                    take_over(self.path, holder)
                except OSError as exc:  # a root this process cannot write: tune as without a lease
                    log.debug("%s: cannot take over %s (%s); tuning", self.kernel_name, self.path, exc)
                    return tune()
                continue
            waited = time.monotonic() - start
            if waited > self.timeout_s:
                warn_once(
                    DejavuTuningWarning,
                    f"{self.kernel_name}:{self.key_id}:timeout",
                    "%s: gave up waiting after %.0f s for %s to tune key %s; tuning it here",
                    self.kernel_name,
                    waited,
                    holder.describe(),
                    self.key_id[:200],
                )
                return tune()
            if not announced:
                announced = True
                self._announce_wait(holder)
                if (
                    -holder.age_s() > STALE_AFTER_S
                ):  # its heartbeat cannot age here until this clock catches up
                    warn_once(
                        DejavuTuningWarning,
                        str(self.path),
                        "%s: the tuning lease %s of %s has a heartbeat %.0f s ahead of this host's clock: "
                        "the clocks of the hosts sharing this storage root disagree (synchronise them, "
                        "e.g. NTP); until then a lease of a host that died is not taken over",
                        self.kernel_name,
                        self.path,
                        holder.describe(),
                        -holder.age_s(),
                    )
            if time.monotonic() >= next_progress:
                next_progress += PROGRESS_EVERY_S
                log.info(
                    "%s: still waiting for %s tuning key %s (%.0f s of at most %g s, heartbeat %.0f s ago)",
                    self.kernel_name,
                    holder.describe(),
                    self.key_id[:200],
                    waited,
                    self.timeout_s,
                    holder.age_s(),
                )
            time.sleep(poll)
            poll = min(MAX_POLL_S, poll * 1.5)
