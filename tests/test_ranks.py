"""Ranks tune together: 4 gloo ranks under the interpreter split a key's candidates and agree.

Each rank is a separate Python process (``ranks_worker.py``) in one gloo group (``file://``
rendezvous). The ranks meet per key in the group's key-value store; nothing here is a collective
that every rank must enter, so ranks missing different keys and a rank that raises cannot hang the
others (every wait has a timeout; the test's own timeout bounds the whole run).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
import triton
from kernels import RIGHT, SKIP, WRONG, FakeBench, double_or_not_kernel, grid

import triton_dejavu_like as tdl
from triton_dejavu_like.codec import config_id
from triton_dejavu_like.store import StoredEntry
from triton_dejavu_like.store.identity import stable_hash
from triton_dejavu_like.store.lease import this_process
from triton_dejavu_like.tuner import ranks, ranks_key, ranks_meeting
from triton_dejavu_like.tuner.key import TuningKey
from triton_dejavu_like.tuner.trial import Outcome

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():  # pragma: no cover
    pytest.skip("torch.distributed is not available", allow_module_level=True)

WORKER = Path(__file__).parent / "ranks_worker.py"
WORLD = 4
N_CONFIGS = 8
TIMEOUT_S = 150
WRONG_BLOCKS = (32, 64, 128)  # ranks_worker.WRONG_BLOCKS: configs 1, 2 and 3 compute a wrong result


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


@pytest.mark.filterwarnings("ignore::triton_dejavu_like.DejavuTuningWarning")
def test_ranks_whose_leader_is_killed_agree_without_waiting_out_its_timeout(tmp_path):
    """3 ranks; the leader is SIGKILLed in its share. The members, on its host, see its process gone
    and agree on one config without waiting 2T for its decision (T = 600 s here: the test gives them
    150 s)."""
    environ = {
        **os.environ,
        "TRITON_DEJAVU_STORAGE": str(tmp_path / "store"),
        "TRITON_INTERPRET": "1",
        "TRITON_DEJAVU_SINGLE_FLIGHT_TIMEOUT": "600",
        "TRITON_DEJAVU_JOIN_WINDOW": "20",  # closed as soon as all 3 joined
    }
    command = [sys.executable, str(WORKER), str(tmp_path / "rendezvous")]
    procs = [
        subprocess.Popen(
            [*command, str(rank), "3", "killed_leader"], stdout=subprocess.PIPE, text=True, env=environ
        )
        for rank in range(3)
    ]
    try:
        outputs = [proc.communicate(timeout=TIMEOUT_S)[0] for proc in procs]
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    assert [proc.returncode for proc in procs] == [-9, 0, 0]
    configs = [json.loads(out.strip().splitlines()[-1])["killed_leader"]["config"] for out in outputs[1:]]
    assert configs[0] == configs[1]


def test_four_ranks_split_one_key_and_agree(phases):
    results = [r["same"] for r in phases]
    assert len({json.dumps(r["configs"]) for r in results}) == 1  # one winner everywhere
    counts = sorted(r["benchmarks"] for r in results)
    # a quarter each (8 configs / 4 ranks); the leader re-measures up to 3 finalists
    assert counts[:3] == [2, 2, 2] and 2 < counts[3] <= 2 + 3, counts
    # every rank records the leader's entry (node-local storage); here all share one file
    assert [len(r["entries"]) for r in results] == [1] * WORLD
    assert len({json.dumps(r["entries"]) for r in results}) == 1


def test_ranks_missing_different_keys_do_not_deadlock(phases):
    results = [r["different"] for r in phases]
    assert all(len(r["configs"]) == 2 for r in results)
    assert len({json.dumps(r["configs"][1]) for r in results}) == 1  # key 700: one winner
    # key 600 + r: each rank alone (8 configs); key 700: measured once in all, split among the
    # ranks that missed it within the join window, plus the leader's finalists
    assert sum(r["benchmarks"] for r in results) - WORLD * N_CONFIGS <= N_CONFIGS + 3
    assert sum(r["recorded"] for r in results) == 2 * WORLD  # the ranks that adopt key 700 record it too
    assert len({json.dumps(r["entries"][1]) for r in results}) == 1


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


def test_every_rank_checks_its_share_against_the_first_config_of_the_whole_list(phases):
    """The numerical check's reference is the config a single process would take (the first of the
    list, which is right), on every rank: not the first of the rank's own share, which is wrong on
    the three other members. Each rank rules out the wrong configs it measured and keeps the right
    ones; all agree on the fastest right config. The reference costs each rank one untimed launch."""
    results = [r["check"] for r in phases]
    assert [r["config"] for r in results] == [[2048, RIGHT]] * WORLD
    assert all(r["correct"] for r in results)
    for result in results:
        assert result["valid"] == {b: int(b) not in WRONG_BLOCKS for b in result["valid"]}, result
    assert [r["recorded"] for r in results] == [1] * WORLD
    followers = [r for r in results if r["benchmarks"] == 1]  # the leader re-measures its finalists
    assert len(followers) == WORLD - 1
    # each measured one wrong config (checked, not timed) and one right one (checked and timed)
    assert [(r["benchmarks"], r["launches"]) for r in followers] == [(1, 1 + 2 + 1)] * (WORLD - 1)


def test_a_rank_that_joins_after_the_group_decided_nothing_tunes_alone_and_says_so():
    """A rank that missed the key after the group closed and finds no decision (the leader died)
    tunes alone: its config may differ from the other ranks', which the user must hear of."""
    import triton

    from triton_dejavu_like import DejavuTuningWarning
    from triton_dejavu_like.tuner.key import TuningKey
    from triton_dejavu_like.tuner.trial import Outcome

    store = dist.HashStore()
    candidates = [triton.Config({"BLOCK": b}) for b in (16, 32)]
    scope = ["kernel", "key"]
    closed = ranks_meeting.CLOSED  # closed, no decision
    store.add(f"{ranks_meeting.PREFIX}{stable_hash(scope)}/joined", closed)
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


# --- one member of a group, in this process ----------------------------------------------------------


def leader_order(configs: list[triton.Config]) -> list[int]:
    """The order the leader publishes for ``configs``: their positions among them sorted by id."""
    canonical = sorted(configs, key=config_id)
    return [next(p for p, c in enumerate(canonical) if c is config) for config in configs]


class LastMember:
    """The c10d store as the last member of a group of ``members`` finds it: the others joined before
    it, and the leader (whose list is ``configs``) published the number of members, its order of
    the candidates and its decision (candidate ``decision``)."""

    def __init__(self, members: int, decision: int, configs: list[triton.Config]) -> None:
        self.store = dist.HashStore()
        self.members, self.decision, self.order = members, decision, leader_order(configs)
        self.joined: set[str] = set()

    def add(self, key: str, amount: int) -> int:
        if key.endswith("/joined") and key not in self.joined:
            self.joined.add(key)
            prefix = key.removesuffix("joined")
            self.store.add(key, self.members - 1)
            self.store.set(f"{prefix}members", json.dumps({"members": self.members, "order": self.order}))
            self.store.set(f"{prefix}decision", json.dumps({"index": self.decision}))
        return self.store.add(key, amount)

    def __getattr__(self, name: str):  # set, get, wait
        return getattr(self.store, name)


def fails(nargs):
    raise RuntimeError("this config cannot run")


def crashes(nargs):
    os._exit(4)


def checked_as_member_2_of_3(monkeypatch, modes, isolated, **options):
    """Tune ``double_or_not_kernel`` with the numerical check, as member 2 of 3: its share is configs
    2, 5 and 8. Config i has BLOCK 2**(4+i) and MODE modes[i], or, where modes[i] is a function, MODE
    RIGHT and that function as its pre_hook. Whether each config of the share was valid, and the
    tuner's launches (its pre_hook's calls, in this process)."""
    hooks = [mode if callable(mode) else None for mode in modes]
    configs = [
        triton.Config({"BLOCK": 2 ** (4 + i), "MODE": RIGHT if hook else mode}, pre_hook=hook)
        for i, (mode, hook) in enumerate(zip(modes, hooks))
    ]
    bench = FakeBench({c.kwargs["BLOCK"]: 0.5 if c.kwargs["MODE"] == WRONG else 1.0 for c in configs})
    launches = []

    def pre_hook(nargs, reset_only=False):
        if not reset_only:
            bench.current_block = nargs["BLOCK"]
            launches.append(nargs["BLOCK"])

    options.setdefault("pre_hook", pre_hook)
    tuner = tdl.autotune(
        configs=configs,
        key=["n"],
        do_bench=bench,
        numerical_check=True,
        use_isolated_process=isolated,
        **options,
    )(double_or_not_kernel)
    monkeypatch.setattr(ranks, "active_store", lambda: (LastMember(3, decision=3, configs=configs), 3))
    n = 100
    x, out = torch.arange(n, dtype=torch.float32), torch.zeros(n)
    tuner[grid(n)](x, out, n)
    assert tuner.best_config is configs[3] and torch.equal(out, 2 * x)  # the leader's decision
    valid = {c.kwargs["BLOCK"]: math.isfinite(t[0]) for c, t in tuner.configs_timings.items()}
    return valid, launches


class FirstOfTwo:
    """The c10d store as the leader of a group of two finds it: the other rank joins right after it
    and publishes the timings of its share (the odd positions of ``configs``) from ``times``."""

    def __init__(self, configs: list[triton.Config], times: dict[int, float]) -> None:
        self.store = dist.HashStore()
        self.configs, self.times = configs, times

    def add(self, key: str, amount: int) -> int:
        value = self.store.add(key, amount)
        if key.endswith("/joined") and value == 1:
            self.store.add(key, 1)  # the member joins
            share = {str(i): [self.times[c.kwargs["BLOCK"]]] * 3 for i, c in enumerate(self.configs) if i % 2}
            self.store.set(f"{key.removesuffix('joined')}timings/1", json.dumps({"timings": share}))
        return value

    def __getattr__(self, name: str):  # set, get, wait
        return getattr(self.store, name)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_leader_measures_every_finalist_whatever_the_search_budget(monkeypatch, tmp_path, seed):
    """With a search budget (a random search over a third of the candidates), the leader still
    re-measures each of the 3 best gathered candidates and keeps the fastest of them (the budget
    applied to the finalists: it measured some only, and could store a slower one)."""
    from kernels import FakeBench, observe_block
    from storage_helpers import launch, make_tuner

    configs = blocks(16, 32, 64, 128, 256, 512, 1024, 2048)
    # on the member's GPU, 32, 128 and 512 are the fastest: the finalists; here 512 is (1000 / BLOCK)
    member_times = {32: 0.3, 128: 0.2, 512: 0.1, 2048: 9.0}
    monkeypatch.setattr(ranks, "active_store", lambda: (FirstOfTwo(configs, member_times), 2))
    bench = FakeBench()
    tuner = make_tuner(
        bench=bench,
        configs=configs,
        pre_hook=observe_block(bench),
        custom_data_storage=tmp_path,
        use_random_search=True,
        search_max_share=0.34,
        search_seed=seed,
    )
    launch(tuner, 3000)
    assert sorted(b for b in bench.blocks if b in (32, 128, 512)) == [32, 128, 512]
    assert tuner.best_config.kwargs == {"BLOCK": 512}
    [entry] = tuner._process_state().store.load().values()
    assert entry.config.kwargs == {"BLOCK": 512} and entry.strategy == tuner.settings.strategy != "exhaustive"


SHARE = (2**6, 2**9, 2**12)  # the BLOCKs of configs 2, 5 and 8


@pytest.mark.parametrize("isolated", [False, True], ids=["in_process", "isolated"])
@pytest.mark.parametrize(
    "first",
    [[RIGHT], [fails, RIGHT], [SKIP, RIGHT]],
    ids=["first_right", "first_fails", "first_writes_nothing"],
)
def test_a_member_compares_its_share_with_the_first_config_that_runs_and_writes(monkeypatch, isolated, first):
    """Config 2, the first of this member's share, is wrong and the fastest: it is ruled out, and the
    right ones of the share are kept, because the reference is the first config of the whole list
    that runs and writes (as in a single process), not the first of the share."""
    modes = [*first, *[RIGHT] * (9 - len(first))]
    modes[2] = WRONG
    valid, launches = checked_as_member_2_of_3(monkeypatch, modes, isolated)
    assert valid == dict(zip(SHARE, [False, True, True]))
    if not isolated:  # the reference costs one untimed launch per config tried that runs
        tried = [2 ** (4 + i) for i, mode in enumerate(first) if not callable(mode)]
        share_launches = [SHARE[0], SHARE[1], SHARE[1], SHARE[2], SHARE[2]]  # checked, then timed
        assert launches == tried + share_launches


def test_a_first_config_that_kills_its_worker_is_passed_over_for_the_reference(monkeypatch):
    """Isolated: the first config kills the worker computing the reference; a new worker tries the
    next, which becomes the reference. Config 2 kills that worker too: the replacement recomputes
    the same reference, so config 5 (wrong) is ruled out and config 8 kept."""
    modes = [crashes, RIGHT, crashes, RIGHT, RIGHT, WRONG, RIGHT, RIGHT, RIGHT]
    valid, _ = checked_as_member_2_of_3(monkeypatch, modes, True)
    assert valid == dict(zip(SHARE, [False, False, True]))


@pytest.mark.parametrize("isolated", [False, True], ids=["in_process", "isolated"])
def test_without_a_writing_config_among_the_first_a_member_falls_back_to_its_share_and_warns(
    monkeypatch, isolated
):
    """None of the first three configs writes: the first of the share that writes (config 5) is the
    reference, config 2 (it wrote nothing, timed before there was a reference) is judged after the
    search and ruled out, and config 8 (wrong) is ruled out at once; the user is told."""
    modes = [SKIP, SKIP, SKIP, RIGHT, RIGHT, RIGHT, RIGHT, RIGHT, WRONG]
    with pytest.warns(tdl.DejavuConfigWarning, match="none of the first 3 configs ran and wrote the outputs"):
        valid, _ = checked_as_member_2_of_3(monkeypatch, modes, isolated)
    assert valid == dict(zip(SHARE, [False, True, False]))


def reference_double(x_ptr, out_ptr, n, **_):
    out_ptr.copy_(2 * x_ptr)


def test_with_a_reference_function_a_member_runs_no_config_for_the_reference(monkeypatch):
    modes = [RIGHT] * 9
    modes[2] = WRONG
    valid, launches = checked_as_member_2_of_3(monkeypatch, modes, False, reference_fn=reference_double)
    assert valid == dict(zip(SHARE, [False, True, True]))
    assert launches == [SHARE[0], SHARE[1], SHARE[1], SHARE[2], SHARE[2]]  # the share only


def missing_buffer(nargs, reset_only=False):
    raise KeyError("workspace")


def test_a_broken_hook_ends_a_member_s_tuning_at_the_reference_s_launch(monkeypatch):
    """The tuner's pre_hook raises when the first config runs for the reference: tuning ends there,
    raised as without ranks, naming that config."""
    with pytest.raises(KeyError, match="tuning stopped at the first candidate \\[BLOCK=16") as caught:
        checked_as_member_2_of_3(monkeypatch, [RIGHT] * 9, False, pre_hook=missing_buffer)
    assert caught.value.stopped_by == "pre_hook"


# --- ranks and the store shared with other processes --------------------------------------------------


def test_a_rank_restores_what_another_process_stored_since_it_loaded_the_store(monkeypatch, tmp_path):
    """The leading rank reads the cache file again when it joins: a key another job (or a process
    outside the group) recorded since this rank loaded its store is restored, as the ranks that load
    it later do
    (it was tuned again, overwriting that entry, and the ranks launched different configs)."""
    from storage_helpers import InstantBench, launch, make_tuner

    monkeypatch.setattr(ranks, "active_store", lambda: (dist.HashStore(), 2))
    monkeypatch.setattr(ranks_meeting, "JOIN_WINDOW_S", 0.05)  # were it to meet: alone, after a short wait
    bench = InstantBench()
    tuner = make_tuner(bench=bench, custom_data_storage=tmp_path)
    tuner._process_state()  # this rank loaded the store: nothing for key 40 then
    with monkeypatch.context() as alone:
        alone.setattr(ranks, "active_store", lambda: None)
        launch(make_tuner(custom_data_storage=tmp_path), 40)  # another process records key 40
    launch(tuner, 40)
    assert tuner.last_decision == "restored" and bench.calls == 0


def test_the_leading_rank_holds_the_key_s_lease_while_it_tunes(monkeypatch, tmp_path):
    """Processes outside the group that share the storage root wait for the group's result (single
    flight) instead of tuning the key too: the leader holds the key's lease while it tunes."""
    from storage_helpers import launch, make_tuner

    from triton_dejavu_like.store import lease as lease_mod

    monkeypatch.setattr(ranks, "active_store", lambda: (dist.HashStore(), 2))
    monkeypatch.setattr(ranks_meeting, "JOIN_WINDOW_S", 0.05)  # the other rank never misses the key
    held = []

    def bench(kernel_call, quantiles=(0.5, 0.2, 0.8)):
        held.append(len(list(tmp_path.rglob(f"*{lease_mod.LEASE_SUFFIX}*"))))
        return [1.0] * len(quantiles)

    tuner = make_tuner(bench=bench, custom_data_storage=tmp_path)
    launch(tuner, 41)
    assert tuner.last_decision == "tuned" and held and set(held) == {1}
    assert not list(tmp_path.rglob(f"*{lease_mod.LEASE_SUFFIX}*"))  # released once recorded


def test_a_late_rank_stores_the_decision_in_its_own_store(monkeypatch, tmp_path):
    """Node-local storage: a rank that missed the key after the group decided launches the decision
    without measuring, and records it in its own store, so that its next job restores the same
    winner as the leader's (it tuned the key again, and could launch another config)."""
    from kernels import FakeBench, observe_block
    from storage_helpers import launch, make_tuner

    def tuner(bench: FakeBench, rank: int) -> tdl.Autotuner:
        return make_tuner(
            bench=bench, pre_hook=observe_block(bench), custom_data_storage=tmp_path / f"rank{rank}"
        )

    store = dist.HashStore()
    monkeypatch.setattr(ranks, "active_store", lambda: (store, 2))
    monkeypatch.setattr(ranks_meeting, "JOIN_WINDOW_S", 0.05)  # the other rank misses the key later
    leader = tuner(FakeBench(), 0)  # the largest block (64) is the fastest on the leader's GPU
    launch(leader, 40)
    late_bench = FakeBench({16: 1.0, 32: 2.0, 64: 3.0})  # alone, this rank would choose 16
    late = tuner(late_bench, 1)
    launch(late, 40)
    assert leader.best_config.kwargs == late.best_config.kwargs == {"BLOCK": 64} and late_bench.calls == 0
    monkeypatch.setattr(ranks, "active_store", lambda: None)
    next_job = tuner(late_bench, 1)
    launch(next_job, 40)
    assert next_job.last_decision == "restored" and next_job.best_config.kwargs == {"BLOCK": 64}
    assert late_bench.calls == 0


class JoinSeen:
    """A c10d store that remembers the name of the join counter of the key the ranks meet for."""

    def __init__(self) -> None:
        self.store = dist.HashStore()
        self.joined: str | None = None

    def add(self, key: str, amount: int) -> int:
        if key.endswith("/joined"):
            self.joined = key
        return self.store.add(key, amount)

    def __getattr__(self, name: str):  # set, get, wait
        return getattr(self.store, name)


def test_ranks_agree_when_another_process_records_the_key_while_one_of_them_waits_to_meet(
    monkeypatch, tmp_path
):
    """The first rank misses the key and waits for the other in the join window; meanwhile processes
    outside the group record the key (another config) in each rank's root (another group, whose
    leader held the key's lease; here without single flight); then the second rank joins. Both
    launch the recorded config and measure nothing (the second restored it from its file before it
    met, and the first, left with a member that never measured, tuned and launched another config).
    The second rank's join is added by hand and its launch comes after the first's: the interpreter
    runs one kernel at a time."""
    from kernels import FakeBench, observe_block
    from storage_helpers import launch, make_tuner

    def tuner(bench: FakeBench, rank: int) -> tdl.Autotuner:
        root = tmp_path / f"rank{rank}"
        return make_tuner(bench=bench, pre_hook=observe_block(bench), custom_data_storage=root)

    store = JoinSeen()
    monkeypatch.setattr(ranks, "active_store", lambda: (store, 2))
    monkeypatch.setattr(ranks_meeting, "JOIN_WINDOW_S", 60.0)  # until the second rank joins
    monkeypatch.setenv("TRITON_DEJAVU_SINGLE_FLIGHT_TIMEOUT", "2")  # bounds the wait for its share
    first, second = FakeBench(), FakeBench()  # alone, each rank would choose 64
    ranks_ = [tuner(first, 0), tuner(second, 1)]
    for rank in ranks_:
        rank._process_state()  # both loaded the store at start: nothing for key 40 then
    thread = threading.Thread(target=launch, args=(ranks_[0], 40))
    thread.start()
    while store.joined is None:  # the first rank joined the meeting
        time.sleep(0.01)
    with monkeypatch.context() as outside:
        outside.setattr(ranks, "active_store", lambda: None)
        outside.setenv("TRITON_DEJAVU_SINGLE_FLIGHT", "0")
        for rank in range(2):
            launch(tuner(FakeBench({16: 1.0, 32: 2.0, 64: 3.0}), rank), 40)  # records 16
    store.add(store.joined, 1)  # the second rank joins
    thread.join(30)
    launch(ranks_[1], 40)
    assert [rank.best_config.kwargs for rank in ranks_] == [{"BLOCK": 16}] * 2
    assert (first.calls, second.calls) == (0, 0)


def test_timings_are_gathered_within_one_wait_however_many_members_are_gone():
    """A member killed outright is waited for once: the leader gives all members one wait in all (it
    gave each missing member a full wait, and a surviving member waited 3T for a killed leader)."""
    waits = []

    class Meeting(ranks_meeting.Meeting):
        def read(self, name, timeout_s=None, *, publisher=None):
            waits.append(timeout_s)
            return super().read(name, timeout_s, publisher=publisher)

    meeting = Meeting(dist.HashStore(), "p/", 0.3)
    candidates = [triton.Config({"BLOCK": b}) for b in (16, 32, 64, 128)]
    assert ranks_meeting.gather(meeting, len(candidates), 4, 0, 0.3) == {}  # nobody else published
    assert len(waits) == 3 and sum(waits) <= 0.3 + 0.01


# --- ranks as threads of this process, meeting in one HashStore ---------------------------------------

KEY = TuningKey.of((64,))


def blocks(*sizes: int) -> list[triton.Config]:
    return [triton.Config({"BLOCK": b}) for b in sizes]


class Rank:
    """One rank's ``measure``: the times of its GPU per BLOCK (None: the config fails there); it
    records the BLOCKs it measured and whether each measurement was careful (the finalists)."""

    def __init__(self, times: dict[int, float | None], candidates: list[triton.Config]) -> None:
        self.times, self.candidates = times, candidates
        self.measured: list[list[int]] = []
        self.recorded: list[Outcome] = []
        self.outcome: Outcome | None = None
        self.raised: BaseException | None = None
        self.done = threading.Event()

    def measure(self, subset, reference=None, *, careful=False) -> Outcome:
        self.measured.append([c.kwargs["BLOCK"] for c in subset])
        timings = {c: [self.times[c.kwargs["BLOCK"]] or math.inf] * 3 for c in subset}
        failures = {c: "it fails here" for c in subset if self.times[c.kwargs["BLOCK"]] is None}
        valid = sorted((t[0], i) for i, t in enumerate(timings.values()) if math.isfinite(t[0]))
        if not valid:
            raise tdl.AutotuningError("every config of the share failed")
        best = subset[valid[0][1]]
        ranking = sorted(((c, t) for c, t in timings.items() if math.isfinite(t[0])), key=lambda ct: ct[1])
        entry = StoredEntry.new(
            KEY.values,
            best,
            timings[best],
            evaluated=len(subset),
            space_size=len(subset),
            strategy="exhaustive",
            tuning_time_s=0.0,
            top=ranking[:5],
            ruled_out=list(failures.items()),
        )
        outcome = Outcome(best, "tuned", timings, 0.0, entry)
        outcome.failures = failures  # what a tuning run reports of the candidates it ruled out
        return outcome

    def tune(self, store, size: int, timeout_s: float, name: str) -> None:
        try:
            self.outcome = ranks.tune_together(
                (store, size),
                SCOPE,
                KEY,
                name,
                self.candidates,
                self.measure,
                self.recorded.append,
                timeout_s,
            )
        except BaseException as exc:  # reported to the test
            self.raised = exc
        finally:
            self.done.set()


SCOPE = ["kernel", "key", "candidates"]


MEETING = f"{ranks_meeting.PREFIX}{stable_hash(SCOPE)}/"


def ended_process() -> dict:
    """A process of this host that ended (and was reaped), as a rank publishes its own."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=60)
    return {**this_process(), "pid": proc.pid}


def tune_in_threads(
    group: list[Rank | None],
    timeout_s: float = 5.0,
    size: int | None = None,
    name: str = "kernel",
    ended: bool = False,
    silent: bool = False,
) -> None:
    """The ranks of ``group`` miss the key in its order (None: a member that joins, then dies; with
    ``ended``, a member whose process is seen to have ended; with ``silent``, one that says it runs
    on another host and never beats), for the kernel ``name`` (each test its own: a warning is given
    once per kernel)."""
    store = dist.HashStore()
    joined = f"{MEETING}joined"
    threads = []
    for order, rank in enumerate(group):
        while int(store.add(joined, 0)) < order:  # the previous rank joined: the join order is fixed
            time.sleep(0.001)
        if rank is None:
            store.add(joined, 1)
            if ended:
                store.set(f"{MEETING}process/{order}", json.dumps(ended_process()))
            if silent:
                store.set(f"{MEETING}process/{order}", json.dumps({**this_process(), "host": "elsewhere"}))
            continue
        thread = threading.Thread(target=rank.tune, args=(store, size or len(group), timeout_s, name))
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join(60)


def launched(group: list[Rank | None]) -> list[int]:
    return [rank.outcome.config.kwargs["BLOCK"] for rank in group if rank is not None and rank.outcome]


def test_every_member_records_the_leader_s_entry():
    """Each rank keeps the decision in its own store (node-local storage): the members record the
    entry the leader recorded, so that every rank restores the same winner in the next job."""
    candidates = blocks(16, 32, 64, 128)
    group = [Rank({16: 3.0, 32: 1.0, 64: 2.0, 128: 4.0}, candidates) for _ in range(3)]
    tune_in_threads(group)
    assert launched(group) == [32] * 3
    entries = [[o.entry.to_json() for o in rank.recorded if o.entry] for rank in group]
    assert entries[0] and entries[0][0]["ranks"] == 3
    assert entries == [entries[0]] * 3


def test_ranks_holding_the_candidates_in_other_orders_split_them_and_agree():
    """The ranks' prunes return the same configs in different orders (``list(set(...))``): the
    members still measure disjoint shares, every timing is credited to the config measured, and
    all launch the fastest (positions in each rank's own list named different configs)."""
    listed = blocks(16, 32, 64, 128, 256, 512)
    times = {b: 1000 / b for b in (16, 32, 64, 128, 256, 512)}  # the same GPUs: 512 is the fastest
    group = [Rank(times, listed), Rank(times, listed[::-1]), Rank(times, listed[2:] + listed[:2])]
    tune_in_threads(group)
    assert launched(group) == [512] * 3
    shares = sorted(b for rank in group for b in rank.measured[0])
    assert shares == [16, 32, 64, 128, 256, 512]
    leader = group[0].outcome
    assert {c.kwargs["BLOCK"]: t[0] for c, t in leader.configs_timings.items()} == times


class FailingLeader(Rank):
    def measure(self, subset, reference=None, *, careful=False) -> Outcome:
        raise RuntimeError("CUDA error: unspecified launch failure")


class SlowMember(Rank):
    """A member that publishes its share after ``other`` finished (or a second passed)."""

    def __init__(self, times, candidates, other: Rank) -> None:
        super().__init__(times, candidates)
        self.other = other

    def measure(self, subset, reference=None, *, careful=False) -> Outcome:
        self.other.done.wait(1.0)
        return super().measure(subset, reference, careful=careful)


@pytest.mark.filterwarnings("ignore::triton_dejavu_like.DejavuTuningWarning")  # read in the log
def test_without_the_leader_s_decision_the_members_agree_on_one_config(caplog):
    """The leader fails in its share; member 2 publishes its share at once, member 1 (which holds the
    fastest config) later: all members still launch one config, chosen by member 1 from both shares,
    and the warning counts the shares used (member 2 chose at once from what had arrived: its own)."""
    candidates = blocks(16, 32, 64, 128, 256, 512)
    times = {16: 6.0, 32: 5.0, 64: 4.0, 128: 3.0, 256: 1.0, 512: 2.0}
    fast = Rank(times, candidates)  # its share: positions 2 and 5 (64, 512)
    group = [FailingLeader(times, candidates), SlowMember(times, candidates, fast), fast]
    with caplog.at_level("WARNING", logger="triton_dejavu_like"):
        tune_in_threads(group, name="leaderless")
    assert isinstance(group[0].raised, RuntimeError)
    assert launched(group) == [256, 256]  # the best of member 1's share (32, 256) and member 2's
    assert "member 1 of the group chose the best of the timings of 2 of its 3 members' shares" in caplog.text


class LateLeader(Rank):
    """A leader whose careful re-measurement ends after the members gave up waiting for its decision
    (and chose without it), and ranks the finalists otherwise than the shares did."""

    def __init__(self, times, candidates, members: list[Rank], careful_times: dict[int, float]) -> None:
        super().__init__(times, candidates)
        self.members, self.careful_times = members, careful_times

    def measure(self, subset, reference=None, *, careful=False) -> Outcome:
        if not careful:
            return super().measure(subset, reference)
        for member in self.members:
            member.done.wait(10.0)
        times, self.times = self.times, {**self.times, **self.careful_times}
        try:
            return super().measure(subset, reference, careful=True)
        finally:
            self.times = times


@pytest.mark.filterwarnings("ignore::triton_dejavu_like.DejavuTuningWarning")  # read in the log
def test_a_leader_that_decides_after_the_members_chose_without_it_uses_their_choice(caplog):
    """The members' wait for the decision ran out while the leader re-measured its finalists, so
    member 1 chose from the shares; the leader's later verdict (another config) must not split the
    group: every rank launches member 1's choice, and the leader records nothing, as the members."""
    candidates = blocks(16, 32, 64, 128, 256, 512)
    times = {16: 6.0, 32: 5.0, 64: 4.0, 128: 3.0, 256: 1.0, 512: 2.0}
    members = [Rank(times, candidates), Rank(times, candidates)]
    leader = LateLeader(times, candidates, members, careful_times={256: 2.5, 512: 2.0})
    group = [leader, *members]
    with caplog.at_level("WARNING", logger="triton_dejavu_like"):
        tune_in_threads(group, timeout_s=0.2, name="late_leader")
    assert [rank.raised for rank in group] == [None] * 3
    assert launched(group) == [256] * 3
    assert [rank.recorded for rank in group] == [[], [], []]
    assert "chose without this rank's decision" in caplog.text


class Clock:
    """``ranks``' view of time: the join window's sleeps advance a fake clock, and are summed."""

    def __init__(self) -> None:
        self.now = 0.0
        self.perf_counter = time.perf_counter

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def windows_waited(monkeypatch, keys: int, late_at: tuple[int, ...] = ()) -> list[float]:
    """Lead ``keys`` keys that no other rank of two misses in the window (at the keys of ``late_at``
    a rank misses it while the leader tunes): the seconds the leader waited for others, per key
    (after a first key, not counted, that another rank missed late, as tests before may have led
    keys alone)."""
    clock = Clock()
    monkeypatch.setattr(ranks_meeting, "time", clock)
    monkeypatch.setattr(ranks_key, "time", clock)
    store = dist.HashStore()
    waited = []
    late_at = (-1, *late_at)
    for k in range(-1, keys):
        scope = ["kernel", k]
        rank = Rank({16: 1.0, 32: 2.0}, blocks(16, 32))

        def measure(subset, reference=None, *, careful=False, k=k, rank=rank, scope=scope):
            if k in late_at:
                store.add(f"{ranks_meeting.PREFIX}{stable_hash(scope)}/joined", 1)
            return rank.measure(subset)

        before = clock.now
        ranks.tune_together(
            (store, 2), scope, KEY, "kernel", rank.candidates, measure, rank.recorded.append, 1.0
        )
        waited.append(clock.now - before)
    return waited[1:]


def approx(seconds: list[float]):
    return pytest.approx(seconds, abs=0.011)  # the window is polled every 10 ms (of the fake clock)


def test_the_join_window_shrinks_while_no_other_rank_misses_this_rank_s_keys(monkeypatch):
    """Ranks missing different keys (rank-specific shapes): after 3 keys that nobody else missed, the
    first rank to miss a key waits 0.05 s for the others instead of 2 s (each of 500 keys cost 2 s);
    a rank that misses a key late (it uses the decision) restores the whole window."""
    monkeypatch.delenv("TRITON_DEJAVU_JOIN_WINDOW", raising=False)
    assert windows_waited(monkeypatch, 5) == approx([2.0, 2.0, 2.0, 0.05, 0.05])
    assert windows_waited(monkeypatch, 6, late_at=(3,)) == approx([2.0, 2.0, 2.0, 0.05, 2.0, 2.0])


def test_the_join_window_is_set_by_its_variable(monkeypatch, recwarn):
    monkeypatch.setenv("TRITON_DEJAVU_JOIN_WINDOW", "0.5")
    assert windows_waited(monkeypatch, 4) == approx([0.5, 0.5, 0.5, 0.05])
    monkeypatch.setenv("TRITON_DEJAVU_JOIN_WINDOW", "0")
    assert windows_waited(monkeypatch, 1) == approx([0.0])
    monkeypatch.setenv("TRITON_DEJAVU_JOIN_WINDOW", "-1")
    assert windows_waited(monkeypatch, 1) == approx([2.0])  # the default, with a warning
    assert any("TRITON_DEJAVU_JOIN_WINDOW='-1' is not valid" in str(w.message) for w in recwarn)


@pytest.mark.filterwarnings("ignore::triton_dejavu_like.DejavuTuningWarning")  # read in the log
def test_the_leader_measures_the_share_of_a_member_that_is_gone_and_says_so(caplog):
    """Member 1 joins, then dies before it publishes its share (which holds the fastest config): the
    leader warns, naming it, measures that share itself, and the ranks launch and store the fastest
    of all the candidates (it was left out silently, and the result covered 2 shares of 3)."""
    candidates = blocks(16, 32, 64, 128, 256, 512)
    times = {16: 6.0, 32: 5.0, 64: 4.0, 128: 3.0, 256: 1.0, 512: 2.0}  # member 1's share: 32, 256
    group = [Rank(times, candidates), None, Rank(times, candidates)]
    with caplog.at_level("WARNING", logger="triton_dejavu_like"):
        tune_in_threads(group, timeout_s=0.3, name="member_gone")
    assert launched(group) == [256, 256]
    assert [rank.recorded[0].entry.to_json()["evaluated"] for rank in (group[0], group[2])] == [6, 6]
    assert "member 1 of the 3 ranks tuning key (64,) together gave no timings" in caplog.text


@pytest.mark.filterwarnings("ignore::triton_dejavu_like.DejavuTuningWarning")  # read in the log
def test_a_leader_measures_at_once_the_share_of_a_member_whose_process_ended(caplog):
    """Member 1 joins and its process ends (SIGKILL, OOM) before it publishes its share: on its host
    the leader sees it gone and measures its share without waiting the whole wait T for it (60 s
    here; the threads are given 60 s in all)."""
    candidates = blocks(16, 32, 64, 128, 256, 512)
    times = {16: 6.0, 32: 5.0, 64: 4.0, 128: 3.0, 256: 1.0, 512: 2.0}  # member 1's share: 32, 256
    group = [Rank(times, candidates), None, Rank(times, candidates)]
    with caplog.at_level("WARNING", logger="triton_dejavu_like"):
        tune_in_threads(group, timeout_s=60.0, name="member_ended", ended=True)
    assert launched(group) == [256, 256]
    assert "member 1 of the 3 ranks tuning key (64,) together gave no timings" in caplog.text


class KilledLeader(Rank):
    """A leader whose process is killed in its share (it never publishes anything again): its
    published process is one that ended; it stays silent until the members are done (or 30 s)."""

    def __init__(self, times, candidates, members: list[Rank]) -> None:
        super().__init__(times, candidates)
        self.members = members
        self.members_done_first = False

    def tune(self, store, size: int, timeout_s: float, name: str) -> None:
        self.store = store
        super().tune(store, size, timeout_s, name)

    def measure(self, subset, reference=None, *, careful=False) -> Outcome:
        self.store.set(f"{MEETING}process/0", json.dumps(ended_process()))
        self.members_done_first = all(member.done.wait(30.0) for member in self.members)
        raise KeyboardInterrupt  # ends the thread (a killed process publishes nothing: too late here)


def members_without_their_leader(leader_class: type[KilledLeader], name: str, caplog) -> list[Rank]:
    """Three ranks whose leader (``leader_class``) drops out in its share: the members, who agreed on
    the best of their own shares before the leader's thread ended (60 s wait T)."""
    candidates = blocks(16, 32, 64, 128, 256, 512)
    times = {16: 6.0, 32: 5.0, 64: 4.0, 128: 1.0, 256: 3.0, 512: 2.0}  # the leader's: 16, 128
    members = [Rank(times, candidates), Rank(times, candidates)]
    leader = leader_class(times, candidates, members)
    with caplog.at_level("WARNING", logger="triton_dejavu_like"):
        tune_in_threads([leader, *members], timeout_s=60.0, name=name)
    assert leader.members_done_first
    assert launched(members) == [512, 512]  # the best of the members' shares: 32, 256 and 64, 512
    return members


@pytest.mark.filterwarnings("ignore::triton_dejavu_like.DejavuTuningWarning")  # read in the log
def test_members_of_a_leader_whose_process_ended_agree_without_waiting_for_it(caplog):
    """The leader's process ends in its share (SIGKILL, OOM): the members on its host see it gone and
    agree on the best of their shares, without waiting out 2T for its decision (120 s here: they
    waited that long, whereas the leader's process was known gone)."""
    members = members_without_their_leader(KilledLeader, "leader_ended", caplog)
    assert [member.recorded for member in members] == [[], []]
    assert "(its process, pid" in caplog.text and "is gone); member 1 of the group chose" in caplog.text


@pytest.fixture
def elsewhere(monkeypatch):
    """Every rank says it runs on another host than the others: no pid can be looked up, only the
    heartbeats tell who is alive (beats every 0.05 s, looked at every 0.1 s; silent after 0.6 s)."""
    monkeypatch.setattr(ranks_meeting, "this_process", lambda: {**this_process(), "host": "elsewhere"})
    monkeypatch.setattr(ranks_meeting, "GONE_CHECK_S", 0.1)
    monkeypatch.setattr(ranks_meeting, "BEAT_S", 0.05)
    monkeypatch.setattr(ranks_meeting, "SILENT_AFTER_S", 0.6)


@pytest.mark.filterwarnings("ignore::triton_dejavu_like.DejavuTuningWarning")  # read in the log
def test_a_member_on_another_host_whose_heartbeat_stopped_is_passed_over(elsewhere, caplog):
    """Member 1 (another host: its pid cannot be looked up) joins and goes silent before it publishes
    its share: the leader measures that share once the member's heartbeat has not moved for
    SILENT_AFTER_S, not after the whole wait T (60 s here; it waited T)."""
    candidates = blocks(16, 32, 64, 128, 256, 512)
    times = {16: 6.0, 32: 5.0, 64: 4.0, 128: 3.0, 256: 1.0, 512: 2.0}  # member 1's share: 32, 256
    group = [Rank(times, candidates), None, Rank(times, candidates)]
    started = time.monotonic()
    with caplog.at_level("WARNING", logger="triton_dejavu_like"):
        tune_in_threads(group, timeout_s=60.0, name="member_silent", silent=True)
    assert time.monotonic() - started < 20
    assert launched(group) == [256, 256]
    assert "member 1 of the 3 ranks tuning key (64,) together gave no timings" in caplog.text


class SlowRank(Rank):
    """A member that takes longer over its share than SILENT_AFTER_S: alive, and beating."""

    def measure(self, subset, reference=None, *, careful=False) -> Outcome:
        time.sleep(2.0)
        return super().measure(subset, reference, careful=careful)


def test_a_slow_member_on_another_host_that_beats_is_waited_for(elsewhere, caplog):
    """A member busy longer than SILENT_AFTER_S keeps its heartbeat going (a thread of its own): the
    leader waits for its share and uses it, measuring nothing of it."""
    candidates = blocks(16, 32, 64, 128, 256, 512)
    times = {16: 6.0, 32: 5.0, 64: 4.0, 128: 3.0, 256: 1.0, 512: 2.0}
    group = [Rank(times, candidates), SlowRank(times, candidates), Rank(times, candidates)]
    with caplog.at_level("WARNING", logger="triton_dejavu_like"):
        tune_in_threads(group, timeout_s=60.0, name="member_slow")
    assert launched(group) == [256] * 3
    assert group[0].measured[0] == [16, 128]  # its own share, then the finalists only
    assert all(32 not in subset for subset in group[0].measured[1:])
    assert "gave no timings" not in caplog.text


class SilentBeats:
    """The meeting's store, except that member ``order``'s heartbeat never moves (a process stopped
    with SIGSTOP, or a host that went down, while the rest of its threads' work goes on here)."""

    def __init__(self, store, order: int) -> None:
        self.store, self.beat = store, f"beat/{order}"

    def add(self, key: str, amount: int) -> int:
        return self.store.add(key, 0 if key.endswith(self.beat) else amount)

    def __getattr__(self, name: str):
        return getattr(self.store, name)


class SilentLeader(KilledLeader):
    """A leader on another host that goes silent in its share (its heartbeat stops)."""

    def tune(self, store, size: int, timeout_s: float, name: str) -> None:
        super().tune(SilentBeats(store, 0), size, timeout_s, name)

    def measure(self, subset, reference=None, *, careful=False) -> Outcome:
        self.members_done_first = all(member.done.wait(30.0) for member in self.members)
        raise KeyboardInterrupt


@pytest.mark.filterwarnings("ignore::triton_dejavu_like.DejavuTuningWarning")  # read in the log
def test_members_of_a_silent_leader_on_another_host_agree_without_waiting_for_it(elsewhere, caplog):
    """The leader (another host) goes silent in its share: the members agree on the best of their
    shares once its heartbeat has not moved for SILENT_AFTER_S, not after 2T (120 s here)."""
    members_without_their_leader(SilentLeader, "leader_silent", caplog)
    assert "no heartbeat for" in caplog.text and "member 1 of the group chose" in caplog.text


def test_the_stored_entry_holds_the_best_and_the_failures_of_every_share():
    """The entry every rank records lists the best 5 candidates of all shares (the finalists first, by
    their careful timings) and every candidate a member ruled out, with its reason (it kept the
    leader's finalists only: at most 3 in top, and none of the members' failures)."""
    candidates = blocks(16, 32, 64, 128, 256, 512, 1024, 2048)
    times = {16: 8.0, 32: None, 64: 6.0, 128: None, 256: 4.0, 512: 3.0, 1024: 2.0, 2048: 1.0}
    group = [Rank(times, candidates), Rank(times, candidates)]  # member 1: 32, 128, 512, 2048
    tune_in_threads(group, name="entry_lists")
    entry = group[1].recorded[0].entry
    assert [c.kwargs["BLOCK"] for c, _ in entry.top()] == [2048, 1024, 512, 256, 64]
    assert [(c.kwargs["BLOCK"], reason) for c, reason in entry.ruled_out()] == [
        (32, "it fails here"),
        (128, "it fails here"),
    ]
