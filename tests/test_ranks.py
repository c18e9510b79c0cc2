"""Ranks tune together: 4 gloo ranks under the interpreter split a key's candidates and agree.

Each rank is a separate Python process (``ranks_worker.py``) in one gloo group (``file://``
rendezvous). The ranks meet per key in the group's key-value store; nothing here is a collective
that every rank must enter, so ranks missing different keys and a rank that raises cannot hang the
others (every wait has a timeout; the test's own timeout bounds the whole run).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():  # pragma: no cover
    pytest.skip("torch.distributed is not available", allow_module_level=True)

WORKER = Path(__file__).parent / "ranks_worker.py"
WORLD = 4
N_CONFIGS = 8
TIMEOUT_S = 150


@pytest.fixture(scope="module")
def phases(tmp_path_factory) -> list[dict]:
    """One run of 4 ranks through the three phases of ``ranks_worker.py`` (processes are costly).

    Ranks 0 and 2 enable tuning together with ``triton_dejavu_like.distributed()``, ranks 1 and 3 with
    ``TRITON_DEJAVU_DISTRIBUTED=1``: a rank that did not take part would tune every key alone."""
    tmp_path = tmp_path_factory.mktemp("ranks")
    environ = {
        **os.environ,
        "TRITON_DEJAVU_STORAGE": str(tmp_path / "store"),
        "TRITON_INTERPRET": "1",
        "TRITON_DEJAVU_SINGLE_FLIGHT_TIMEOUT": "20",
    }
    init = tmp_path / "rendezvous"
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(init), str(rank), str(WORLD)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**environ, "TRITON_DEJAVU_DISTRIBUTED": "1" if rank % 2 else "0"},
        )
        for rank in range(WORLD)
    ]
    results = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=TIMEOUT_S)
            assert proc.returncode == 0, err[-3000:]
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for proc in procs:
            proc.kill()
    return sorted(results, key=lambda r: r["rank"])


def test_four_ranks_split_one_key_and_agree(phases):
    results = [r["same"] for r in phases]
    assert len({json.dumps(r["configs"]) for r in results}) == 1  # one winner everywhere
    counts = sorted(r["benchmarks"] for r in results)
    # a quarter each (8 configs / 4 ranks); the leader re-measures up to 3 finalists
    assert counts[:3] == [2, 2, 2] and 2 < counts[3] <= 2 + 3, counts
    assert sum(r["recorded"] for r in results) == 1  # stored once, by the leader
    [leader] = [r for r in results if r["recorded"]]
    assert leader["benchmarks"] == counts[3]


def test_ranks_missing_different_keys_do_not_deadlock(phases):
    results = [r["different"] for r in phases]
    assert all(len(r["configs"]) == 2 for r in results)
    assert len({json.dumps(r["configs"][1]) for r in results}) == 1  # key 700: one winner
    # key 600 + r: each rank alone (8 configs); key 700: measured once in all, split among the
    # ranks that missed it within the join window, plus the leader's finalists
    assert sum(r["benchmarks"] for r in results) - WORLD * N_CONFIGS <= N_CONFIGS + 3
    assert sum(r["recorded"] for r in results) == WORLD + 1


def test_every_candidate_failing_on_every_rank_raises_the_candidates_error_class(phases):
    """On each rank, as without ranks: an AutotuningError that is also the candidates' error."""
    assert [r["fail"]["raised"] for r in phases] == [["OutOfResources", "AutotuningError"]] * WORLD


def test_a_broken_hook_ends_tuning_on_each_rank_at_its_first_candidate(phases):
    """An error no candidate escapes is raised as without ranks, after one benchmark per rank (not
    the rank's share, nor a second meeting's re-measurement)."""
    for result in (r["hook"] for r in phases):
        assert result["stopped_by"] == "pre_hook" and result["benchmarks"] == 1
        assert "tuning stopped at the first candidate" in result["raised"]


def test_a_rank_that_raises_does_not_hang_the_others(phases):
    results = [r["raise"] for r in phases]
    assert results[2]["raised"] and results[2]["configs"] == []
    others = [r for i, r in enumerate(results) if i != 2]
    assert all(not r["raised"] and len(r["configs"]) == 1 for r in others)
    assert len({json.dumps(r["configs"]) for r in others}) == 1


def test_a_rank_that_joins_after_the_group_decided_nothing_tunes_alone_and_says_so():
    """A rank that missed the key after the group closed and finds no decision (the leader died)
    tunes alone: its config may differ from the other ranks', which the user must hear of."""
    import triton

    from triton_dejavu_like import DejavuTuningWarning
    from triton_dejavu_like.tuner import ranks
    from triton_dejavu_like.tuner.key import TuningKey
    from triton_dejavu_like.tuner.tuning import Outcome

    store = dist.HashStore()
    candidates = [triton.Config({"BLOCK": b}) for b in (16, 32)]
    scope = ["kernel", "key"]
    store.add(f"{ranks._PREFIX}{ranks.stable_hash(scope)}/joined", ranks.CLOSED)  # closed, no decision
    recorded = []
    with pytest.warns(DejavuTuningWarning, match="on this rank alone"):
        outcome = ranks.tune_together(
            (store, 2),
            scope,
            TuningKey.of((64,)),
            "add_kernel",
            candidates,
            lambda subset: Outcome(subset[1], "tuned"),
            recorded.append,
            0.2,
        )
    assert outcome.config is candidates[1] and recorded == [outcome]
