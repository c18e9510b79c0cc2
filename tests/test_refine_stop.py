"""The careful stage on a GPU ends early once the pick is settled, and only then (CPU, stubbed timer)."""

from __future__ import annotations

import random

import pytest

from triton_dejavu_like.measure.bench import (
    REFINE_STEPS,
    GpuBenchmarker,
    TimingPolicy,
    quantiles_of,
    round_orders,
    settled,
)


def rounds_of(times: list[float], n: int, noise: float, rng: random.Random) -> list[list[float]]:
    """``n`` interleaved rounds: each finalist's time with its own noise, times a drift per round."""
    out: list[list[float]] = [[] for _ in times]
    for _ in range(n):
        drift = 1 + rng.uniform(-0.05, 0.05)  # clocks move between rounds, alike for every finalist
        for acc, t in zip(out, times):
            acc.append(t * drift * (1 + rng.gauss(0, noise)))
    return out


class StubTimer(GpuBenchmarker):
    """The GPU benchmarker with its CUDA-event timing replaced by known per-finalist times."""

    def __init__(self, times: list[float], noise: float, policy: TimingPolicy) -> None:
        super().__init__(None, None, False, policy)
        self.times, self.noise = times, noise
        self.rng = random.Random(0)
        self.requested: list[int] = []

    def _estimate(self, call):
        return self.times[self.calls.index(call)]

    def _timed(self, calls, rounds):
        self.requested.append(rounds)
        return rounds_of([self.times[self.calls.index(c)] for c in calls], rounds, self.noise, self.rng)

    def refine_times(self) -> list[list[float]]:
        self.calls = [lambda: None for _ in self.times]
        return self.refine(self.calls)


def test_a_clear_leader_is_settled_and_a_close_race_is_not():
    rng = random.Random(1)
    assert settled(rounds_of([0.20, 0.206, 0.22], 125, 0.01, rng), margin=0.005)  # 3% and 10% slower
    tied = rounds_of([0.20, 0.20], 400, 0.002, rng)
    assert settled(tied, margin=0.005)  # as fast as each other: either pick is within the margin
    assert not settled(tied, margin=0.0)  # without a margin only a finalist shown slower settles it
    assert not settled(rounds_of([0.20, 0.201], 40, 0.03, rng), margin=0.005)  # 0.5% apart, noisy


def test_the_leader_is_the_best_median_whatever_the_order():
    rng = random.Random(2)
    samples = rounds_of([0.23, 0.20, 0.21], 125, 0.01, rng)
    assert settled(samples, margin=0.005)
    assert settled(samples[::-1], margin=0.005)


def test_careful_stage_stops_after_a_quarter_when_the_lead_is_clear():
    policy = TimingPolicy()
    timer = StubTimer([0.21, 0.20, 0.26, 0.23, 0.22], noise=0.01, policy=policy)
    medians = [q[0] for q in timer.refine_times()]
    full = int(policy.final_ms / 0.26)  # rounds the slowest finalist's time allows
    assert timer.requested == [-(-full // REFINE_STEPS)]
    assert min(range(5), key=medians.__getitem__) == 1


def test_careful_stage_runs_every_round_while_two_finalists_are_close():
    policy = TimingPolicy()
    timer = StubTimer([0.200, 0.2006, 0.25], noise=0.03, policy=policy)
    timer.refine_times()
    assert sum(timer.requested) == int(policy.final_ms / 0.25)
    assert len(timer.requested) == REFINE_STEPS


def test_no_margin_means_one_full_careful_stage():
    policy = TimingPolicy(final_margin=0.0)
    timer = StubTimer([0.21, 0.20, 0.30], noise=0.01, policy=policy)
    timer.refine_times()
    assert timer.requested == [int(policy.final_ms / 0.30)]


def test_a_policy_that_cannot_work_is_refused_with_every_reason():
    with pytest.raises(ValueError, match=r"finalists=-1 must be >= 0; final_margin=1\.5 must be in \[0, 1\)"):
        TimingPolicy(final_margin=1.5, finalists=-1)
    assert TimingPolicy(final_margin=0, finalists=0, final_ms=0).finalists == 0  # the limits themselves


def test_no_finalists_no_rounds():
    timer = StubTimer([], noise=0.01, policy=TimingPolicy())
    assert timer.refine([]) == [] and timer.requested == []


def test_each_round_launches_every_finalist_once_in_a_shuffled_order():
    orders = round_orders(5, 400, random.Random(0))
    assert all(sorted(order) == list(range(5)) for order in orders)
    # no finalist keeps a slot: each one is first in about a fifth of the rounds
    firsts = [sum(order[0] == c for order in orders) for c in range(5)]
    assert min(firsts) > 400 / 5 * 0.6
    assert orders == round_orders(5, 400, random.Random(0))  # the same in every process


@pytest.mark.parametrize("n_calls", [2, 4, 5])
def test_a_position_bias_in_the_rounds_does_not_favour_a_finalist(n_calls):
    """Equal kernels whose launches run slower the later they come in a round (2% per slot, 1%
    noise; on an H100 the position moved a 13 us kernel's time by 3-4%): in a fixed order the first
    finalist always looks fastest, with the rounds' shuffled orders their medians stay together."""
    rng = random.Random(3)

    def medians(orders: list[list[int]]) -> list[float]:
        times: list[list[float]] = [[] for _ in range(n_calls)]
        for order in orders:
            for slot, c in enumerate(order):
                times[c].append((1 + 0.02 * slot) * (1 + rng.gauss(0, 0.01)))
        return [quantiles_of(t, (0.5,))[0] for t in times]

    fixed = medians([list(range(n_calls))] * 400)
    shuffled = medians(round_orders(n_calls, 400, random.Random(0)))
    assert max(fixed) / min(fixed) > 1 + 0.02 * (n_calls - 1) * 0.8  # the failure the shuffle prevents
    assert max(shuffled) / min(shuffled) < 1.01
