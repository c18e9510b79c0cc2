"""The search layer: spaces derived from configs, budgets, restarts, exhaustive and random order."""

from __future__ import annotations

import json
import math

import pytest
import triton

from triton_dejavu_like.search import BatchSearch, Budget, SearchRun, SearchSpace, drive, make_strategy


def configs():
    return [
        triton.Config({"BLOCK": b, "MODE": m}, num_warps=w)
        for b in (64, 16, 32)
        for m in ("a", "b")
        for w in (8, 4)
        if not (b == 16 and m == "b")
    ]


def test_space_from_configs_has_sorted_numeric_dimensions_and_hidden_points():
    space = SearchSpace.from_configs(configs())
    assert space.names == ("kwargs.BLOCK", "kwargs.MODE", "num_warps")
    assert space.values == ((16, 32, 64), ("a", "b"), (4, 8))
    assert len(space) == 10 and space.grid_size == 12
    assert space.index_of((0, 1, 0)) is None, "BLOCK=16, MODE=b is not a candidate"
    for i in range(len(space)):
        assert space.index_of(space.points[i]) == i
    assert space.is_numeric(0) and not space.is_numeric(1)


def test_numpy_numbers_are_numeric_dimensions_sorted_as_numbers():
    """Values listed as NumPy scalars (``list(np.arange(...))``, ``[np.int64(64), ...]``) made a
    categorical dimension in the order given: BO modelled them without their order, and a step to a
    neighbour went to the next value listed, not the next larger one."""
    np = pytest.importorskip("numpy")
    scales = np.float32([2, 0.5])
    space = SearchSpace.from_configs(
        [triton.Config({"BLOCK": np.int64(b), "SCALE": s}) for b in (64, 16, 32) for s in scales]
    )
    assert space.values == ((16, 32, 64), (0.5, 2.0))
    assert space.is_numeric(0) and space.is_numeric(1)
    middle = space.index_of((1, 0))  # BLOCK=32: its neighbours are 16 and 64, listed first and last
    blocks = [space.value_of(i)["kwargs.BLOCK"] for i in space.neighbours(middle)]
    assert sorted(blocks) == [16, 32, 64]  # 32 with the other SCALE


def test_budget_limits_share_and_counts_each_candidate_once():
    space = SearchSpace.from_configs(configs())
    calls = []
    run = SearchRun(space, lambda i: calls.append(i) or float(i), Budget(max_share=0.3))
    assert run.limit == 3
    drive(make_strategy("random"), run)
    assert len(calls) == 3 == len(set(calls))
    assert run.evaluate(calls[0]) == calls[0], "a known result is free, even after the budget is spent"


def test_budget_limits_time_but_always_evaluates_one(clock):
    space = SearchSpace.from_configs(configs())

    def slow(i):
        clock.advance(1.0)  # each evaluation takes one (fake) second
        return 1.0

    run = drive(make_strategy("random"), SearchRun(space, slow, Budget(max_time_s=0.5)))
    assert len(run.results) == 1
    run = drive(make_strategy("random"), SearchRun(space, slow, Budget(max_time_s=3.5)))
    assert len(run.results) == 4  # started at 0, 1, 2 and 3 s: within the budget; none from 4 s on


def test_exhaustive_evaluates_warm_start_first_then_everything():
    space = SearchSpace.from_configs(configs())
    run = drive(make_strategy("exhaustive"), SearchRun(space, float), [7, 3])
    assert run.order[:2] == [7, 3] and sorted(run.order) == list(range(10))
    assert run.best() == 0


def test_failures_are_inf_and_nan_is_a_failure():
    space = SearchSpace.from_configs(configs())
    run = drive(make_strategy("exhaustive"), SearchRun(space, lambda i: math.nan if i < 9 else 2.0))
    assert run.best() == 9
    assert all(math.isinf(v) for i, v in run.results.items() if i < 9)


@pytest.mark.parametrize("bad", [-math.inf, -1.0, math.nan])
def test_a_negative_time_is_a_failure_and_the_search_goes_on_as_after_one(bad):
    """A negative time (as a do_bench may answer) was the best result, and minus infinity left
    ``found_valid`` False while valid results were in: the adaptive stop never came (the whole space
    was measured) and the search restarted as if nothing valid had been found."""
    values = [list(range(10)), list(range(10))]
    space = SearchSpace.from_table(["a", "b"], values, [(a, b) for a in range(10) for b in range(10)])

    def objective(i):
        return bad if i == first else 1.0 + i % 7

    first = drive(make_strategy("random"), SearchRun(space, float, Budget(max_share=0.01))).order[0]
    failed_first = SearchRun(space, lambda i: math.inf if i == first else objective(i))
    baseline = drive(make_strategy("random"), failed_first)
    run = drive(make_strategy("random"), SearchRun(space, objective, Budget(max_repeat=3)))
    assert run.results[first] == math.inf and run.search.results[first] == math.inf
    assert run.search.found_valid and run.best() == run.search.best() != first
    assert run.order == baseline.order and run.search.attempt == 0
    search = BatchSearch(make_strategy("random"), space, known={first: bad})
    assert search.results == {first: math.inf} and search.best() is None


def test_restarts_continue_without_replacement():
    space = SearchSpace.from_configs(configs())
    valid = 5
    run = drive(
        make_strategy("random"),
        SearchRun(
            space, lambda i: 1.0 if i == valid else math.inf, Budget(max_share=0.1, max_repeat=10, seed=1)
        ),
    )
    assert run.best() == valid
    assert len(run.results) == len(set(run.order))


@pytest.mark.parametrize(
    "bad", [dict(max_share=0), dict(max_share=1.5), dict(max_time_s=0), dict(max_repeat=0), dict(seed=-1)]
)
def test_bad_budgets_are_rejected(bad):
    with pytest.raises(ValueError):
        Budget(**bad)


def test_a_budget_without_a_time_limit_is_stored_as_json():
    """search_max_search_t=float("inf") made the storage identity uncomputable (JSON has no infinity),
    so nothing was ever stored; it is stored as "inf", not as None (the default's time cap)."""
    for budget in (Budget(max_time_s=math.inf), Budget(max_time_s=math.inf, max_share=0.5)):
        stored = json.loads(json.dumps(budget.as_dict(), allow_nan=False))
        assert stored["max_time_s"] == "inf"
    assert Budget(max_time_s=math.inf).as_dict() != Budget().as_dict()


def test_unknown_strategy():
    with pytest.raises(ValueError, match="unknown search strategy"):
        make_strategy("annealing")


class _Counted:
    """A config value that counts how often it is compared."""

    compared = 0

    def __init__(self, value: int) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        _Counted.compared += 1
        return isinstance(other, _Counted) and other.value == self.value

    def __hash__(self) -> int:
        return hash(self.value)


def test_a_dimension_of_many_values_is_indexed_without_comparing_every_pair():
    """Each candidate's value was looked up in a list of the values seen: a space of 100,000 configs
    over one parameter of as many values took four minutes to index, at every tuned key."""
    n = 2000
    values = [_Counted(v) for v in range(n)]
    _Counted.compared = 0
    space = SearchSpace.from_configs([triton.Config({"V": v}) for v in values])
    assert _Counted.compared < 10 * n  # about n * n / 2 when each value is looked up in a list
    assert space.points == [(i,) for i in range(n)] and space.values == (tuple(values),)


def test_equal_values_of_different_types_are_one_value_of_the_grid():
    space = SearchSpace.from_configs(
        [triton.Config({"V": v, "W": w}) for v, w in [(1, "a"), (1.0, "b"), (2, "a"), (True, "c")]]
    )
    assert space.values[0] == (1, 2) and [p[0] for p in space.points] == [0, 0, 1, 0]
