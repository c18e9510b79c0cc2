"""The batch ask/tell interface: proposals, out-of-order results, budgets, failures, seeds."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from triton_dejavu_like.search import (
    BatchSearch,
    Budget,
    SearchRun,
    SearchSpace,
    base,
    drive,
    drive_batched,
    exhaustive_is_cheaper,
    make_strategy,
)


def grid_space(shape: tuple[int, ...], keep=lambda point: True) -> SearchSpace:
    values = [list(range(n)) for n in shape]
    rows = [p for p in itertools.product(*values) if keep(p)]
    return SearchSpace.from_table([f"d{i}" for i in range(len(shape))], values, rows)


def bowl(space: SearchSpace, centre: tuple[int, ...]):
    return lambda i: 1.0 + sum((a - b) ** 2 for a, b in zip(space.candidates[i], centre))


def _needs_smac(name: str) -> None:
    if name == "bayesian":
        pytest.importorskip("smac", reason="needs the bo extra")


@pytest.mark.parametrize("name", ["random", "exhaustive", "bayesian"])
def test_a_batch_is_distinct_new_candidates_and_pending_ones_are_never_proposed_again(name):
    _needs_smac(name)
    space = grid_space((6, 6, 6))
    objective = bowl(space, (5, 2, 4))
    strategy = make_strategy(name)
    if name == "bayesian":  # every slot filled (the default caps what the model steers in flight)
        from triton_dejavu_like.search.bayesian import BOSettings

        strategy.config = BOSettings(max_in_flight_share=0.0)
    search = BatchSearch(strategy, space, Budget(max_share=0.25, seed=3))
    first = search.ask(16)
    assert len(first) == 16 == len(set(first)) and search.pending == set(first)
    second = search.ask(16)  # nothing told yet: all new, none of the first batch
    assert len(second) == 16 and not set(second) & set(first)
    for index in reversed(first[::2]):  # half of the results, out of order
        search.tell(index, objective(index))
    seen = set(first) | set(second)
    while not search.done:
        batch = search.ask(16)
        assert not set(batch) & seen, "a measured or pending candidate was proposed again"
        seen |= set(batch)
        pending = sorted(search.pending)
        random.Random(len(seen)).shuffle(pending)
        for index in pending[: max(1, len(pending) // 2)]:
            search.tell(index, objective(index))
    assert not search.pending
    assert len(search.results) == len(seen) == math.ceil(0.25 * len(space))
    assert search.order[:8] == list(reversed(first[::2]))  # the order results arrived in
    assert search.results[search.best()] == min(search.results.values())


def test_bo_issues_its_initial_design_at_once_then_keeps_few_model_proposals_in_flight():
    _needs_smac("bayesian")
    space = grid_space((4, 4, 4, 4, 4))
    objective = bowl(space, (3, 1, 2, 0, 3))
    strategy = make_strategy("bayesian")
    search = BatchSearch(strategy, space, Budget(max_share=0.05, seed=1))
    limit = math.ceil(0.05 * len(space))  # 52 candidates
    cap = math.ceil(strategy.config.max_in_flight_share * limit)
    first = search.ask(16)
    design = strategy.config.initial_size(5, limit, len(space))
    assert len(first) == design > cap  # the initial design does not wait for the model
    most_in_flight = 0
    while not search.done:
        batch = search.ask(16)
        if len(search.results) >= design:  # the model steers everything from here
            most_in_flight = max(most_in_flight, len(search.pending))
            assert len(search.pending) <= cap
        for index in sorted(search.pending)[:1]:  # one result at a time, lowest first
            search.tell(index, objective(index))
        if not batch and not search.pending:
            break
    assert most_in_flight == cap > 1  # a batch, not one at a time
    assert len(search.results) == limit
    assert objective(search.best()) <= 2.0  # the bottom of the bowl or next to it, in 5% of the space


def test_results_may_arrive_before_the_rest_of_their_batch_and_tell_rejects_strangers():
    space = grid_space((5, 5))
    search = BatchSearch(make_strategy("random"), space, Budget(max_share=0.5))
    batch = search.ask(4)
    search.tell(batch[2], 3.0)
    search.tell(batch[0], math.nan)  # NaN is a failure
    assert search.results == {batch[2]: 3.0, batch[0]: math.inf} and search.best() == batch[2]
    with pytest.raises(KeyError):
        search.tell(batch[2], 1.0)  # already told
    with pytest.raises(KeyError):
        search.tell(next(i for i in range(len(space)) if i not in batch), 1.0)  # never handed out


@pytest.mark.parametrize("index", [-1, 3])
def test_known_results_of_candidates_outside_the_space_are_refused(index):
    """A known result outside the space was taken as the best candidate (an index the space does
    not have), and a candidate of the space was never measured: the open ones were miscounted."""
    space = grid_space((3,))
    with pytest.raises(IndexError, match=rf"\[{index}\] outside the space of 3"):
        BatchSearch(make_strategy("random"), space, Budget(max_share=1.0), known={index: 1.0})


@pytest.mark.parametrize("name", ["exhaustive", "random", "bayesian"])
def test_a_cancelled_candidate_is_handed_out_again(name):
    """The strategy had moved past a candidate given back unmeasured, so a search of the whole space
    (exhaustive search above all) ended without ever measuring it."""
    _needs_smac(name)
    space = grid_space((4,))
    search = BatchSearch(make_strategy(name), space, Budget(max_share=1.0))
    given_back, measured = search.ask(2)
    search.cancel(given_back)
    search.tell(measured, 1.0)
    assert search.ask(1) == [given_back]
    search.tell(given_back, 3.0)
    while batch := search.ask(4):
        for index in batch:
            search.tell(index, 2.0)
    assert sorted(search.results) == list(range(4)) and sorted(search.issued) == list(range(4))


@pytest.mark.parametrize("name", ["exhaustive", "random", "bayesian"])
def test_a_candidate_cancelled_once_the_whole_budget_was_handed_out_is_handed_out_again(name):
    """An ask while the whole budget was pending ended the attempt; a candidate given back then
    was never handed out again, so a search of the whole space ended without measuring it."""
    _needs_smac(name)
    space = grid_space((4,))
    search = BatchSearch(make_strategy(name), space, Budget(max_share=1.0))
    issued = search.ask(4)
    assert search.ask(1) == []  # every candidate is pending
    search.cancel(issued[-1])
    for index in issued[:-1]:
        search.tell(index, math.inf)
    assert search.ask(1) == [issued[-1]]
    search.tell(issued[-1], 1.0)
    assert search.ask(1) == [] and search.done
    assert sorted(search.results) == list(range(4)) and search.best() == issued[-1]


def test_an_empty_ask_waits_for_pending_results_then_the_search_is_done():
    space = grid_space((3, 3))
    search = BatchSearch(make_strategy("exhaustive"), space)
    assert search.ask(16) == list(range(9))
    assert search.ask(1) == [] and not search.done  # everything is pending
    for i in range(9):
        search.tell(i, float(i + 1))
    assert search.done and search.ask(4) == [] and search.best() == 0


def test_share_budget_counts_handed_out_candidates():
    space = grid_space((10, 10))
    search = BatchSearch(make_strategy("random"), space, Budget(max_share=0.07))
    assert len(search.ask(16)) == 7 and search.ask(16) == []
    assert not search.done  # until the results are in (a restart could need them)
    for i in list(search.pending):
        search.tell(i, 1.0)
    assert search.done


def test_time_budget_stops_handing_out_work_but_the_first_candidate_always_runs(clock):
    space = grid_space((10, 10))
    search = BatchSearch(make_strategy("random"), space, Budget(max_time_s=5.0))
    assert len(search.ask(4)) == 4
    clock.now = 5.0
    assert search.ask(4) == []
    for i in list(search.pending):
        search.tell(i, 1.0)
    assert search.done and len(search.results) == 4
    clock.now = 100.0
    late = BatchSearch(make_strategy("random"), space, Budget(max_time_s=5.0))
    clock.now = 200.0
    assert len(late.ask(4)) == 1  # the first one runs


def test_a_finished_search_says_what_ended_it(clock):
    """The stored entry records why a search stopped where it did (`show` prints it): a user who
    finds a poor pick must tell a time limit from the adaptive stop from a share."""
    space = grid_space((20, 25))
    flat = lambda i: 1.0  # noqa: E731 - nothing ever improves after the first result
    ended = {
        budget_name: drive_batched(make_strategy(name), space, budget, flat, batch_size=4).ended_by
        for budget_name, name, budget in [
            ("whole", "exhaustive", Budget()),
            ("share", "random", Budget(max_share=0.1)),
            ("adaptive", "random", Budget()),
        ]
    }
    assert ended == {"whole": "every candidate", "share": "evaluation limit", "adaptive": "no improvement"}

    timed = BatchSearch(make_strategy("random"), space, Budget(max_time_s=5.0))
    first = timed.ask(4)
    assert timed.ended_by is None  # still going
    clock.now = 5.0
    assert timed.ask(4) == [] and timed.ended_by is None  # results pending
    for i in first:
        timed.tell(i, 1.0)
    assert timed.ended_by == "time limit"


def test_default_budget_caps_time_for_search_strategies_only():
    assert Budget().time_limit(adaptive_strategy=True) == base.DEFAULT_TIME_CAP_S
    assert Budget().time_limit(adaptive_strategy=False) == math.inf
    assert Budget(max_time_s=7).time_limit(adaptive_strategy=True) == 7
    assert Budget().adaptive and not Budget(max_share=1.0).adaptive
    assert Budget(max_share=1.0, max_time_s=180.0).as_dict() == {
        "max_time_s": 180.0,
        "max_share": 1.0,
        "max_repeat": 1,
        "seed": 0,
    }
    assert "adaptive" in Budget().as_dict()


def test_adaptive_budget_stops_when_nothing_improves_and_explicit_share_does_not():
    space = grid_space((20, 25))
    flat = lambda i: 1.0  # noqa: E731 - nothing ever improves after the first result
    search = drive_batched(make_strategy("random"), space, Budget(), flat, batch_size=1)
    stalled = 1 + base.PATIENCE_MIN  # the first result, then patience
    top = search.order[: base.POLISH_TOP]  # the best few: equal times, so the earliest results
    around = dict.fromkeys(n for i in top for n in space.neighbours(i))
    untried = [i for i in around if i not in search.order[:stalled]]
    assert search.order[stalled:] == untried  # then their untried neighbours, and no more
    batched = drive_batched(make_strategy("random"), space, Budget(), flat, batch_size=32)
    stalled = 1 + base.PATIENCE_BATCHES * 32 + 31  # patience, plus those in flight
    assert stalled <= len(batched.results) <= stalled + 4 * base.POLISH_TOP  # and the best few's neighbours
    assert set(space.neighbours(batched.order[0])) <= set(batched.results)
    improving = drive_batched(make_strategy("random"), space, Budget(), lambda i: 1000.0 - i, batch_size=1)
    assert len(improving.results) > base.PATIENCE_MIN
    fixed = drive_batched(make_strategy("random"), space, Budget(max_share=0.3), flat, batch_size=1)
    assert len(fixed.results) == 150
    whole = drive_batched(make_strategy("exhaustive"), space, Budget(), flat, batch_size=8)
    assert len(whole.results) == len(space)  # exhaustive search has no adaptive stop
    large = grid_space((100, 100))  # a large space is given patience in proportion to its size
    wide = drive_batched(make_strategy("random"), large, Budget(), flat, batch_size=1)
    stalled = 1 + math.ceil(base.PATIENCE_SPACE_SHARE * len(large))
    assert stalled > 1 + base.PATIENCE_MIN
    assert stalled <= len(wide.results) <= stalled + 4 * base.POLISH_TOP  # and the best few's neighbours


@pytest.mark.parametrize("batch", [1, 16])
def test_a_stalled_search_tries_the_best_candidates_neighbours_and_goes_on_if_one_is_better(batch):
    space = grid_space((30, 30))
    first: list[int] = []

    def objective(i):
        first.append(i)
        target = space.neighbours(first[0])[-1]  # next to the first result measured
        return 0.5 if i == target else 1.0

    search = drive_batched(make_strategy("random"), space, Budget(seed=2), objective, batch)
    target = space.neighbours(first[0])[-1]
    assert search.best() == target  # random search alone would find it with a chance of about 1 in 10
    assert set(space.neighbours(target)) <= set(search.results)  # polished around the new best too
    assert len(search.results) < len(space) // 2


@pytest.mark.parametrize("batch", [1, 16])
def test_the_polish_also_tries_the_neighbours_of_the_runner_up(batch):
    space = grid_space((30, 30))
    arrived: list[int] = []

    def objective(i):
        arrived.append(i)
        if len(arrived) == 1:
            return 0.90  # the best, isolated
        if len(arrived) == 2:
            return 0.92  # within 5% of it: not an improvement, but one of the best few
        return 0.80 if i == space.neighbours(arrived[1])[0] else 1.0

    search = drive_batched(make_strategy("random"), space, Budget(seed=3), objective, batch)
    assert search.best() == space.neighbours(arrived[1])[0]
    assert len(search.results) < len(space) // 2


def test_the_polish_of_a_plateau_ends():
    """Each result a hair faster than the one before: the best few change at every result and never
    by 1%, so the polish would follow them across the space without its cap."""
    space = grid_space((40, 40))
    count = iter(range(10**6))
    search = drive_batched(
        make_strategy("random"), space, Budget(seed=0), lambda i: 1.0 - 1e-6 * next(count), batch_size=1
    )
    patience = max(base.PATIENCE_MIN, math.ceil(base.PATIENCE_SPACE_SHARE * len(space)))
    assert len(search.results) <= 1 + base.POLISH_MAX_PATIENCES * patience + 1
    assert len(search.results) > 1 + patience  # the polish ran


def test_small_spaces_are_measured_in_full_under_an_adaptive_budget():
    assert exhaustive_is_cheaper(base.EXHAUSTIVE_MAX) and not exhaustive_is_cheaper(base.EXHAUSTIVE_MAX + 1)
    space = grid_space((8, 8))
    search = drive_batched(make_strategy("random"), space, Budget(), lambda i: 1.0, batch_size=4)
    assert len(search.results) == 64


@pytest.mark.parametrize("batch", [1, 16])
def test_restarts_while_nothing_valid_is_found_without_measuring_anything_twice(batch):
    space = grid_space((10, 10, 5))
    search = drive_batched(
        make_strategy("random"),
        space,
        Budget(max_share=0.02, max_repeat=3, seed=0),
        lambda i: math.inf,
        batch,
    )
    assert len(search.results) == len(set(search.order)) == 30 and search.attempt == 2
    assert search.best() is None and search.done
    found = drive_batched(
        make_strategy("random"), space, Budget(max_share=0.02, max_repeat=3), lambda i: 1.0, batch
    )
    assert len(found.results) == 10 and found.attempt == 0


def test_all_failing_small_space_ends():
    space = grid_space((2, 2))
    search = drive_batched(make_strategy("random"), space, Budget(max_repeat=5), lambda i: math.inf, 3)
    assert len(search.results) == 4 and search.done and search.best() is None


@pytest.mark.parametrize("name", ["random", "bayesian"])
@pytest.mark.parametrize("batch", [1, 16])
def test_same_seed_and_results_give_the_same_proposals(name, batch):
    _needs_smac(name)
    space = grid_space((7, 7, 7), keep=lambda p: p[0] + p[1] < 12)
    objective = bowl(space, (6, 4, 2))

    def issued(seed, completion):
        budget = Budget(max_share=0.1, seed=seed)
        return drive_batched(make_strategy(name), space, budget, objective, batch, (), completion).issued

    first = issued(3, 5)
    assert first == issued(3, 5)
    assert first != issued(4, 5)


def test_the_synchronous_adapter_keeps_its_results_and_budget():
    space = grid_space((10, 10))
    calls = []
    run = SearchRun(space, lambda i: calls.append(i) or float(i), Budget(max_share=0.05))
    drive(make_strategy("random"), run, warm_start=[42, 42, 7])
    assert calls[:2] == [42, 7] and len(calls) == 5 == len(run.results)
    assert run.search is not None and run.search.order == run.order == calls


def test_when_every_measured_candidate_fails_the_error_says_how_many_were_measured():
    """A budget of 5% over 40 candidates measured 2: "all 2 candidate configs failed" read as if the
    whole space were invalid."""
    import torch
    from kernels import FakeBench, add_kernel, grid

    import triton_dejavu_like as tdl

    def only_small_blocks(nargs):
        if nargs["BLOCK"] > 8:
            raise RuntimeError("out of resources: shared memory")  # as a compile failure would

    space = tdl.ConfigSpace({"BLOCK": [8, *(16 * (i + 1) for i in range(39))]}, pre_hook=only_small_blocks)
    tuner = tdl.autotune(
        key=["n"],
        config_space=space,
        use_random_search=True,
        search_max_share=0.05,
        search_seed=1,
        do_bench=FakeBench(),
    )(add_kernel)
    x = torch.ones(64)
    with pytest.raises(tdl.AutotuningError, match=r"all 2 candidate configs failed .* \(2 of 40 candidates"):
        tuner[grid(64)](x, x, torch.empty(64), 64)
