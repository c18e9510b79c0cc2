"""The numerical check: candidates whose outputs differ from the reference's are ruled out.

Kernels run under the interpreter; a deterministic ``do_bench`` makes the broken configs the
fastest, so a test fails if the check lets one through.
"""

from __future__ import annotations

import json
import os

import pytest
import torch
import triton
import triton.language as tl
from kernels import FakeBench, add_kernel, grid, observe_block, scale_kernel
from triton_release import since_triton

import triton_dejavu_like as tdl
from triton_dejavu_like.measure.numerics import DEFAULT_TOLERANCES, compare


@triton.jit
def double_in_tiles(x_ptr, out_ptr, n, BLOCK: tl.constexpr, TILE: tl.constexpr):
    """out = 2 * x; each program covers BLOCK elements in BLOCK // TILE tiles of TILE.

    A TILE that does not divide BLOCK leaves the end of every block unwritten: the mask is right,
    the tiling is not.
    """
    pid = tl.program_id(0)
    for t in range(BLOCK // TILE):
        offs = pid * BLOCK + t * TILE + tl.arange(0, TILE)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


@triton.jit
def double_in_place(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2 + 1, mask=mask)


@triton.jit
def double_with_partial_sums(x_ptr, out_ptr, partial_ptr, n, BLOCK: tl.constexpr):
    """out = 2 * x, and partial[pid] = the sum of the block: scratch whose layout depends on BLOCK."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, x * 2, mask=mask)
    tl.store(partial_ptr + pid, tl.sum(x, axis=0))


# BLOCK identifies a config; 96/64 is the broken tiling, and the fastest.
TILED = [(32, 16), (96, 64), (64, 32), (128, 128)]
TILED_TIMES = {32: 4.0, 96: 0.5, 64: 2.0, 128: 3.0}


def timed_by_block(kernel, times, **options):
    """``kernel`` under an autotuner keyed on n, timed by ``times[BLOCK]`` wherever it runs."""
    bench = FakeBench(times)
    return tdl.autotune(key=["n"], do_bench=bench, pre_hook=observe_block(bench), **options)(kernel)


def tiled_tuner(**options):
    options.setdefault("configs", [triton.Config({"BLOCK": b, "TILE": t}) for b, t in TILED])
    return timed_by_block(double_in_tiles, TILED_TIMES, **options)


def run_tiled(tuner, n=1000):
    x = torch.arange(1, n + 1, dtype=torch.float32)
    out = torch.zeros(n)
    tuner[grid(n)](x, out, n)
    return x, out


def ruled_out(tuner) -> dict[int, str]:
    (entry,) = json.loads(tuner.cache_path().read_text())["entries"].values()
    return {r["config"]["kwargs"]["BLOCK"]: r["reason"] for r in entry["ruled_out"]}


def test_without_the_check_the_broken_tiling_wins():
    tuner = tiled_tuner()
    run_tiled(tuner)  # correct by luck: earlier benchmark launches filled the gaps in this out
    assert tuner.best_config.kwargs == {"BLOCK": 96, "TILE": 64}
    x, out = run_tiled(tuner)
    assert not torch.equal(out, 2 * x)  # on a fresh buffer, the gaps show


@pytest.mark.parametrize("isolated", [False, True], ids=["in_process", "isolated"])
def test_a_tiling_that_breaks_masking_is_ruled_out(isolated):
    tuner = tiled_tuner(numerical_check=True, use_isolated_process=isolated)
    x, out = run_tiled(tuner)
    assert torch.equal(out, 2 * x)
    assert tuner.best_config.kwargs == {"BLOCK": 64, "TILE": 32}
    reasons = ruled_out(tuner)
    assert list(reasons) == [96]
    assert reasons[96].startswith("NumericalMismatch: 'out_ptr': 320 of 1000 elements differ, max abs err")
    assert "\n" not in reasons[96]


def exit_4(nargs):
    os._exit(4)


def checked_in_workers(configs: list[triton.Config]) -> dict[int, str]:
    """Tune ``configs`` with the numerical check in isolated workers; the output must be right. The
    reasons the candidates were ruled out for, by BLOCK."""
    tuner = tiled_tuner(configs=configs, numerical_check=True, use_isolated_process=True)
    x, out = run_tiled(tuner)
    assert torch.equal(out, 2 * x)
    return ruled_out(tuner)


def test_a_replacement_worker_recomputes_the_reference():
    """The reference (the first config) ran in a worker that a later candidate killed."""
    configs = [
        triton.Config({"BLOCK": 32, "TILE": 16}),
        triton.Config({"BLOCK": 256, "TILE": 256}, pre_hook=exit_4),
        triton.Config({"BLOCK": 96, "TILE": 64}),
        triton.Config({"BLOCK": 64, "TILE": 32}),
    ]
    reasons = checked_in_workers(configs)
    assert reasons[256] == "CandidateCrashed: worker exited with code 4"
    assert reasons[96].startswith("NumericalMismatch: 'out_ptr'")
    assert set(reasons) == {256, 96}  # 64/32 matched the reference the new worker recomputed


def log_and_exit_4(nargs):
    """A config pre_hook that records each run (in $TDL_TEST_RUNS), then kills its worker."""
    with open(os.environ["TDL_TEST_RUNS"], "a") as f:
        f.write(f"{os.getpid()}\n")
    os._exit(4)


def test_a_first_config_that_kills_its_worker_for_the_reference_is_not_run_again(tmp_path, monkeypatch):
    """Tried as the reference, the first config kills its worker: it was measured again later, which
    cost another worker start (and, for a hang, its timeout once more)."""
    runs = tmp_path / "runs"
    monkeypatch.setenv("TDL_TEST_RUNS", str(runs))
    configs = [
        triton.Config({"BLOCK": 256, "TILE": 256}, pre_hook=log_and_exit_4),
        triton.Config({"BLOCK": 32, "TILE": 16}),
        triton.Config({"BLOCK": 96, "TILE": 64}),
    ]
    reasons = checked_in_workers(configs)
    assert len(runs.read_text().split()) == 1
    assert reasons[256] == "CandidateCrashed: worker exited with code 4"
    assert set(reasons) == {256, 96}


def reference_double(x_ptr, out_ptr, n):
    out_ptr.copy_(2 * x_ptr)


def test_a_reference_function_catches_a_wrong_first_candidate(tmp_path):
    wrong_first = [triton.Config({"BLOCK": b, "TILE": t}) for b, t in [(96, 64), (32, 16), (64, 32)]]

    def writes_and_returns(x_ptr, out_ptr, n):  # the argument itself: each candidate overwrites it
        out_ptr.copy_(2 * x_ptr)
        return {"out_ptr": out_ptr}

    for name, reference in (
        ("writes", reference_double),
        ("returns", lambda x_ptr, out_ptr, n: {"out_ptr": 2 * x_ptr}),
        ("writes_and_returns", writes_and_returns),  # every candidate matched itself, the wrong one too
        ("returns_a_view", lambda x_ptr, out_ptr, n: {"out_ptr": out_ptr.copy_(2 * x_ptr)[:]}),
    ):
        tuner = tiled_tuner(configs=wrong_first, reference_fn=reference, custom_data_storage=tmp_path / name)
        x, out = run_tiled(tuner)
        assert torch.equal(out, 2 * x)
        assert list(ruled_out(tuner)) == [96]


def test_an_in_place_kernel_is_checked_on_its_original_inputs():
    configs = [triton.Config({"BLOCK": b}) for b in (16, 32, 64)]
    tuner = timed_by_block(
        double_in_place, {16: 3.0, 32: 2.0, 64: 1.0}, configs=configs, numerical_check=True
    )
    x0 = torch.arange(100, dtype=torch.float32)
    x = x0.clone()
    tuner[grid(100)](x, 100)
    assert len(tuner.configs_timings) == 3 and all(t[0] < 10 for t in tuner.configs_timings.values())
    assert torch.equal(x, 2 * x0 + 1)  # the inputs were restored after tuning, then launched once


def test_declared_outputs_leave_scratch_buffers_out_of_the_comparison(tmp_path):
    configs = [triton.Config({"BLOCK": b}) for b in (16, 32, 64)]

    def tune(**check):
        storage = tmp_path / "-".join(sorted(check))
        tuner = timed_by_block(
            double_with_partial_sums,
            {16: 3.0, 32: 2.0, 64: 1.0},
            configs=configs,
            numerical_check=True,
            custom_data_storage=storage,
            **check,
        )
        x = torch.arange(200, dtype=torch.float32)
        out, partial = torch.zeros(200), torch.zeros(16)
        tuner[grid(200)](x, out, partial, 200)
        assert torch.equal(out, 2 * x)
        return ruled_out(tuner)

    detected = tune()  # both out and the per-block sums change: other block sizes differ on the latter
    assert set(detected) == {32, 64} and all("'partial_ptr'" in r for r in detected.values())
    assert tune(check_outputs=["out_ptr"]) == {}
    assert tune(check_outputs="out_ptr") == {}  # one name as a string, as key takes it (a TypeError)


def test_environment_turns_the_check_on_without_moving_the_stored_results(tmp_path, monkeypatch):
    """TRITON_DEJAVU_NUMERICAL_CHECK=1 set only while tuning ahead of time: the check rules the broken
    tiling out, and a serving process without the variable restores that winner (same file)."""
    monkeypatch.delenv("TRITON_DEJAVU_NUMERICAL_CHECK", raising=False)
    unchecked = tiled_tuner().cache_path()
    monkeypatch.setenv("TRITON_DEJAVU_NUMERICAL_CHECK", "1")
    tuner = tiled_tuner()
    assert tuner.cache_path() == unchecked
    x, out = run_tiled(tuner)
    assert torch.equal(out, 2 * x)
    assert list(ruled_out(tuner)) == [96]
    winner = tuner.best_config.kwargs

    monkeypatch.delenv("TRITON_DEJAVU_NUMERICAL_CHECK")
    monkeypatch.setenv("TRITON_DEJAVU_READ_ONLY", "1")
    serving = tiled_tuner()
    x, out = run_tiled(serving)
    assert (serving.last_decision, serving.best_config.kwargs) == ("restored", winner)
    assert torch.equal(out, 2 * x)
    # the check asked for in code is part of the identity: it re-tunes rather than restore
    assert tiled_tuner(numerical_check=True).cache_path() != unchecked
    assert tiled_tuner(check_rtol=0.0).cache_path() != unchecked
    assert tiled_tuner(numerical_check=False).cache_path() == unchecked


def test_check_arguments_are_validated():
    with pytest.raises(
        ValueError, match="check_outputs contains names that are not kernel arguments: result"
    ):
        tdl.autotune(key=["n"], configs=[triton.Config({"BLOCK": 16})], check_outputs=["result"])(add_kernel)
    with pytest.raises(ValueError, match="check_rtol must be >= 0"):
        tdl.autotune(key=["n"], configs=[triton.Config({"BLOCK": 16})], check_rtol=-1)(add_kernel)
    tuner = tdl.autotune(
        key=["n"], configs=[triton.Config({"BLOCK": b}) for b in (16, 32)], check_outputs=["n"]
    )(add_kernel)
    with pytest.raises(ValueError, match="check_outputs names 'n', which are not tensor arguments"):
        tuner[grid(8)](torch.zeros(8), torch.zeros(8), torch.zeros(8), 8)


def test_a_failing_reference_function_fails_tuning_with_its_error():
    def broken_reference(**arguments):
        raise KeyError("no reference today")

    tuner = tiled_tuner(reference_fn=broken_reference)
    with pytest.raises(KeyError, match="no reference today"):
        run_tiled(tuner)


@pytest.mark.parametrize(
    ("reference", "error", "said"),
    [
        (lambda x_ptr, out_ptr, n: {"out_ptr": torch.zeros(2, 5)}, ValueError, "of shape \\(2, 5\\)"),
        (lambda x_ptr, out_ptr, n: {"nope": 2 * x_ptr}, TypeError, "the keys must name tensor arguments"),
        (lambda x_ptr, out_ptr, n: [2 * x_ptr], TypeError, "must return None or a mapping"),
    ],
    ids=["shape", "key", "kind"],
)
def test_what_reference_function_returns_wrongly_ends_tuning_naming_it(reference, error, said):
    """Its own error, which every candidate meets alike: it was each candidate's failure ("all 3
    candidate configs failed: NumericalMismatch"), stopped_by None."""
    tuner = tiled_tuner(reference_fn=reference)
    with pytest.raises(error, match=said) as info:
        run_tiled(tuner)
    assert isinstance(info.value, tdl.AutotuningError) and info.value.stopped_by == "reference_fn"


# --- where the reference starts, and which candidate may be it --------------------------------------


@triton.jit
def add_into_in_tiles(x_ptr, out_ptr, n, BLOCK: tl.constexpr, TILE: tl.constexpr):
    """out += x with atomic adds, tiled as in double_in_tiles: a TILE larger than BLOCK adds nothing."""
    pid = tl.program_id(0)
    for t in range(BLOCK // TILE):
        offs = pid * BLOCK + t * TILE + tl.arange(0, TILE)
        mask = offs < n
        tl.atomic_add(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


#: 32/64, 16/32 and 8/16 run no tile, so they write nothing; they are the fastest. There are more of
#: them than the first configs tried as the reference before the search (tuning.REFERENCE_TRIES), so
#: the reference is the first candidate measured that writes, and they are judged after the search.
SKIPPING_FIRST = [(32, 64), (16, 32), (8, 16), (64, 32), (128, 128)]
BLOCK_TIMES = {32: 0.5, 16: 0.6, 8: 0.7, 64: 2.0, 128: 3.0}  # 32 is the fastest
IN_PROCESS_OR_ISOLATED = pytest.mark.parametrize("isolated", [False, True], ids=["in_process", "isolated"])


def tiled_configs(tiles, hooks=None):
    """Configs of (BLOCK, TILE) pairs; ``hooks``: a config pre_hook by BLOCK."""
    return [triton.Config({"BLOCK": b, "TILE": t}, pre_hook=(hooks or {}).get(b)) for b, t in tiles]


def accumulating_tuner(tiles, **options):
    """``add_into_in_tiles`` with reset_to_zero on its output, checked. The block is observed by a
    post_hook: a tuner pre_hook would replace the one that resets."""
    bench = FakeBench(BLOCK_TIMES)

    def observe_block_after(nargs, exception):
        bench.current_block = nargs["BLOCK"]

    return tdl.autotune(
        key=["n"],
        configs=tiled_configs(tiles),
        do_bench=bench,
        post_hook=observe_block_after,
        reset_to_zero=["out_ptr"],
        numerical_check=True,
        **options,
    )(add_into_in_tiles)


def run_accumulating(tuner, n=1000):
    x = torch.arange(1, n + 1, dtype=torch.float32)
    out = torch.full((n,), 7.0)  # what an earlier call left: reset_to_zero clears it before each launch
    tuner[grid(n)](x, out, n)
    return x, out


def add_reference(x_ptr, out_ptr, n):
    out_ptr += x_ptr  # as the kernel does: into the output as the launch finds it


def dejavu_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, tdl.DejavuWarning)]


@IN_PROCESS_OR_ISOLATED
def test_a_reference_function_starts_from_the_outputs_reset_to_zero(isolated):
    tuner = accumulating_tuner(
        [(32, 16), (64, 32), (128, 128)], reference_fn=add_reference, use_isolated_process=isolated
    )
    x, out = run_accumulating(tuner)
    assert ruled_out(tuner) == {}
    assert tuner.best_config.kwargs == {"BLOCK": 32, "TILE": 16}
    assert torch.equal(out, x)


@IN_PROCESS_OR_ISOLATED
@pytest.mark.parametrize("declared", [False, True], ids=["detected", "declared"])
def test_a_first_candidate_that_writes_nothing_is_checked_once_another_writes(isolated, declared, recwarn):
    """Neither the reference (the others would mismatch it) nor timed unchecked (it would win)."""
    tuner = timed_by_block(
        double_in_tiles,
        BLOCK_TIMES,
        configs=tiled_configs(SKIPPING_FIRST),
        numerical_check=True,
        use_isolated_process=isolated,
        check_outputs=["out_ptr"] if declared else None,
    )
    x, out = run_tiled(tuner)
    assert torch.equal(out, 2 * x)
    assert tuner.best_config.kwargs == {"BLOCK": 64, "TILE": 32}
    reasons = ruled_out(tuner)
    assert sorted(reasons) == [8, 16, 32]
    assert reasons[32].startswith(
        "NumericalMismatch: it wrote none of the outputs; 'out_ptr': 1000 of 1000 elements differ"
    )
    assert dejavu_warnings(recwarn) == []  # the others write: no warning that nothing is written


@IN_PROCESS_OR_ISOLATED
def test_a_first_config_that_writes_nothing_gives_way_to_the_next_listed_as_the_reference(isolated):
    """Before the search, the first configs of the list are run until one writes: 64/32 is the
    reference, and 32/64 (the fastest) is judged against it when it is measured."""
    tuner = timed_by_block(
        double_in_tiles,
        BLOCK_TIMES,
        configs=tiled_configs([(32, 64), (64, 32), (128, 128)]),
        numerical_check=True,
        use_isolated_process=isolated,
    )
    x, out = run_tiled(tuner)
    assert torch.equal(out, 2 * x)
    assert tuner.best_config.kwargs == {"BLOCK": 64, "TILE": 32}
    reasons = ruled_out(tuner)
    assert list(reasons) == [32]
    assert reasons[32].startswith("NumericalMismatch: 'out_ptr': 1000 of 1000 elements differ")


@IN_PROCESS_OR_ISOLATED
def test_outputs_reset_to_zero_are_not_taken_for_a_first_candidate_s_writes(isolated):
    """32/64 adds nothing: the zeros in its output are reset_to_zero's, not its writes (the output
    held 7s), so it must not become the reference that rules the others out."""
    tuner = accumulating_tuner(SKIPPING_FIRST, use_isolated_process=isolated)
    x, out = run_accumulating(tuner)
    assert tuner.best_config.kwargs == {"BLOCK": 64, "TILE": 32}
    reasons = ruled_out(tuner)
    assert sorted(reasons) == [8, 16, 32]
    assert reasons[32].startswith(
        "NumericalMismatch: it wrote none of the outputs; 'out_ptr': 1000 of 1000 elements differ, "
        "max abs err 1e+03"  # from zeros, where the launch started
    )
    assert torch.equal(out, x)


def test_a_candidate_that_wrote_nothing_in_a_dead_worker_is_still_checked():
    """32/64 is timed unchecked in the first worker, 256 kills it, 64/32 becomes the reference in the
    next one: the verdict on 32/64 must not die with the worker that timed it."""
    tiles = [SKIPPING_FIRST[0], (256, 256), *SKIPPING_FIRST[1:]]
    tuner = timed_by_block(
        double_in_tiles,
        BLOCK_TIMES,
        configs=tiled_configs(tiles, {256: exit_4}),
        numerical_check=True,
        use_isolated_process=True,
    )
    x, out = run_tiled(tuner)
    assert torch.equal(out, 2 * x)
    reasons = ruled_out(tuner)
    assert set(reasons) == {32, 16, 8, 256}
    assert reasons[32].startswith("NumericalMismatch: it wrote none of the outputs; 'out_ptr'")


# --- compare: dtype-aware tolerances --------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_default_tolerance_admits_rounding_and_rejects_real_errors(dtype):
    rtol, _ = DEFAULT_TOLERANCES[str(dtype).removeprefix("torch.")]
    reference = torch.linspace(-50, 50, 1001, dtype=torch.float64)
    near = reference * (1 + rtol / 2)
    assert compare("out", near.to(dtype), reference.to(dtype)) is None
    far = reference.clone()
    far[123] += 5.0  # a wrong element: off by a tenth of the output's scale
    reason = compare("out", far.to(dtype), reference.to(dtype))
    assert reason is not None and reason.startswith("'out': 1 of 1001 elements differ, max abs err")


def test_small_values_are_judged_against_the_outputs_scale():
    reference = torch.tensor([1000.0, 1e-3, -2e-3])
    summed_in_another_order = reference + torch.tensor([0.0, 4e-3, 4e-3])  # cancellation noise
    assert compare("out", summed_in_another_order, reference) is None
    assert compare("out", summed_in_another_order, reference, atol=1e-5, rtol=1e-4) is not None


def test_integers_must_match_exactly_and_nans_match_nans():
    assert compare("idx", torch.tensor([1, 2, 2**40 + 1]), torch.tensor([1, 2, 2**40 + 1])) is None
    assert compare("idx", torch.tensor([1, 2, 2**40 + 1]), torch.tensor([1, 2, 2**40])) == (
        "'idx': 1 of 3 elements differ, max abs err 1 (rtol 0, atol 0)"
    )
    assert compare("idx", torch.tensor([1, 3]), torch.tensor([1, 2]), atol=1) is None
    nan = float("nan")
    assert compare("out", torch.tensor([nan, 1.0]), torch.tensor([nan, 1.0])) is None
    assert "max abs err nan" in compare("out", torch.tensor([nan, 1.0]), torch.tensor([0.0, 1.0]))
    assert compare("out", torch.tensor([float("inf")]), torch.tensor([float("inf")])) is None
    assert (
        compare("out", torch.zeros(2, 3), torch.zeros(3, 2)) == "'out' has shape (2, 3), the reference (3, 2)"
    )


def test_32_bit_integers_beyond_float32_precision_are_told_apart():
    """float32 holds integers exactly only up to 2**24: larger indices must not be compared there."""
    big = 2**24
    for dtype in (torch.int32, torch.uint32) if hasattr(torch, "uint32") else (torch.int32,):
        actual, expected = torch.tensor([1, big + 1], dtype=dtype), torch.tensor([1, big], dtype=dtype)
        assert (
            compare("idx", actual, expected)
            == "'idx': 1 of 2 elements differ, max abs err 1 (rtol 0, atol 0)"
        )
        assert compare("idx", actual, expected, atol=0.5, rtol=0) is not None  # tolerances for float outputs
        assert compare("idx", actual, expected, atol=1, rtol=0) is None


def test_fp8_outputs_are_compared_in_float32_within_two_units():
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("no float8 in this torch")
    reference = torch.tensor([1.0, 2.0, 4.0, 8.0]).to(torch.float8_e4m3fn)
    one_unit_up = torch.tensor([1.125, 2.25, 4.5, 9.0]).to(torch.float8_e4m3fn)
    assert compare("q", one_unit_up, reference) is None
    assert compare("q", (torch.tensor([1.0, 2.0, 4.0, 12.0])).to(torch.float8_e4m3fn), reference) is not None


@triton.jit
def reads_only(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.load(x_ptr + offs, mask=offs < n)


def writes_nothing(**arguments):
    return None


@pytest.mark.parametrize("isolated", [False, True], ids=["in_process", "isolated"])
@pytest.mark.parametrize("reference", [None, writes_nothing], ids=["candidates", "reference_fn"])
def test_a_check_with_no_output_to_compare_warns_the_user_once(tmp_path, isolated, reference):
    """No candidate writes anything (the tuning run tells when its search is over), or reference_fn
    writes nothing. Isolated, reference_fn runs in workers: their warning must reach this process,
    once, although the candidate that kills the first worker makes its replacement run it again."""
    killer = [triton.Config({"BLOCK": 32}, pre_hook=exit_4)] if isolated else []
    tuner = timed_by_block(
        reads_only,
        {16: 2.0, 32: 1.0, 64: 3.0},
        configs=[triton.Config({"BLOCK": 16}), *killer, triton.Config({"BLOCK": 64})],
        numerical_check=True,
        reference_fn=reference,
        use_isolated_process=isolated,
        custom_data_storage=tmp_path,
    )
    with pytest.warns(tdl.DejavuConfigWarning, match="declare them with check_outputs") as caught:
        tuner[grid(100)](torch.arange(100, dtype=torch.float32), 100)
    assert len([w for w in caught if issubclass(w.category, tdl.DejavuWarning)]) == 1


def test_the_check_works_on_tensors_that_require_grad_and_leaves_autograd_alone(tmp_path):
    """A weight passed as an nn.Parameter, outside torch.no_grad: restoring the arguments must not
    write it through autograd (a leaf that requires grad cannot be written in place, and a write
    through it would invalidate what autograd saved of it)."""
    configs = [triton.Config({"BLOCK": b}) for b in (16, 32, 64)]
    tuner = timed_by_block(scale_kernel, {16: 3.0, 32: 2.0, 64: 1.0}, configs=configs, numerical_check=True)
    weight = torch.nn.Parameter(torch.arange(100, dtype=torch.float32))
    loss = (weight * weight).sum()  # autograd saves weight for the backward pass
    version = weight._version
    out = torch.zeros(100)
    tuner[grid(100)](weight, out, 100, 2.0)
    assert torch.equal(out, 2 * weight.detach())
    assert tuner.last_decision == "tuned" and len(tuner.configs_timings) == 3
    assert weight._version == version
    loss.backward()
    assert torch.equal(weight.grad, 2 * weight.detach())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_first_config_listed_is_the_reference_whatever_order_the_search_measures_in(tmp_path, seed):
    """Random search measures the candidates in a seeded order that mostly starts with a broken
    tiling (three of five); the reference is still the first config of the list, which is right."""
    configs = [
        triton.Config({"BLOCK": b, "TILE": t})
        for b, t in [(32, 16), (96, 64), (192, 128), (48, 32), (64, 32)]
    ]
    times = {32: 4.0, 96: 0.5, 192: 0.6, 48: 0.7, 64: 2.0}
    tuner = timed_by_block(
        double_in_tiles,
        times,
        configs=configs,
        numerical_check=True,
        use_random_search=True,
        search_max_share=1.0,
        search_seed=seed,
        custom_data_storage=tmp_path,
    )
    x, out = run_tiled(tuner)
    assert torch.equal(out, 2 * x)
    assert tuner.best_config.kwargs == {"BLOCK": 64, "TILE": 32}
    assert set(ruled_out(tuner)) == {96, 192, 48}


@triton.jit
def double_in_tiles_through_a_descriptor(x_ptr, out_desc, n, BLOCK: tl.constexpr, TILE: tl.constexpr):
    """double_in_tiles, writing through a tensor descriptor of block shape [TILE] (set by the config's
    pre_hook, as Triton's TMA tutorials do)."""
    pid = tl.program_id(0)
    for t in range(BLOCK // TILE):
        start = pid * BLOCK + t * TILE
        offs = start + tl.arange(0, TILE)
        out_desc.store([start], tl.load(x_ptr + offs, mask=offs < n) * 2)


def set_descriptor_block(nargs):
    nargs["out_desc"].block_shape = [nargs["TILE"]]


@since_triton((3, 4), "host-side tensor descriptors (triton.tools.tensor_descriptor)")
@pytest.mark.parametrize("declared", [None, ["out_desc"]], ids=["found", "declared"])
def test_outputs_written_through_a_tensor_descriptor_are_checked(declared):
    from triton.tools.tensor_descriptor import TensorDescriptor

    configs = [triton.Config({"BLOCK": b, "TILE": t}, pre_hook=set_descriptor_block) for b, t in TILED]
    tuner = timed_by_block(
        double_in_tiles_through_a_descriptor,
        TILED_TIMES,
        configs=configs,
        numerical_check=True,
        check_outputs=declared,
    )
    n = 1000
    x = torch.arange(1, n + 1, dtype=torch.float32)
    out = torch.zeros(n)
    tuner[grid(n)](x, TensorDescriptor.from_tensor(out, [16]), n)
    assert torch.equal(out, 2 * x)
    assert tuner.best_config.kwargs == {"BLOCK": 64, "TILE": 32}
    reasons = ruled_out(tuner)
    assert list(reasons) == [96]
    assert reasons[96].startswith("NumericalMismatch: 'out_desc': 320 of 1000 elements differ")
