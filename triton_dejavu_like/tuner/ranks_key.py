"""One key that this rank tunes with the others: join, split, decide, follow (see :mod:`.ranks`)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .._compat import Config
from .._log import log
from ..codec import encode_config
from ..measure import one_line_reason
from ..store import InvalidEntry, StoredEntry
from . import ranks_warnings
from .errors import AutotuningError, candidates_failed
from .key import TuningKey
from .ranks_meeting import (
    CLOSED,
    MEMBERS_TIMEOUT_S,
    Meeting,
    Timings,
    company,
    configured_window_s,
    decided,
    delivered,
    failure_published,
    gather,
    merged,
    pick,
)
from .trial import Outcome
from .tuning import MAX_RULED_OUT, REFERENCE_TRIES, TOP_K

#: The leader's careful re-measurement covers this many of the best gathered candidates.
FINALISTS = 3


class Measure(Protocol):
    """Measures the given candidates (a subset of the key's) and returns the outcome of that run;
    ``reference``: the configs the numerical check tries first as its reference (untimed);
    ``careful``: the leader's finalists, every one measured (no search strategy, no budget)."""

    def __call__(
        self, subset: list[Config], reference: Sequence[Config] | None = None, *, careful: bool = False
    ) -> Outcome: ...


@dataclass
class KeyTuning:
    """One key this rank tunes with the others: what it needs at every step."""

    meeting: Meeting
    key: TuningKey
    kernel_name: str
    candidates: list[Config]
    measure: Measure
    record: Callable[[Outcome], None]
    config_id: Callable[[Config], str]
    start: float
    #: The reasons of the candidates ruled out, by position: this rank's, then (leader) the members'
    failures: dict[int, str] = field(default_factory=dict)
    #: What another process recorded for the key since this rank loaded its store (None: nothing)
    stored: Callable[[], Outcome | None] = lambda: None

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def run(self, order: int, size: int) -> Outcome:
        """As the rank that joined ``order``-th: leader, member, or too late (its decision)."""
        if order != 0:  # a member or a late rank: the ranks miss the same keys
            company.note(others=True)
        if order >= CLOSED:  # the group closed before we missed the key: use its decision
            return self.late()
        if order == 0:
            members, found = self.close(size)
            if found is not None:
                return found
        else:
            members = self.join(
                self.meeting.read("members", configured_window_s() + MEMBERS_TIMEOUT_S, publisher=0)
            )
            if members is None:
                return self.alone("the group of ranks did not form")
            if not 0 < order < members:  # the leader found the key recorded: its decision
                return self.late()
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
        ranks_warnings.tuning_alone(self.kernel_name, self.key.values, why)
        outcome = self.measure(self.candidates)
        self.record(outcome)
        return outcome

    def late(self) -> Outcome:
        listed = self.candidates
        joined = self.join(self.meeting.read("members", publisher=0))
        adopted = self.adopt(self.meeting.read("decision", publisher=0), {}) if joined is not None else None
        if adopted is not None:
            return adopted
        self.candidates = listed
        return self.alone("no decision of the ranks that tuned it")

    def decision(
        self, winner: Config, entry: StoredEntry | None, timings: list[float] | None = None
    ) -> dict[str, Any]:
        """The leader's decision: the winner, its timings, and the entry to store (every rank that
        uses the decision records it, so each rank's own storage holds it)."""
        decision = {"index": self.candidates.index(winner), "entry": entry.to_json() if entry else None}
        return decision if timings is None else {**decision, "timings": timings}

    def settle(self, choice: dict[str, Any]) -> Any:
        """Make ``choice`` (the leader's decision, or a member's choice without it) the group's, unless
        another rank settled one first: of a leader that decides late and the member that chose after
        the members' wait for it ran out, the first to settle decides for every member. Returns
        ``choice`` itself if it is the group's, else the one settled before."""
        if int(self.meeting.store.add(self.meeting.key("settled"), 1)) == 1:
            self.meeting.publish("final", choice)
            return choice
        final = self.meeting.read("final")
        return final if decided(final, len(self.candidates)) is not None else choice

    def by_config(self, timings: Timings) -> dict[Config, list[float]]:
        """Timings by position, as an outcome holds them: by config."""
        return {self.candidates[i]: t for i, t in timings.items()}

    def ranked(self, gathered: Timings, failed: AutotuningError | None, none_valid: str) -> list[int]:
        """The valid candidates best first (:func:`pick`); none: ``none_valid`` raised as the class of
        this rank's own failure."""
        ranked = pick(gathered)
        if not ranked:
            raise candidates_failed(f"{self.kernel_name}: {none_valid} for key {self.key.values!r}", failed)
        return ranked

    def adopt(self, decision: Any, own: Timings) -> Outcome | None:
        """The outcome of a published decision, recorded with the leader's entry; None without one."""
        index = decided(decision, len(self.candidates))
        if index is None:
            return None
        outcome = Outcome(
            self.candidates[index], "tuned", self.by_config(own), self.elapsed(), self.entry(decision)
        )
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

    def close(self, size: int) -> tuple[int, Outcome | None]:
        """As the leader: wait for the others to miss the key (until all ranks joined, or the window
        ends), close the group and publish the number of members. If another process recorded the
        key (before the window or during it), that is the decision, with no members: the ranks that
        joined use it as late ranks do (a rank that restored it itself launches it too). Returns the
        number of members and that outcome (None: the group tunes the key)."""
        store, joined = self.meeting.store, self.meeting.key("joined")
        found = self.stored()
        window_end = time.monotonic() + (0.0 if found is not None else company.window_s())
        while int(store.add(joined, 0)) < size and time.monotonic() < window_end:
            time.sleep(0.01)
        members = int(store.add(joined, CLOSED)) - CLOSED
        if members > 1:
            company.note(others=True)
        found = found or self.stored()
        position = {id(c): p for p, c in enumerate(self.canonical())}
        order = [position[id(c)] for c in self.candidates]
        self.meeting.publish("members", {"members": 1 if found else members, "order": order})
        if found is not None:
            self.meeting.publish("decision", self.decision(found.config, found.entry))
        return members, found

    def solo(self) -> Outcome:
        """No other rank missed the key in time: an ordinary tuning, then the decision."""
        with failure_published(self.meeting, "decision"):
            outcome = self.measure(self.candidates)
        self.meeting.publish("decision", self.decision(outcome.config, outcome.entry))
        self.record(outcome)
        late = int(self.meeting.store.add(self.meeting.key("joined"), 0)) - CLOSED - 1
        company.note(others=late > 0)  # ranks that missed the key after the window: they miss ours
        return outcome

    def share(self, order: int, members: int) -> Outcome:
        """Measure this member's share and publish it; then lead, or follow the leader."""
        name = self.kernel_name
        log.debug("%s: key %s: rank %d of %d tuning together", name, self.key.values, order, members)
        with failure_published(self.meeting, f"timings/{order}", *(["decision"] if order == 0 else [])):
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
        with failure_published(self.meeting, "decision"):
            shares = gather(self.meeting, len(candidates), members, 0, self.meeting.timeout_s, self.failures)
            missing = set(range(1, members)) - set(shares)
            if missing:  # a member failed or is gone: its share is measured here, so every candidate is
                ranks_warnings.shares_missing(
                    self.kernel_name,
                    self.key.values,
                    self.named(sorted(missing)),
                    members,
                    self.meeting.timeout_s,
                )
                taken, _ = self.measure_shares(members, missing)
                shares[-1] = taken
            gathered = merged(own, shares)
            # raised as this rank's share failed (the first candidate is in it)
            ranked = self.ranked(gathered, failed, "every candidate failed on every rank")
            finalists = [candidates[i] for i in ranked[:FINALISTS]]
            careful = self.measure(finalists, careful=True)  # the leader's careful verdict, on every finalist
            winner = candidates.index(careful.config)
        timings = {**self.by_config(gathered), **careful.configs_timings}
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
        decision = self.decision(careful.config, entry, gathered[winner])
        final = self.settle(decision)
        if final is not decision:  # the members chose without it: their choice, stored nowhere
            ranks_warnings.overtaken(
                self.kernel_name, self.key.values, 2 * self.meeting.timeout_s, careful.config, final
            )
            return Outcome(candidates[decided(final, len(candidates)) or 0], "tuned", timings, duration)
        self.meeting.publish("decision", decision)
        outcome = Outcome(careful.config, "tuned", timings, duration, entry)
        self.record(outcome)
        return outcome

    def merged_lists(self, gathered: Timings, careful: Outcome) -> dict[str, Any]:
        """The entry's ``top`` and ``ruled_out`` from every rank's share: the finalists by their careful
        timings first, then the other valid candidates by their medians; the failures every member
        published, with their reasons."""
        refined = sorted(careful.configs_timings.items(), key=lambda item: tuple(item[1]))
        finalists = {id(c) for c, _ in refined}
        screened = [(self.candidates[i], gathered[i]) for i in pick(gathered)]
        best = [(c, t) for c, t in refined if math.isfinite(t[0])]
        best += [(c, t) for c, t in screened if id(c) not in finalists]
        failures = sorted(self.failures.items())[:MAX_RULED_OUT]
        return {
            "top": [{"config": encode_config(c), "timings_ms": list(t)} for c, t in best[:TOP_K]],
            "ruled_out": [{"config": encode_config(self.candidates[i]), "reason": r} for i, r in failures],
        }

    def named(self, members: list[int]) -> list[str]:
        """``members`` as a warning names them: with their global rank where they published it."""
        named = []
        for member in members:
            rank = (self.meeting.process(member) or {}).get("rank")
            named.append(f"member {member}" + (f" (rank {rank})" if isinstance(rank, int) else ""))
        return named

    def follow(self, order: int, members: int, own: Timings, failed: AutotuningError | None) -> Outcome:
        """Use the leader's decision; without one, the decision of the first member that delivered
        its share (made from every share it gathers), so that the members still agree."""
        # the leader gathers, then re-measures (a leader seen gone is not waited for)
        decision = self.meeting.read("decision", 2 * self.meeting.timeout_s, publisher=0)
        adopted = self.adopt(decision, own)
        if adopted is not None:
            return adopted
        gone = self.meeting.gone(0) if decision is None else None
        why = str(decision.get("error")) if isinstance(decision, dict) else "timed out"
        why = f"its process, {gone}, is gone" if gone else why
        timeout = self.meeting.timeout_s
        # a leader that failed (or ended) at once leaves slower members measuring; after 2T, every
        # share is there
        wait = timeout if isinstance(decision, dict) or gone else 0.0
        for member in range(1, order):  # a member before this one decides, unless it failed or is gone
            if not delivered(self.meeting.read(f"timings/{member}", max(wait, 0.001), publisher=member)):
                continue
            # it gathers, then decides
            backup = self.meeting.read(f"backup/{member}", wait + timeout, publisher=member)
            if decided(backup, len(self.candidates)) is not None:
                return self.use(backup, own, why, member, members)
        return self.decide_without_leader(order, members, own, failed, why, wait)

    def use(self, final: dict[str, Any], own: Timings, why: str, chooser: int, members: int) -> Outcome:
        """The group's settled choice: the leader's decision (recorded with its entry), or a member's
        choice without it (stored nowhere)."""
        if "shares" not in final:  # the leader's, settled before the member's choice
            adopted = self.adopt(final, own)
            if adopted is not None:
                return adopted
        ranks_warnings.without_leader(
            self.kernel_name, self.key.values, why, final.get("by", chooser), final.get("shares"), members
        )
        index = decided(final, len(self.candidates)) or 0
        return Outcome(self.candidates[index], "tuned", self.by_config(own), self.elapsed())

    def decide_without_leader(
        self, order: int, members: int, own: Timings, failed: AutotuningError | None, why: str, wait: float
    ) -> Outcome:
        """As the first live member after a failed leader: choose by the leader's rule among every share
        published within ``wait``, and publish the choice for the members after this one."""
        candidates = self.candidates
        with failure_published(self.meeting, f"backup/{order}"):
            shares = gather(self.meeting, len(candidates), members, order, wait)
            gathered = merged(own, shares)
            # raised as this rank's share failed
            ranked = self.ranked(gathered, failed, "no rank measured a valid candidate")
        choice = {"index": ranked[0], "shares": len(shares) + 1, "by": order}
        final = self.settle(choice)  # the leader's decision, if it came meanwhile, or an earlier member's
        self.meeting.publish(f"backup/{order}", final)
        return self.use(final, gathered, why, order, members)
