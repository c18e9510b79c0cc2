"""A deployment upgraded under a read-only store: the kernel's code, its config list or Triton changed
since the shipped results were tuned. Nothing stale is launched (each is another identity), and the
one warning of the kernel says why every key misses and what to do (CPU, interpreter, no benchmark)."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest
import triton
import triton.language as tl
from kernels import FakeBench, block_configs, observe_block, run_add, tuned_add
from serving_helpers import add_key, seed, tree

import triton_dejavu_like as tdl
from triton_dejavu_like._log import forget_warnings


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """tests/kernels.py's add_kernel in its next release: the same name and result, another source."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + tl.load(y_ptr + offs, mask=mask), mask=mask)


def serve(tuner: tdl.Autotuner, *sizes: int) -> list[str]:
    """Launch ``sizes`` with tuning off; the texts of the package's tuning warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for n in sizes:
            run_add(tuner, n)
    return [str(w.message) for w in caught if issubclass(w.category, tdl.DejavuTuningWarning)]


@pytest.fixture
def shipped(tmp_path, monkeypatch) -> Path:
    """A read-only layer holding the previous release's results of add_kernel, served behind an
    empty written root, with tuning off."""
    layer = tmp_path / "shipped"
    layer.mkdir()
    monkeypatch.setenv("TRITON_DEJAVU_STORAGE", os.pathsep.join([str(tmp_path / "local"), str(layer)]))
    monkeypatch.setenv("TRITON_DEJAVU_READ_ONLY", "1")
    return layer


@pytest.mark.parametrize(
    "changed, said",
    [
        ({"code_version": "0123456789abcdef"}, "another version of the kernel's code"),
        ({"kernel_configs": "0123456789abcdef"}, "another config list"),
        ({"triton": "3.0.0"}, "Triton 3.0.0"),
        ({"gpu": "NVIDIA_H100"}, "GPU NVIDIA_H100"),
    ],
)
def test_a_layer_tuned_for_another_release_is_named_in_the_one_warning(shipped, changed, said):
    """Every key missed with the usual "some keys are not in the store": the user, who had shipped
    every shape, was not told that the shipped results belong to another release and need tuning again."""
    bench = FakeBench()
    tuner = tuned_add(bench)
    seed(tuner, shipped, {add_key(64): 32, add_key(4096): 128}, **changed)
    before = tree(shipped)
    said_first = serve(tuner, 64, 4096)
    assert len(said_first) == 1
    message = said_first[0]
    assert f"({shipped}: {said})" in message and "tune SPEC" in message
    assert "none of its keys is stored for the kernel as it is now" in message
    assert (tuner.last_decision, tuner.best_config.kwargs["BLOCK"]) == ("default", 16)  # nothing stale
    assert bench.calls == 0 and tree(shipped) == before


def test_a_new_kernel_source_is_told_from_the_results_shipped_for_the_old_one(shipped):
    bench = FakeBench()
    old = tuned_add(bench)
    seed(old, shipped, {add_key(64): 32})
    before = tree(shipped)
    new = tdl.autotune(key=["n"], configs=block_configs(), do_bench=bench, pre_hook=observe_block(bench))(
        add_kernel
    )
    [message] = serve(new, 64)
    assert f"({shipped}: another version of the kernel's code)" in message
    assert new.last_decision == "default" and bench.calls == 0 and tree(shipped) == before


def test_the_warning_names_no_other_release_when_there_is_none(shipped):
    tuner = tuned_add(FakeBench())
    [message] = serve(tuner, 64)  # nothing stored anywhere
    assert "none of its keys is in the store;" in message and "only for what differs" not in message

    forget_warnings()  # a kernel with results of its own that misses a new shape: only some keys miss
    other = tuned_add(FakeBench())
    seed(other, shipped, {add_key(64): 32})
    seed(other, shipped, {add_key(64): 64}, code_version="0123456789abcdef")
    [message] = serve(other, 100)
    assert "some keys are not in the store" in message and "only for what differs" not in message
    assert other.last_decision == "nearest"
