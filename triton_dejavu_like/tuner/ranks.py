"""Ranks tune together: ranks that miss one key split its candidates, and all use one winner.

Enabled with :func:`distributed` (``triton_dejavu_like.distributed(group=None)``, also a context
manager) or ``TRITON_DEJAVU_DISTRIBUTED=1`` (the default group), once ``torch.distributed`` is
initialised. Nothing here is a collective: ranks meet per key in the process group's key-value
store (c10d ``Store``: ``add``/``set``/``wait``/``get``, every wait with a timeout), under a prefix
made of the kernel's storage identity (so the GPU model, the Triton version and the configs), the
key and the candidate set. Ranks that miss different keys never meet; the first to miss a key waits
for the others up to the join window (``TRITON_DEJAVU_JOIN_WINDOW``,
:data:`~.ranks_meeting.JOIN_WINDOW_S`), which shrinks to :data:`~.ranks_meeting.SHORT_JOIN_WINDOW_S`
while no other rank takes part in this rank's keys.

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
   valid candidates by median, ties by candidate index, re-measures the best
   :data:`~.ranks_key.FINALISTS` carefully (each of them: no search strategy, no budget), publishes
   the winner with its stored entry, and records the entry.
4. Members wait for the decision and record the leader's entry too (a rank that joined late does the
   same), so that each rank's own storage (node-local by default) holds the group's winner. If the
   leader fails (it publishes an error), does not answer in time, or its process is seen gone (it
   ended on this host: every rank publishes its process when it joins, and a rank waiting for
   another stops waiting once that process has ended), the first member that delivered
   its share gathers every share published within the wait, picks by the same rule and publishes
   its choice (``backup/j``), which the later members use: they still agree. Nothing is recorded.
   The leader's decision and a member's choice are settled (``add(settled, 1)``, the first decides):
   a leader that decides after the members chose uses their choice, so all ranks launch one config.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import _env
from .._compat import Config
from ..codec import config_id as codec_config_id
from ..store.identity import stable_hash
from .key import TuningKey
from .ranks_key import KeyTuning, Measure
from .ranks_meeting import CLOSED, PREFIX, Meeting
from .trial import Outcome


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
        store = dist.PrefixStore(f"{PREFIX}group[{ranks}]/", store)
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
    stored: Callable[[], Outcome | None] = lambda: None,
) -> Outcome:
    """Tune ``key`` with the other ranks that miss it (see the module's description).

    ``scope`` is hashed into the meeting's prefix (the kernel's identity, the key, the candidate set);
    ``measure(subset)`` runs the search over a subset; ``record(outcome)`` stores the group's result
    (the leader's entry, on every rank that uses the decision);
    the leader runs under ``lead()`` (the key's single-flight lease, for processes outside the group);
    ``config_id`` names a config (the ranks' lists hold the same configs, perhaps in other orders);
    ``stored()``: what another process recorded for the key since this rank loaded its store, which
    the leader makes the group's decision (None: nothing).
    """
    store, size = meeting_place
    meeting = Meeting(store, f"{PREFIX}{stable_hash(scope)}/", timeout_s)
    tuning = KeyTuning(
        meeting, key, kernel_name, candidates, measure, record, config_id, time.perf_counter(), stored=stored
    )
    order = int(store.add(meeting.key("joined"), 1)) - 1
    if order >= CLOSED:  # late: a member of nobody, nobody waits for it
        return tuning.run(order, size)
    # the others stop waiting for this member once it is gone or silent (named in warnings)
    meeting.introduce(order, _global_rank())
    with meeting.beating(order), lead() if order == 0 else contextlib.nullcontext():
        return tuning.run(order, size)
