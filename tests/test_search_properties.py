"""Properties of the batch interface under any results: a search ends, hands out no candidate twice,
keeps its budget, picks the fastest valid result, and is reproducible (hypothesis)."""

from __future__ import annotations

import importlib.util
import itertools
import math
import random
import warnings
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from triton_dejavu_like.search import BatchSearch, Budget, SearchSpace, make_strategy

#: Bayesian optimisation is checked where its extra is installed.
STRATEGIES = ["exhaustive", "random"] + (["bayesian"] if importlib.util.find_spec("smac") else [])

#: What a do_bench (or a replay) may answer: failures, NaN, a negative time, 0 from a timer that
#: rounds, and times far apart.
TIMES = st.one_of(
    st.sampled_from([math.inf, math.nan, -1.0, -math.inf, 0.0, 1e-9, 1e9, 1.0]),
    st.floats(min_value=1e-9, max_value=1e9),
)


@dataclass
class Case:
    shape: tuple[int, ...]
    times: list[float]
    seconds: list[float]  # how long each measurement takes (a fake clock)
    budget: Budget
    warm_start: list[int]
    batches: list[int]
    strategy: str
    completion_seed: int
    cancel_share: float

    @property
    def space(self) -> SearchSpace:
        values = [list(range(n)) for n in self.shape]
        names = [f"d{i}" for i in range(len(self.shape))]
        return SearchSpace.from_table(names, values, list(itertools.product(*values)))


@st.composite
def cases(draw) -> Case:
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
    n = math.prod(shape)
    pattern = draw(st.sampled_from(["any", "all fail", "all but one fail", "ties", "zeros"]))
    if pattern == "any":
        times = draw(st.lists(TIMES, min_size=n, max_size=n))
    elif pattern in ("all fail", "all but one fail"):
        times = [math.inf] * n
        if pattern == "all but one fail":
            times[draw(st.integers(0, n - 1))] = draw(TIMES)
    else:
        times = [1.0 if pattern == "ties" else 0.0] * n
    budget = Budget(
        max_time_s=draw(st.sampled_from([None, 1e-9, 2.0, 10.0, math.inf])),
        max_share=draw(st.one_of(st.none(), st.just(1.0), st.floats(1e-6, 1.0))),
        max_repeat=draw(st.integers(1, 3)),
        seed=draw(st.integers(0, 3)),
    )
    return Case(
        shape,
        times,
        draw(st.lists(st.floats(0.0, 2.0), min_size=n, max_size=n)),
        budget,
        draw(st.lists(st.integers(-2, n + 2), max_size=5)),  # repeated and out of range too
        draw(st.lists(st.integers(1, 32), min_size=1, max_size=4)),
        draw(st.sampled_from(STRATEGIES)),
        draw(st.integers(0, 99)),
        draw(st.sampled_from([0.0, 0.0, 0.2])),
    )


def run(case: Case, clock) -> BatchSearch:
    """Drive a search with several candidates in flight, completed in a seeded random order, some
    given back unmeasured; check on the way that nothing is handed out twice or past the time limit."""
    space = case.space
    search = BatchSearch(make_strategy(case.strategy), space, case.budget, case.warm_start)
    rng = random.Random(case.completion_seed)
    flight: list[int] = []
    for step in itertools.count():
        assert step < 20 * len(space) + 100, "the search does not end"
        attempt, counted, late = search.attempt, search.counted, search.elapsed_s >= search.time_limit_s
        batch = search.ask(case.batches[step % len(case.batches)])
        assert len(set(batch)) == len(batch) and not set(batch) & (set(search.results) | set(flight))
        if batch and late and search.attempt == attempt:
            assert counted == 0 and len(batch) == 1, "handed out after the time limit"
        flight += batch
        if not flight:
            break
        index = flight.pop(rng.randrange(len(flight)))
        if rng.random() < case.cancel_share:
            search.cancel(index)
            continue
        clock.advance(case.seconds[index])
        search.tell(index, case.times[index])
    search.close()
    return search


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=cases())
def test_any_results_in_any_order_keep_the_searchs_promises(case, clock):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # BO falling back to random proposals warns: it must not here
        search = run(case, clock)
        again = run(case, clock)
    assert search.done and not search.pending
    assert again.issued == search.issued, "the same seed and results gave another search"
    limit = case.budget.max_evaluations(len(search.space))
    assert limit == max(1, math.ceil((case.budget.max_share or 1.0) * len(search.space) - 1e-9))
    assert len(search.results) <= limit * (search.attempt + 1)
    assert search.attempt < case.budget.max_repeat
    valid = {i: v for i, v in search.results.items() if 0 <= v < math.inf}
    assert search.found_valid == bool(valid)
    assert all(v == math.inf for i, v in search.results.items() if i not in valid)  # NaN, negative
    if valid:
        assert search.results[search.best()] == min(valid.values())
    else:
        assert search.best() is None
    if case.budget.max_share == 1.0 and search.time_limit_s == math.inf:  # given back ones too
        assert len(search.results) == len(search.space)


@pytest.mark.parametrize("name", STRATEGIES[1:])
def test_other_seeds_give_other_searches(name):
    values = [list(range(10)), list(range(10))]
    space = SearchSpace.from_table(["a", "b"], values, list(itertools.product(*values)))
    issued = set()
    for seed in range(3):
        search = BatchSearch(make_strategy(name), space, Budget(max_share=0.2, seed=seed))
        while batch := search.ask(4):
            for index in batch:
                search.tell(index, 1.0 + index % 13)
        search.close()
        issued.add(tuple(search.issued))
    assert len(issued) == 3
