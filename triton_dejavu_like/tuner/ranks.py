"""Ranks tune together: ranks that miss one key split its candidates, and all use one winner.

Enabled with :func:`distributed` (``triton_dejavu_like.distributed(group=None)``, also a context
manager) or ``TRITON_DEJAVU_DISTRIBUTED=1`` (the default group), once ``torch.distributed`` is
initialised. Nothing here is a collective: ranks meet per key in the process group's key-value
store (c10d ``Store``: ``add``/``set``/``wait``/``get``, every wait with a timeout), under a prefix
made of the kernel's storage identity (so the GPU model, the Triton version and the configs), the
key and the candidate set. Ranks that miss different keys never meet; the first to miss a key waits
for the others up to the join window (``TRITON_DEJAVU_JOIN_WINDOW``, :data:`JOIN_WINDOW_S`), which
shrinks to :data:`SHORT_JOIN_WINDOW_S` while no other rank takes part in this rank's keys.

Per key (see docs/consensus.md):

1. *Join.* ``add(joined, 1)`` gives each rank its join order; the first (the leader) waits until
   every rank of the group joined or the join window passed, then closes the group with
   ``add(joined, CLOSED)`` and publishes the number of members and its order of the candidates
   (their positions sorted by config id): every rank puts its candidates in the leader's order, so
   that positions name the same configs on every rank whatever order its list (its prune) has, and
   the numerical check's reference is the leader's first config. A rank that joins after the close
   is not a member: it waits for the decision. A rank left without a decision or without the
   number of members tunes alone, with a warning (its config may differ from the others').
2. *Split.* Member ``j`` of ``m`` measures the candidates ``i`` with ``i % m == j`` (the search
   strategy sees only that share) and publishes their timings, with the reasons of those it ruled
   out (the leader's entry lists every share's best and failures). With the numerical check (and no
   ``reference_fn``), every member first runs the first candidates of the whole list, untimed, until
   one writes (at most :data:`~.tuning.REFERENCE_TRIES`), as a single process does: all members
   compare their shares with one reference, not each with the first of its own share.
3. *Decide.* The leader gathers the timings (the share of a member that does not publish within
   the wait, or fails, is measured by the leader, with a warning naming the member), ranks the
   valid candidates by median, ties by candidate index, re-measures the best :data:`FINALISTS`
   carefully (each of them: no search strategy, no budget), publishes the winner with its stored
   entry, and records the entry.
4. Members wait for the decision and record the leader's entry too (a rank that joined late does the
   same), so that each rank's own storage (node-local by default) holds the group's winner. If the
   leader fails (it publishes an error) or does not answer in time, the first member that delivered
   its share gathers every share published within the wait, picks by the same rule and publishes
   its choice (``backup/j``), which the later members use: they still agree. Nothing is recorded.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .. import _env
from .._compat import Config
from .._log import DejavuTuningWarning, log, warn_once
from ..codec import config_id as codec_config_id
from ..codec import encode_config
from ..measure import one_line_reason
from ..store import InvalidEntry, StoredEntry
from ..store.identity import stable_hash
from .errors import AutotuningError, candidates_failed
from .key import TuningKey
from .tuning import MAX_RULED_OUT, REFERENCE_TRIES, TOP_K, Outcome

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
#: The leader's careful re-measurement covers this many of the best gathered candidates.
FINALISTS = 3
#: Added to the join counter to close a group (no group has this many ranks).
CLOSED = 1 << 40
_PREFIX = "triton_dejavu_like/"

Timings = dict[int, list[float]]


class Measure(Protocol):
    """Measures the given candidates (a subset of the key's) and returns the outcome of that run;
    ``reference``: the configs the numerical check tries first as its reference (untimed);
    ``careful``: the leader's finalists, every one measured (no search strategy, no budget)."""

    def __call__(
        self, subset: list[Config], reference: Sequence[Config] | None = None, *, careful: bool = False
    ) -> Outcome: ...


@dataclass
class _Group:
    group: Any  # a torch.distributed ProcessGroup, or None for the default group


_active: list[_Group] = []


class distributed:  # a lower-case name: it is used like a function, tdl.distributed(group)
    """Ranks of ``group`` (default: the default process group) tune missed keys together.

    ``triton_dejavu_like.distributed()`` enables it for the rest of the program; as a context
    manager (``with triton_dejavu_like.distributed(group): ...``) it is enabled inside the block only.
    """

    def __init__(self, group: Any = None) -> None:
        self._entry = _Group(group)
        _active.append(self._entry)

    def __enter__(self) -> distributed:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._entry in _active:
            _active.remove(self._entry)


def _store_for(group: Any) -> tuple[Any, int] | None:
    """The key-value store to meet in, and the group's size; None when ranks cannot tune together."""
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    if not (dist.is_available() and dist.is_initialized()):
        return None
    size = dist.get_world_size(group)
    if size < 2:
        return None
    store = dist.distributed_c10d._get_default_store()
    if group is not None:
        ranks = ",".join(map(str, dist.get_process_group_ranks(group)))
        store = dist.PrefixStore(f"{_PREFIX}group[{ranks}]/", store)
    return store, size


def _global_rank() -> int | None:
    """This process's rank in the default group (None without torch.distributed)."""
    try:
        import torch.distributed as dist

        return int(dist.get_rank()) if dist.is_available() and dist.is_initialized() else None
    except (ImportError, RuntimeError, ValueError):
        return None


def active_store() -> tuple[Any, int] | None:
    """Where ranks meet for the next miss, or None (not enabled, not initialised, one rank)."""
    if _active:
        return _store_for(_active[-1].group)
    if _env.distributed():
        return _store_for(None)
    return None


class _Company:
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
        window = _configured_window_s()
        return min(window, SHORT_JOIN_WINDOW_S) if self.alone >= ALONE_KEYS else window


def _configured_window_s() -> float:
    configured = _env.join_window_s()
    return JOIN_WINDOW_S if configured is None else configured


_company = _Company()


def _pick(timings: Timings) -> list[int]:
    """Valid candidates best first: lowest median, ties by candidate index."""
    valid = [i for i, t in timings.items() if t and math.isfinite(t[0])]
    return sorted(valid, key=lambda i: (timings[i][0], i))


class _Meeting:
    def __init__(self, store: Any, prefix: str, timeout_s: float) -> None:
        self.store = store
        self.prefix = prefix
        self.timeout_s = timeout_s

    def key(self, name: str) -> str:
        return f"{self.prefix}{name}"

    def publish(self, name: str, value: Any) -> None:
        self.store.set(self.key(name), json.dumps(value))

    def read(self, name: str, timeout_s: float | None = None) -> Any | None:
        """The JSON value published under ``name``, or None after the timeout."""
        wait = self.timeout_s if timeout_s is None else timeout_s
        try:
            self.store.wait([self.key(name)], _dt.timedelta(seconds=wait))
            return json.loads(self.store.get(self.key(name)).decode("utf-8"))
        except (RuntimeError, ValueError) as exc:  # c10d timeouts are RuntimeErrors (DistStoreError)
            log.debug("no %s within %.1f s (%s)", self.key(name), wait, str(exc)[:200])
            return None


@contextlib.contextmanager
def _failure_published(meeting: _Meeting, *names: str) -> Iterator[None]:
    """Publish an error under ``names`` if the block raises, so that no rank waits for us in vain."""
    try:
        yield
    except BaseException as exc:
        for name in names:
            meeting.publish(name, {"error": str(exc)[:300] or type(exc).__name__})
        raise


def _decode_timings(value: Any, n: int) -> Timings:
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


def tune_together(
    meeting_place: tuple[Any, int],
    scope: Any,
    key: TuningKey,
    kernel_name: str,
    candidates: list[Config],
    measure: Measure,
    record: Callable[[Outcome], None],
    timeout_s: float,
    lead: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext,
    config_id: Callable[[Config], str] = codec_config_id,
) -> Outcome:
    """Tune ``key`` with the other ranks that miss it (see the module's description).

    ``scope`` is hashed into the meeting's prefix (the kernel's identity, the key, the candidate set);
    ``measure(subset)`` runs the search over a subset; ``record(outcome)`` stores the group's result
    (the leader's entry, on every rank that uses the decision);
    the leader runs under ``lead()`` (the key's single-flight lease, for processes outside the group);
    ``config_id`` names a config (the ranks' lists hold the same configs, perhaps in other orders).
    """
    store, size = meeting_place
    meeting = _Meeting(store, f"{_PREFIX}{stable_hash(scope)}/", timeout_s)
    tuning = _KeyTuning(
        meeting, key, kernel_name, candidates, measure, record, config_id, time.perf_counter()
    )
    order = int(store.add(meeting.key("joined"), 1)) - 1
    if 0 < order < CLOSED:  # named in the leader's warning if this rank's share does not arrive
        meeting.publish(f"rank/{order}", _global_rank())
    with lead() if order == 0 else contextlib.nullcontext():
        return tuning.run(order, size)


@dataclass
class _KeyTuning:
    """One key this rank tunes with the others: what it needs at every step."""

    meeting: _Meeting
    key: TuningKey
    kernel_name: str
    candidates: list[Config]
    measure: Measure
    record: Callable[[Outcome], None]
    config_id: Callable[[Config], str]
    start: float
    #: The reasons of the candidates ruled out, by position: this rank's, then (leader) the members'
    failures: dict[int, str] = field(default_factory=dict)

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def run(self, order: int, size: int) -> Outcome:
        """As the rank that joined ``order``-th: leader, member, or too late (its decision)."""
        if order != 0:  # a member or a late rank: the ranks miss the same keys
            _company.note(others=True)
        if order >= CLOSED:  # the group closed before we missed the key: use its decision
            return self.late()
        if order == 0:
            members = self.close(size)
        else:
            members = self.join(self.meeting.read("members", _configured_window_s() + MEMBERS_TIMEOUT_S))
            if members is None or not 0 < order < members:
                return self.alone("the group of ranks did not form")
        if members == 1:
            return self.solo()
        return self.share(order, members)

    def join(self, group: Any) -> int | None:
        """The number of members the leader published (None if not valid), and this rank's candidates
        put in the leader's order: ranks whose lists hold the same configs in different orders (a
        prune that returns a set) exchange positions in one list."""
        members = group.get("members") if isinstance(group, dict) else None
        order = group.get("order") if isinstance(group, dict) else None
        n = len(self.candidates)
        if not isinstance(members, int) or isinstance(members, bool) or members < 1:
            return None
        if not isinstance(order, list) or sorted(p for p in order if isinstance(p, int)) != list(range(n)):
            return None
        canonical = self.canonical()
        self.candidates = [canonical[p] for p in order]
        return members

    def canonical(self) -> list[Config]:
        """The candidates in one order on every rank: by config id (the candidate sets are equal)."""
        return sorted(self.candidates, key=self.config_id)

    def alone(self, why: str) -> Outcome:
        warn_once(
            DejavuTuningWarning,
            f"{self.kernel_name}:ranks",
            "%s: %s for key %s; tuning it on this rank alone (ranks may use different configs for it)",
            self.kernel_name,
            why,
            self.key.values,
        )
        outcome = self.measure(self.candidates)
        self.record(outcome)
        return outcome

    def late(self) -> Outcome:
        listed = self.candidates
        joined = self.join(self.meeting.read("members"))
        adopted = self.adopt(self.meeting.read("decision"), {}) if joined is not None else None
        if adopted is not None:
            return adopted
        self.candidates = listed
        return self.alone("no decision of the ranks that tuned it")

    def decide(self, winner: Config, entry: StoredEntry | None, timings: list[float] | None = None) -> None:
        """Publish the decision: the winner, its timings, and the entry to store (every rank that
        uses the decision records it, so each rank's own storage holds it)."""
        decision = {"index": self.candidates.index(winner), "entry": entry.to_json() if entry else None}
        self.meeting.publish("decision", decision if timings is None else {**decision, "timings": timings})

    def adopt(self, decision: Any, own: Timings) -> Outcome | None:
        """The outcome of a published decision, recorded with the leader's entry; None without one."""
        index = _decided(decision, len(self.candidates))
        if index is None:
            return None
        timings = {self.candidates[i]: t for i, t in own.items()}
        outcome = Outcome(self.candidates[index], "tuned", timings, self.elapsed(), self.entry(decision))
        self.record(outcome)
        return outcome

    def entry(self, decision: dict[str, Any]) -> StoredEntry | None:
        """The entry published with a decision (data only, checked), or None."""
        data = decision.get("entry")
        if self.key.id is None or not isinstance(data, dict):
            return None
        try:
            return StoredEntry.from_json(self.key.id, data)
        except InvalidEntry as exc:
            log.debug(
                "%s: the decision's entry for key %s is not valid: %s", self.kernel_name, self.key.id, exc
            )
            return None

    def close(self, size: int) -> int:
        """As the leader: wait for the others to miss the key (until all ranks joined, or the window
        ends), close the group and publish the number of members."""
        store, joined = self.meeting.store, self.meeting.key("joined")
        window_end = time.monotonic() + _company.window_s()
        while int(store.add(joined, 0)) < size and time.monotonic() < window_end:
            time.sleep(0.01)
        members = int(store.add(joined, CLOSED)) - CLOSED
        if members > 1:
            _company.note(others=True)
        position = {id(c): p for p, c in enumerate(self.canonical())}
        self.meeting.publish(
            "members", {"members": members, "order": [position[id(c)] for c in self.candidates]}
        )
        return members

    def solo(self) -> Outcome:
        """No other rank missed the key in time: an ordinary tuning, then the decision."""
        with _failure_published(self.meeting, "decision"):
            outcome = self.measure(self.candidates)
        self.decide(outcome.config, outcome.entry)
        self.record(outcome)
        late = int(self.meeting.store.add(self.meeting.key("joined"), 0)) - CLOSED - 1
        _company.note(others=late > 0)  # ranks that missed the key after the window: they miss ours
        return outcome

    def share(self, order: int, members: int) -> Outcome:
        """Measure this member's share and publish it; then lead, or follow the leader."""
        name = self.kernel_name
        log.debug("%s: key %s: rank %d of %d tuning together", name, self.key.values, order, members)
        with _failure_published(self.meeting, f"timings/{order}", *(["decision"] if order == 0 else [])):
            own, failed = self.measure_shares(members, {order})
        failures = {str(i): r for i, r in self.failures.items()}  # its own only, so far
        self.meeting.publish(
            f"timings/{order}", {"timings": {str(i): t for i, t in own.items()}, "failures": failures}
        )
        if order == 0:
            return self.lead(members, own, failed)
        return self.follow(order, members, own, failed)

    def measure_shares(self, members: int, which: set[int]) -> tuple[Timings, AutotuningError | None]:
        """Measure the shares of the members in ``which``: the timings by position, and the error if
        every candidate failed (raised as its class if no rank has a valid candidate)."""
        candidates = self.candidates
        share = [c for i, c in enumerate(candidates) if i % members in which]
        if not share:
            return {}, None
        position = {id(c): i for i, c in enumerate(candidates)}
        try:
            outcome = self.measure(share, candidates[:REFERENCE_TRIES])
        except AutotuningError as error:  # every candidate of the share failed
            if error.stopped_by is not None:  # an error no candidate escapes ends tuning here
                raise
            failed = {position[id(c)]: [math.inf] for c in share}
            self.failures.update({i: self.failures.get(i, one_line_reason(error)) for i in failed})
            return failed, error
        self.failures.update({position[id(c)]: r for c, r in outcome.failures.items() if id(c) in position})
        return {
            position[id(c)]: list(t) for c, t in outcome.configs_timings.items() if id(c) in position
        }, None

    def lead(self, members: int, own: Timings, failed: AutotuningError | None) -> Outcome:
        """Gather the shares, re-measure the finalists, publish and record the winner."""
        candidates = self.candidates
        with _failure_published(self.meeting, "decision"):
            shares = _gather(self.meeting, len(candidates), members, 0, self.meeting.timeout_s, self.failures)
            missing = set(range(1, members)) - set(shares)
            if missing:  # a member failed or is gone: its share is measured here, so every candidate is
                self.warn_missing(sorted(missing), members)
                taken, _ = self.measure_shares(members, missing)
                shares[-1] = taken
            gathered = _merged(own, shares)
            ranked = _pick(gathered)
            if not ranked:  # raised as this rank's share failed (the first candidate is in it)
                raise candidates_failed(
                    f"{self.kernel_name}: every candidate failed on every rank for key {self.key.values!r}",
                    failed,
                )
            finalists = [candidates[i] for i in ranked[:FINALISTS]]
            careful = self.measure(finalists, careful=True)  # the leader's careful verdict, on every finalist
            winner = candidates.index(careful.config)
        timings = {candidates[i]: t for i, t in gathered.items()}
        timings.update(careful.configs_timings)
        duration = self.elapsed()
        entry = careful.entry
        if entry is not None:
            data = {
                **entry.to_json(),
                "evaluated": len(gathered),
                "space_size": len(candidates),
                "tuning_time_s": round(duration, 6),
                "ranks": members,
                **self.merged_lists(gathered, careful),
            }
            entry = StoredEntry.from_json(entry.key_id, data)
        self.decide(careful.config, entry, gathered[winner])
        outcome = Outcome(careful.config, "tuned", timings, duration, entry)
        self.record(outcome)
        return outcome

    def merged_lists(self, gathered: Timings, careful: Outcome) -> dict[str, Any]:
        """The entry's ``top`` and ``ruled_out`` from every rank's share: the finalists by their careful
        timings first, then the other valid candidates by their medians; the failures every member
        published, with their reasons."""
        refined = sorted(careful.configs_timings.items(), key=lambda item: tuple(item[1]))
        finalists = {id(c) for c, _ in refined}
        screened = [(self.candidates[i], gathered[i]) for i in _pick(gathered)]
        best = [(c, t) for c, t in refined if math.isfinite(t[0])]
        best += [(c, t) for c, t in screened if id(c) not in finalists]
        failures = sorted(self.failures.items())[:MAX_RULED_OUT]
        return {
            "top": [{"config": encode_config(c), "timings_ms": list(t)} for c, t in best[:TOP_K]],
            "ruled_out": [{"config": encode_config(self.candidates[i]), "reason": r} for i, r in failures],
        }

    def warn_missing(self, missing: list[int], members: int) -> None:
        named = []
        for member in missing:
            rank = self.meeting.read(f"rank/{member}", 0.001)
            named.append(f"member {member}" + (f" (rank {rank})" if isinstance(rank, int) else ""))
        warn_once(
            DejavuTuningWarning,
            f"{self.kernel_name}:ranks",
            "%s: %s of the %d ranks tuning key %s together gave no timings within %g s (it failed or "
            "is gone); the leading rank measures its candidates itself",
            self.kernel_name,
            ", ".join(named),
            members,
            self.key.values,
            self.meeting.timeout_s,
        )

    def follow(self, order: int, members: int, own: Timings, failed: AutotuningError | None) -> Outcome:
        """Use the leader's decision; without one, the decision of the first member that delivered
        its share (made from every share it gathers), so that the members still agree."""
        # the leader gathers, then re-measures
        decision = self.meeting.read("decision", 2 * self.meeting.timeout_s)
        adopted = self.adopt(decision, own)
        if adopted is not None:
            return adopted
        why = str(decision.get("error")) if isinstance(decision, dict) else "timed out"
        timeout = self.meeting.timeout_s
        # a leader that failed at once leaves slower members measuring; after 2T, every share is there
        wait = timeout if isinstance(decision, dict) else 0.0
        for member in range(1, order):  # a member before this one decides, unless it failed or is gone
            if not _delivered(self.meeting.read(f"timings/{member}", max(wait, 0.001))):
                continue
            backup = self.meeting.read(f"backup/{member}", wait + timeout)  # it gathers, then decides
            index = _decided(backup, len(self.candidates))
            if index is not None:
                self.warn_without_leader(why, member, backup.get("shares"), members)
                timings = {self.candidates[i]: t for i, t in own.items()}
                return Outcome(self.candidates[index], "tuned", timings, self.elapsed())
        return self.decide_without_leader(order, members, own, failed, why, wait)

    def decide_without_leader(
        self, order: int, members: int, own: Timings, failed: AutotuningError | None, why: str, wait: float
    ) -> Outcome:
        """As the first live member after a failed leader: choose by the leader's rule among every share
        published within ``wait``, and publish the choice for the members after this one."""
        candidates = self.candidates
        with _failure_published(self.meeting, f"backup/{order}"):
            shares = _gather(self.meeting, len(candidates), members, order, wait)
            gathered = _merged(own, shares)
            ranked = _pick(gathered)
            if not ranked:
                message = (
                    f"{self.kernel_name}: no rank measured a valid candidate for key {self.key.values!r}"
                )
                raise candidates_failed(message, failed)  # as this rank's share failed
        used = len(shares) + 1
        self.meeting.publish(f"backup/{order}", {"index": ranked[0], "shares": used})
        self.warn_without_leader(why, order, used, members)
        timings = {candidates[i]: t for i, t in gathered.items()}
        return Outcome(candidates[ranked[0]], "tuned", timings, self.elapsed())

    def warn_without_leader(self, why: str, chooser: int, shares: Any, members: int) -> None:
        warn_once(
            DejavuTuningWarning,
            f"{self.kernel_name}:ranks",
            "%s: the leading rank gave no decision for key %s (%s); member %d of the group chose the "
            "best of the timings of %s of its %d members' shares for all members; not stored",
            self.kernel_name,
            self.key.values,
            why,
            chooser,
            shares,
            members,
        )


def _delivered(value: Any) -> bool:
    """Whether a published share holds timings (not a rank's error)."""
    return isinstance(value, dict) and isinstance(value.get("timings"), dict)


def _merged(own: Timings, shares: dict[int, Timings]) -> Timings:
    gathered = dict(own)
    for timings in shares.values():
        gathered.update(timings)
    return gathered


def _decided(decision: Any, n: int) -> int | None:
    """The winner's index in a published decision (data only, checked), or None."""
    if isinstance(decision, dict):
        index = decision.get("index")
        if isinstance(index, int) and not isinstance(index, bool) and 0 <= index < n:
            return index
    return None


def _gather(
    meeting: _Meeting,
    n: int,
    members: int,
    order: int,
    within_s: float,
    failures: dict[int, str] | None = None,
) -> dict[int, Timings]:
    """The shares the other members (not ``order``) publish within ``within_s`` in all, by member (a
    member that was killed is waited for once, not once per member after it); a member that failed
    or did not publish in time is missing. The reasons of their failures are added to ``failures``."""
    shares: dict[int, Timings] = {}
    deadline = time.monotonic() + within_s
    for member in range(members):
        if member != order:
            value = meeting.read(f"timings/{member}", max(0.001, deadline - time.monotonic()))
            if _delivered(value):
                shares[member] = _decode_timings(value, n)
                if failures is not None:
                    failures.update(_decode_failures(value, n))
    return shares


def _decode_failures(value: dict[str, Any], n: int) -> dict[int, str]:
    """The reasons a member published for the candidates of its share that failed (data only)."""
    published = value.get("failures")
    out: dict[int, str] = {}
    for index, reason in published.items() if isinstance(published, dict) else ():
        if isinstance(index, str) and index.isdigit() and int(index) < n and isinstance(reason, str):
            out[int(index)] = reason[:1000]
    return out
