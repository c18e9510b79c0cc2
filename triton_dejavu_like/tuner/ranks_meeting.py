"""How ranks meet for one key: the key-value store they publish in (every wait with a timeout), the
join window, and reading what other ranks published (data only, checked). See :mod:`.ranks`."""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import math
import threading
import time
from collections.abc import Iterator
from typing import Any

from .. import _env
from .._log import log
from ..store.lease import STALE_AFTER_S, process_gone, this_process

#: Seconds the first rank to miss a key waits for others to miss it too (default of
#: ``TRITON_DEJAVU_JOIN_WINDOW``). A rank that misses it later is late and uses the group's decision:
#: the window decides how the work is shared, not whether ranks agree.
JOIN_WINDOW_S = 2.0
#: After this many consecutive keys that nobody else missed with this process (rank-specific keys),
#: the window is :data:`SHORT_JOIN_WINDOW_S`, until another rank takes part in a key again.
ALONE_KEYS = 3
SHORT_JOIN_WINDOW_S = 0.05
#: How long a member waits for the leader to close the group (beyond the join window).
MEMBERS_TIMEOUT_S = 60.0
#: Added to the join counter to close a group (no group has this many ranks).
CLOSED = 1 << 40
PREFIX = "triton_dejavu_like/"
#: While a rank waits for what another member publishes, it looks this often whether that member's
#: process is gone (on this host, in this pid namespace), so as not to wait out the timeout for it.
GONE_CHECK_S = 1.0
#: Each rank adds 1 to its heartbeat counter in the store this often while it tunes a key with others.
BEAT_S = 1.0
#: A member whose heartbeat counter did not move for this long is taken as gone, wherever it runs
#: (another host, where its pid cannot be looked up; or stopped with SIGSTOP), as a single-flight
#: lease of another host is.
SILENT_AFTER_S = STALE_AFTER_S

Timings = dict[int, list[float]]


class Company:
    """How many consecutive keys this process tuned with no other rank taking part (as a member, or
    late): after :data:`ALONE_KEYS`, ranks are missing different keys, and waiting the whole join
    window for each would cost seconds per key."""

    def __init__(self) -> None:
        self.alone = 0
        self._lock = threading.Lock()

    def note(self, others: bool) -> None:
        with self._lock:
            self.alone = 0 if others else self.alone + 1

    def window_s(self) -> float:
        """The join window for the next key this process leads."""
        window = configured_window_s()
        return min(window, SHORT_JOIN_WINDOW_S) if self.alone >= ALONE_KEYS else window


def configured_window_s() -> float:
    configured = _env.join_window_s()
    return JOIN_WINDOW_S if configured is None else configured


company = Company()


def pick(timings: Timings) -> list[int]:
    """Valid candidates best first: lowest median, ties by candidate index."""
    valid = [i for i, t in timings.items() if t and math.isfinite(t[0])]
    return sorted(valid, key=lambda i: (timings[i][0], i))


class Meeting:
    def __init__(self, store: Any, prefix: str, timeout_s: float) -> None:
        self.store = store
        self.prefix = prefix
        self.timeout_s = timeout_s
        self._processes: dict[int, dict[str, Any]] = {}  # the members' processes, as published
        #: member -> (its heartbeat count, when this process saw that count first: its own clock)
        self._beats: dict[int, tuple[int, float]] = {}

    def key(self, name: str) -> str:
        return f"{self.prefix}{name}"

    def publish(self, name: str, value: Any) -> None:
        self.store.set(self.key(name), json.dumps(value))

    def introduce(self, order: int, rank: int | None) -> None:
        """Publish this process (host, pid, pid namespace) and its global rank as member ``order``:
        the others stop waiting for what it would publish once they see it is gone."""
        self.publish(f"process/{order}", {**this_process(), "rank": rank})

    @contextlib.contextmanager
    def beating(self, order: int) -> Iterator[None]:
        """Add 1 to member ``order``'s heartbeat counter every :data:`BEAT_S` while the block runs: the
        others see it is alive where they cannot look its pid up (see :meth:`gone`)."""
        stop = threading.Event()
        name = self.key(f"beat/{order}")

        def beat() -> None:
            while not stop.wait(BEAT_S):
                try:
                    self.store.add(name, 1)
                except RuntimeError as exc:  # the store went away (the job ends): stop beating
                    log.debug("heartbeat %s stopped: %s", name, str(exc)[:200])
                    return

        thread = threading.Thread(target=beat, name=f"triton_dejavu_like-beat-{order}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=2 * BEAT_S)

    def process(self, member: int) -> dict[str, Any] | None:
        """What member ``member`` published of its process (None: nothing yet, or not valid)."""
        if member not in self._processes:
            name = f"process/{member}"
            value = self._value(name) if self.store.check([self.key(name)]) else None
            if not isinstance(value, dict):
                return None
            self._processes[member] = value
        return self._processes[member]

    def gone(self, member: int) -> str | None:
        """How member ``member`` is known to have ended ("pid P on HOST"), or to be silent ("pid P on
        HOST, no heartbeat for S s": its counter did not move for :data:`SILENT_AFTER_S`, as seen by
        this process, which looks at it each time it asks), or None: it runs, or has not said who it
        is yet."""
        named = self.process(member) or {}
        host, pid, namespace = named.get("host"), named.get("pid"), named.get("pid_namespace", "")
        if not (isinstance(host, str) and type(pid) is int and isinstance(namespace, str)):
            return None
        if process_gone(host, pid, namespace):
            return f"pid {pid} on {host}"
        silent = self._silent_s(member)
        return f"pid {pid} on {host}, no heartbeat for {silent:.0f} s" if silent is not None else None

    def _silent_s(self, member: int) -> float | None:
        """How long member ``member``'s heartbeat counter has not moved, once that is
        :data:`SILENT_AFTER_S` or more; else None."""
        try:
            count = int(self.store.add(self.key(f"beat/{member}"), 0))  # adding 0 reads it
        except (RuntimeError, ValueError):
            return None
        now = time.monotonic()
        seen = self._beats.get(member)
        if seen is None or seen[0] != count:
            self._beats[member] = (count, now)
            return None
        return now - seen[1] if now - seen[1] >= SILENT_AFTER_S else None

    def read(self, name: str, timeout_s: float | None = None, *, publisher: int | None = None) -> Any | None:
        """The JSON value published under ``name``, or None after the timeout, or as soon as the
        member ``publisher`` (who would publish it) is known to be gone (checked every
        :data:`GONE_CHECK_S`)."""
        wait = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + wait
        gone = False  # once it is, one last look: it may have published just before it ended
        while not self._waited(name, time.monotonic() if gone else deadline):
            if gone or deadline <= time.monotonic():
                log.debug("no %s within %.1f s", self.key(name), wait)
                return None
            gone = publisher is not None and self.gone(publisher) is not None
        return self._value(name)

    def _value(self, name: str) -> Any | None:
        """The JSON value published under ``name`` (there), or None if it is not valid."""
        try:
            return json.loads(self.store.get(self.key(name)).decode("utf-8"))
        except (RuntimeError, ValueError) as exc:
            log.debug("%s is not valid (%s)", self.key(name), str(exc)[:200])
            return None

    def _waited(self, name: str, deadline: float) -> bool:
        """Whether ``name`` was published by the deadline, or within the next :data:`GONE_CHECK_S`."""
        # never long in one call: a store's client may serve one call at a time, and this rank's
        # heartbeat (another thread) must not wait behind a long wait
        seconds = min(deadline - time.monotonic(), GONE_CHECK_S)
        try:
            self.store.wait([self.key(name)], _dt.timedelta(seconds=max(0.001, seconds)))
        except RuntimeError:  # c10d timeouts are RuntimeErrors (DistStoreError)
            return False
        return True


@contextlib.contextmanager
def failure_published(meeting: Meeting, *names: str) -> Iterator[None]:
    """Publish an error under ``names`` if the block raises, so that no rank waits for us in vain."""
    try:
        yield
    except BaseException as exc:
        for name in names:
            meeting.publish(name, {"error": str(exc)[:300] or type(exc).__name__})
        raise


def decode_timings(value: Any, n: int) -> Timings:
    """Timings a rank published: {index: [ms, ...] or null} (data only, checked)."""
    out: Timings = {}
    if not isinstance(value, dict) or not isinstance(value.get("timings"), dict):
        return out
    for index, times in value["timings"].items():
        try:
            i = int(index)
            ms = [float(t) for t in times] if times is not None else [math.inf]
        except (TypeError, ValueError):
            continue
        if 0 <= i < n and ms:
            out[i] = ms
    return out


def delivered(value: Any) -> bool:
    """Whether a published share holds timings (not a rank's error)."""
    return isinstance(value, dict) and isinstance(value.get("timings"), dict)


def merged(own: Timings, shares: dict[int, Timings]) -> Timings:
    gathered = dict(own)
    for timings in shares.values():
        gathered.update(timings)
    return gathered


def decided(decision: Any, n: int) -> int | None:
    """The winner's index in a published decision (data only, checked), or None."""
    if isinstance(decision, dict):
        index = decision.get("index")
        if isinstance(index, int) and not isinstance(index, bool) and 0 <= index < n:
            return index
    return None


def gather(
    meeting: Meeting,
    n: int,
    members: int,
    order: int,
    within_s: float,
    failures: dict[int, str] | None = None,
) -> dict[int, Timings]:
    """The shares the other members (not ``order``) publish within ``within_s`` in all, by member (a
    member that was killed is waited for once, not once per member after it, and not at all once it
    is seen gone); a member that failed or did not publish in time is missing. The reasons of their
    failures are added to ``failures``."""
    shares: dict[int, Timings] = {}
    deadline = time.monotonic() + within_s
    for member in range(members):
        if member != order:
            value = meeting.read(
                f"timings/{member}", max(0.001, deadline - time.monotonic()), publisher=member
            )
            if delivered(value):
                shares[member] = decode_timings(value, n)
                if failures is not None:
                    failures.update(decode_failures(value, n))
    return shares


def decode_failures(value: dict[str, Any], n: int) -> dict[int, str]:
    """The reasons a member published for the candidates of its share that failed (data only)."""
    published = value.get("failures")
    out: dict[int, str] = {}
    for index, reason in published.items() if isinstance(published, dict) else ():
        if isinstance(index, str) and index.isdigit() and int(index) < n and isinstance(reason, str):
            out[int(index)] = reason[:1000]
    return out
