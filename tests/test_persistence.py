"""Tune once, restore in later processes; re-tune exactly when the identity changes."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl
from kernels import FakeBench, accumulate_kernel, block_configs, grid, run_add, tuned_add
from triton_release import since_triton

import triton_dejavu_like as tdl
from triton_dejavu_like.store import SCHEMA_VERSION

SCRIPT = """
import json, os, sys
os.environ["TRITON_INTERPRET"] = "1"
{above}
import torch
import triton
import triton.language as tl
import triton_dejavu_like as tdl
import triton_dejavu_like.measure.bench as bench

benchmarks = []
_cpu_timer = bench.cpu_do_bench


def counting_cpu_timer(*args, **kwargs):
    benchmarks.append(1)
    return _cpu_timer(*args, **kwargs)


bench.cpu_do_bench = counting_cpu_timer

OFFSET: tl.constexpr = tl.constexpr({offset})


@tdl.autotune(key=["n"], configs=[triton.Config({{"BLOCK": b}}) for b in {blocks}], rep={rep})
@triton.jit
def shift(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + OFFSET, mask=mask)


n = int(sys.argv[1]) if len(sys.argv) > 1 else 64
x = torch.arange(n, dtype=torch.float32)
out = torch.empty_like(x)
shift[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
assert torch.equal(out, x + {offset}), "wrong result"
print(json.dumps({{
    "decision": shift.last_decision,
    "benchmarks": len(benchmarks),
    "best": shift.best_config.kwargs,
    "path": str(shift.cache_path()),
}}))
"""


def write_script(path: Path, *, above: str = "", offset: int = 1, blocks=(16, 32, 64), rep: int = 1) -> Path:
    path.write_text(SCRIPT.format(above=above, offset=offset, blocks=tuple(blocks), rep=rep))
    return path


def run_script(path: Path, storage: Path, *args: str, env: dict | None = None) -> dict:
    full_env = {**os.environ, "TRITON_DEJAVU_STORAGE": str(storage), **(env or {})}
    result = subprocess.run(
        [sys.executable, str(path), *args], capture_output=True, text=True, env=full_env, timeout=300
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_second_process_restores_with_zero_benchmarks(tmp_path):
    script = write_script(tmp_path / "kernel.py")
    first = run_script(script, tmp_path / "store")
    assert first["decision"] == "tuned" and first["benchmarks"] == 3
    second = run_script(script, tmp_path / "store")
    assert second["decision"] == "restored"
    assert second["benchmarks"] == 0
    assert second["best"] == first["best"]
    assert second["path"] == first["path"]
    third = run_script(script, tmp_path / "store", "100")  # a new key still tunes
    assert third["decision"] == "tuned" and third["benchmarks"] == 3


def test_lines_above_the_kernel_do_not_change_its_identity(tmp_path):
    first = run_script(write_script(tmp_path / "a.py"), tmp_path / "store")
    above = "\n".join(f"# comment line {i}" for i in range(25)) + "\nUNRELATED = 3\n\n\n"
    second = run_script(write_script(tmp_path / "b.py", above=above), tmp_path / "store")
    assert first["decision"] == "tuned"
    assert second["decision"] == "restored" and second["benchmarks"] == 0


@pytest.mark.parametrize(
    ("change", "kwargs"),
    [
        ("a constexpr global the kernel reads", {"offset": 2}),
        ("the config list", {"blocks": (16, 32, 128)}),
        ("the tuner settings", {"rep": 2}),
    ],
)
def test_identity_changes_force_a_new_tuning(tmp_path, change, kwargs):
    first = run_script(write_script(tmp_path / "a.py"), tmp_path / "store")
    second = run_script(write_script(tmp_path / "b.py", **kwargs), tmp_path / "store")
    assert first["decision"] == "tuned"
    assert second["decision"] == "tuned", change
    assert second["path"] != first["path"]


def load_module(path: Path, source: str):
    path.write_text(textwrap.dedent(source))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


KERNEL_MODULE = """
import triton
import triton.language as tl


@triton.jit
def helper(x):
    return x {helper_op} 1


@triton.jit
def kern(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # a comment
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, {body}, mask=mask)
"""


def _code_version(tmp_path, name, helper_op="+", body="helper(tl.load(x_ptr + offs, mask=mask))"):
    from triton_dejavu_like.store.identity import code_version

    module = load_module(tmp_path / f"{name}.py", KERNEL_MODULE.format(helper_op=helper_op, body=body))
    return code_version(module.kern)


def test_code_version_covers_called_jit_functions_and_ignores_formatting(tmp_path):
    base = _code_version(tmp_path, "k0")
    assert _code_version(tmp_path, "k1") == base
    assert _code_version(tmp_path, "k2", body="helper(tl.load(x_ptr + offs,\n        mask=mask))") == base
    assert _code_version(tmp_path, "k3", helper_op="-") != base
    assert _code_version(tmp_path, "k4", body="tl.load(x_ptr + offs, mask=mask)") != base


HEURISTICS_MODULE = """
import triton
import triton.language as tl

import triton_dejavu_like as tdl

SPLIT = {split}


def rows_per_program(args):
    return max(1, args["n"] // SPLIT)


@tdl.autotune(key=["n"], configs=[triton.Config({{"BLOCK": 16}})])
@triton.heuristics(
    {{
        "EVEN": {even},
        "ROWS": rows_per_program,
    }}
)
@triton.jit
def kern(x_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr, ROWS: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) * ROWS)
"""


EVEN = 'lambda args: args["n"] % args["BLOCK"] == 0'


@pytest.mark.parametrize(
    ("even", "split", "same"),
    [
        (EVEN, 64, True),
        (
            'lambda args: (\n            args["n"]%args["BLOCK"]==0  # layout and comments aside\n        )',
            64,
            True,
        ),
        ('lambda args: args["n"] % 32 == 0', 64, False),  # another heuristic
        (EVEN, 128, False),  # a value a heuristic reads
    ],
)
def test_code_version_covers_the_heuristics_under_the_tuner(tmp_path, even, split, same):
    """The meta-parameters a ``@triton.heuristics`` under the tuner sets are compiled into the kernel:
    a result tuned under other heuristics is not restored as if it were this one's."""
    base = load_module(tmp_path / "base.py", HEURISTICS_MODULE.format(even=EVEN, split=64))
    other = load_module(tmp_path / "other.py", HEURISTICS_MODULE.format(even=even, split=split))
    assert (other.kern.cache_path() == base.kern.cache_path()) is same
    assert "code_version-" in str(base.kern.cache_path())


HELPER_HEURISTICS_MODULE = """
import functools

import triton
import triton.language as tl

import triton_dejavu_like as tdl


@functools.lru_cache
def rows_for(n):
    return {rows}


def rows_per_program(args):
    return rows_for(args["n"])


# a plain function before Triton 3.5 (the cases that change it are skipped there; the kernel is not run)
@getattr(triton, "constexpr_function", lambda fn: fn)
def scaled(rows):
    return factor(rows)


def factor(rows):
    return rows * {factor}


@tdl.autotune(key=["n"], configs=[triton.Config({{"BLOCK": 16}})])
@triton.heuristics({{"ROWS": rows_per_program}})
@triton.jit
def kern(x_ptr, n, BLOCK: tl.constexpr, ROWS: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) * scaled(ROWS))
"""


@pytest.mark.parametrize(
    ("rows", "factor", "same"),
    [
        ("max(1, n // 64)", "2", True),
        ("max(1,\n        n//64)  # layout and comments aside", "2", True),
        ("max(1, n // 128)", "2", False),  # the code of a helper the heuristic calls
        pytest.param(  # of a helper a constexpr_function the kernel calls calls
            "max(1, n // 64)", "3", False, marks=since_triton((3, 5), "triton.constexpr_function")
        ),
    ],
)
def test_code_version_covers_the_python_helpers_heuristics_call(tmp_path, rows, factor, same):
    """A heuristic's meta-parameter is what its helpers compute: a result tuned with another helper
    (in the heuristic's own package) is not restored as if it were this one's."""
    base_source = HELPER_HEURISTICS_MODULE.format(rows="max(1, n // 64)", factor=2)
    base = load_module(tmp_path / "base.py", base_source)
    other = load_module(tmp_path / "other.py", HELPER_HEURISTICS_MODULE.format(rows=rows, factor=factor))
    assert (other.kern.cache_path() == base.kern.cache_path()) is same


def test_code_version_leaves_the_libraries_a_heuristic_calls_out():
    """A library's function (numpy's, the standard library's) is not the user's code: an upgrade of
    the library does not tune again."""
    import numpy as np

    from triton_dejavu_like.store.identity import _own_helper

    def rows(args):
        return int(np.ceil(args["n"] / 64)) + len(textwrap.dedent("x"))

    assert _own_helper(np.ceil, rows) is None and _own_helper(textwrap.dedent, rows) is None
    assert _own_helper(load_module, rows) is load_module


JIT_OPTIONS_MODULE = """
import triton
import triton.language as tl


@triton.jit{helper_options}
def helper(x):
    return x + 1


@triton.jit{kernel_options}
def kern(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, helper(tl.load(x_ptr + offs)))
"""


def _jit_code_version(tmp_path, name, kernel_options="", helper_options=""):
    from triton_dejavu_like.store.identity import code_version

    source = JIT_OPTIONS_MODULE.format(kernel_options=kernel_options, helper_options=helper_options)
    return code_version(load_module(tmp_path / f"{name}.py", source).kern)


@pytest.mark.parametrize(
    ("kernel_options", "helper_options"),
    [
        ('(do_not_specialize=["n"])', ""),
        ('(do_not_specialize_on_alignment=["x_ptr"])', ""),
        ("(debug=True)", ""),
        ("", "(noinline=True)"),
    ],
)
def test_code_version_covers_the_jit_arguments_that_change_the_compiled_code(
    tmp_path, kernel_options, helper_options
):
    base = _jit_code_version(tmp_path, "plain")
    assert _jit_code_version(tmp_path, "changed", kernel_options, helper_options) != base


def test_jit_arguments_name_parameters_by_name_or_index_alike(tmp_path):
    by_name = _jit_code_version(tmp_path, "by_name", '(do_not_specialize=["n"])')
    assert _jit_code_version(tmp_path, "by_index", "(do_not_specialize=[1])") == by_name
    plain = _jit_code_version(tmp_path, "plain")
    assert _jit_code_version(tmp_path, "empty", "(do_not_specialize=[])") == plain


CONSTEXPR_HELPER_MODULE = """
import triton
import triton.language as tl


@triton.jit
def activation(x):
    return tl.maximum(x, {floor})


ACTIVATION: tl.constexpr = tl.constexpr(activation)


@triton.jit
def kern(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, ACTIVATION(tl.load(x_ptr + offs)))
"""


DECORATED_MODULE = """
import triton
import triton.language as tl
import triton_dejavu_like as tdl

ISOLATE = {isolate}
TIMEOUT = {timeout}


@tdl.autotune(key=["n"], configs=[triton.Config({{"BLOCK": 16}})], use_isolated_process=ISOLATE,
              isolation_timeout_s=TIMEOUT)
@triton.jit
def kern(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) + 1)
"""


def test_values_the_decorators_read_are_not_code(tmp_path):
    """A module-level flag passed to the decorator (isolation on or off, a timeout) was hashed as if
    the kernel read it: each setting tuned again, where isolation is not part of the identity."""
    from triton_dejavu_like.store.identity import code_version

    def version(name, isolate, timeout):
        source = DECORATED_MODULE.format(isolate=isolate, timeout=timeout)
        return code_version(load_module(tmp_path / f"{name}.py", source).kern)

    assert version("off", False, 30.0) == version("on", True, 30.0) == version("longer", False, 60.0)


def test_code_version_covers_a_jit_function_held_by_a_constexpr_global(tmp_path):
    from triton_dejavu_like.store.identity import code_version

    def version(name, floor):
        module = load_module(tmp_path / f"{name}.py", CONSTEXPR_HELPER_MODULE.format(floor=floor))
        return code_version(module.kern)

    assert version("relu", 0) == version("relu_again", 0)
    assert version("shifted", 1) != version("relu", 0)


AGGREGATE_MODULE = """
import triton
import triton.language as tl


@triton.aggregate
class Pair:
    a: tl.tensor
    b: tl.tensor

    @triton.jit
    def total(self):
        return self.a {op} self.b


@triton.jit
def kern(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(x_ptr + offs, Pair(x, x).total())
"""


@pytest.mark.skipif(not hasattr(triton, "aggregate"), reason="triton.aggregate is new in this Triton")
def test_code_version_covers_the_methods_of_an_aggregate_the_kernel_uses(tmp_path, monkeypatch):
    from triton_dejavu_like.store.identity import code_version

    monkeypatch.setenv("TRITON_INTERPRET", "0")  # the interpreter does not run aggregate methods

    def version(name, op):
        return code_version(load_module(tmp_path / f"{name}.py", AGGREGATE_MODULE.format(op=op)).kern)

    assert version("add", "+") == version("add_again", "+")
    assert version("mul", "*") != version("add", "+")


def _plain_kernel(x_ptr, n, BLOCK):
    pass


@pytest.mark.parametrize(
    "wrapper",
    [
        pytest.param(
            "JITFunction", marks=since_triton((3, 3), "a JITFunction that keeps debug (3.2's drops it)")
        ),
        "InterpretedFunction",
    ],
)
def test_jit_arguments_are_read_from_either_wrapper(wrapper):
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    from triton_dejavu_like._compat import jit_options

    make = {"JITFunction": JITFunction, "InterpretedFunction": InterpretedFunction}[wrapper]
    assert jit_options(make(_plain_kernel)) == {}
    wrapped = make(_plain_kernel, do_not_specialize=[1], noinline=True, debug=False)
    assert jit_options(wrapped) == {"do_not_specialize": ["n"], "noinline": True, "debug": False}


def test_changing_the_key_or_ignore_dtypes_moves_the_storage():
    a = tuned_add(FakeBench(), key=["n"]).cache_path()
    b = tuned_add(FakeBench(), key=["n", "x_ptr"]).cache_path()
    c = tuned_add(FakeBench(), key=["n"], ignore_dtypes=True).cache_path()
    assert len({a.parent, b.parent, c.parent}) == 3
    assert "tune_features-" in str(a)


def another_do_bench(kernel_call, quantiles=(0.5, 0.2, 0.8)):
    """A user's ``do_bench`` other than FakeBench: the storage identity names it (it never runs here)."""
    return FakeBench()(kernel_call, quantiles)


def a_third_do_bench(kernel_call, quantiles=(0.5, 0.2, 0.8)):
    return FakeBench()(kernel_call, quantiles)


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ({}, {"timing": tdl.TimingPolicy(finalists=0)}),
        # every partial is named functools.partial: what it wraps and binds tells them apart
        (
            {"do_bench": functools.partial(another_do_bench)},
            {"do_bench": functools.partial(a_third_do_bench)},
        ),
        (
            {"do_bench": functools.partial(another_do_bench, quantiles=(0.5,))},
            {"do_bench": functools.partial(another_do_bench, quantiles=(0.5, 0.2))},
        ),
        (
            {"use_random_search": True, "search_max_share": 0.25},
            {"use_random_search": True, "search_max_share": 0.5},
        ),
        ({"do_bench": FakeBench()}, {"do_bench": another_do_bench}),
    ],
    ids=["timing policy", "partial do_bench", "partial's values", "search budget", "do_bench"],
)
def test_settings_that_change_which_config_wins_move_the_storage(one, other):
    """A result found under other timing, another search budget or another benchmark function is not
    restored as if it were this one's."""
    assert tuned_add(**one).cache_path() != tuned_add(**other).cache_path()


def test_an_equal_partial_do_bench_finds_the_same_storage():
    one = functools.partial(another_do_bench, quantiles=(0.5, 0.2, 0.8))
    again = functools.partial(another_do_bench, quantiles=(0.5, 0.2, 0.8))
    assert tuned_add(do_bench=one).cache_path() == tuned_add(do_bench=again).cache_path()


def test_config_order_does_not_matter():
    a = tuned_add(FakeBench(), configs=block_configs((16, 32, 64))).cache_path()
    b = tuned_add(FakeBench(), configs=block_configs((64, 16, 32))).cache_path()
    assert a == b


def test_storage_layout_and_schema(tmp_path):
    tuner = tuned_add(FakeBench({16: 4.0, 32: 3.0, 64: 1.0, 128: 2.0}))
    run_add(tuner)
    path = tuner.cache_path()
    rel = path.relative_to(tmp_path / "storage").parts
    assert rel[0] == f"dejavu_{'.'.join(tdl.__version__.split('.')[:2])}"
    assert rel[1] == f"triton_{triton.__version__}"
    assert rel[2] == "cpu" and rel[3] == "gpu_interpreter"
    assert rel[4] == "add_kernel"
    assert [p.split("-")[0] for p in rel[5:9]] == [
        "autotune_config",
        "code_version",
        "tune_features",
        "kernel_configs",
    ]
    assert rel[9:] == ("default", "cache.json")

    doc = json.loads(path.read_text())
    assert doc["schema"] == SCHEMA_VERSION
    assert doc["identity"]["kernel"] == "add_kernel"
    assert doc["identity"]["triton"] == triton.__version__
    (entry,) = doc["entries"].values()
    assert entry["key"] == [100, "torch.float32", "torch.float32", "torch.float32"]
    assert entry["config"]["kwargs"] == {"BLOCK": 64}
    assert entry["config"]["num_warps"] == 1
    assert entry["timings_ms"] == [1.0, 0.9, 1.1]
    assert entry["evaluated"] == 4 and entry["space_size"] == 4
    assert entry["strategy"] == "exhaustive"
    assert [t["timings_ms"][0] for t in entry["top"]] == [1.0, 2.0, 3.0, 4.0]
    assert entry["tuning_time_s"] >= 0 and entry["tuned_at"].endswith("+00:00")


def test_tag_and_custom_data_storage(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_DEJAVU_TAG", "serving-v2")
    assert tuned_add(FakeBench()).cache_path().parent.name == "serving-v2"
    assert tuned_add(FakeBench(), tag="canary").cache_path().parent.name == "canary"
    custom = tmp_path / "elsewhere"
    tuner = tuned_add(FakeBench(), custom_data_storage=custom)
    run_add(tuner)
    assert tuner.cache_path().is_relative_to(custom) and tuner.cache_path().exists()
    assert not (tmp_path / "storage").exists()


def test_cuda_version_override_names_the_toolchain(monkeypatch):
    from triton_dejavu_like.store import identity

    monkeypatch.setenv("_TRITON_DEJAVU_DETERMINED_CUDA_VERSION", "12.4.1")
    identity.detect_platform.cache_clear()
    try:
        assert identity.detect_platform(False).toolchain == "cuda_12.4"
        monkeypatch.setenv("_TRITON_DEJAVU_DETERMINED_ROCM_VERSION", "6.2.4")
        identity.detect_platform.cache_clear()
        assert identity.detect_platform(False).toolchain == "rocm_6.2.4"
    finally:
        identity.detect_platform.cache_clear()


def test_restored_config_keeps_its_pre_hook():
    calls = []

    def configs():
        return [
            triton.Config({"BLOCK": 16}, pre_hook=lambda nargs: calls.append(16)),
            triton.Config({"BLOCK": 64}, pre_hook=lambda nargs: calls.append(64)),
        ]

    run_add(tuned_add(FakeBench({16: 2.0, 64: 1.0}), configs=configs()))
    calls.clear()
    restored = tuned_add(FakeBench(), configs=configs())
    run_add(restored)
    assert restored.last_decision == "restored"
    assert calls == [64], "the restored config's pre_hook runs at launch"


def test_restore_is_skipped_when_pruning_changes_the_candidates():
    def prune_to(blocks):
        return {"early_config_prune": lambda cs, nargs, **kw: [c for c in cs if c.kwargs["BLOCK"] in blocks]}

    run_add(tuned_add(FakeBench(), prune_configs_by=prune_to({32, 64, 128})))  # BLOCK 128 wins
    same = tuned_add(FakeBench(), prune_configs_by=prune_to({32, 64, 128}))
    run_add(same)
    assert same.last_decision == "restored"
    bench = FakeBench()
    other = tuned_add(bench, prune_configs_by=prune_to({64, 128}))  # the winner is still a candidate
    run_add(other)
    assert other.last_decision == "tuned" and sorted(bench.blocks) == [64, 128]


def test_a_prune_that_changes_configs_in_place_restores_them():
    """Triton 2.x's matmul prune sets ``num_stages`` on the listed configs themselves: the stored
    winner (its id taken after the prune) never matched a candidate (its id remembered from before
    the prune), so every process tuned again."""

    def in_place(configs, nargs, **kwargs):
        for config in configs:
            config.num_stages = 2
        return configs

    prune = {"early_config_prune": in_place}
    run_add(tuned_add(FakeBench(), configs=block_configs(), prune_configs_by=prune))
    bench = FakeBench()
    later = tuned_add(bench, configs=block_configs(), prune_configs_by=prune)
    run_add(later)
    assert later.last_decision == "restored" and bench.calls == 0
    assert later.best_config.kwargs == {"BLOCK": 128} and later.best_config.num_stages == 2


@triton.jit
def _twice(x):
    return x * 2


@triton.jit
def _once(x):
    return x


@triton.jit
def _applied(x_ptr, out_ptr, n, BLOCK: tl.constexpr, FN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, FN(tl.load(x_ptr + offs, mask=mask)), mask=mask)


def test_a_config_value_that_cannot_be_stored_tunes_in_memory():
    """A JIT function given as a constexpr (Triton takes them) cannot be stored: the warning said
    results stay in memory, then EncodingError came out of the launch."""
    times = iter([2.0, 1.0])

    def bench(call, quantiles=None):
        call()
        t = next(times)
        return [t, t, t]

    configs = [triton.Config({"BLOCK": 64, "FN": f}) for f in (_once, _twice)]
    tuner = tdl.autotune(key=["n"], configs=configs, do_bench=bench)(_applied)
    x, out = torch.arange(100.0), torch.empty(100)
    with pytest.warns(tdl.DejavuStorageWarning, match="cannot compute its storage identity"):
        tuner[grid(100)](x, out, 100)
    assert tuner.last_decision == "tuned"
    tuner[grid(100)](x, out, 100)  # decided: the launch table
    assert torch.equal(out, x * 2 if tuner.best_config.kwargs["FN"] is _twice else x)
    assert not any(Path(os.environ["TRITON_DEJAVU_STORAGE"]).rglob("cache.json"))


def test_in_process_hooks_run_after_restore():
    acc_before = torch.full((64,), 5.0)
    x = torch.ones(64)

    def make():
        return tdl.autotune(
            key=["n"], configs=block_configs((16, 32)), restore_value=["acc_ptr"], do_bench=FakeBench()
        )(accumulate_kernel)

    make()[grid(64)](acc_before, x, 64)
    restored = make()
    acc = torch.full((64,), 5.0)
    restored[grid(64)](acc, x, 64)
    assert restored.last_decision == "restored"
    assert torch.equal(acc, torch.full((64,), 6.0))


def test_unencodable_key_stays_in_memory(caplog):
    bench = FakeBench()
    tuner = tuned_add(bench, key=["n", "x_ptr"])  # a tensor in the key has no typed encoding
    with caplog.at_level("WARNING", logger="triton_dejavu_like"):
        run_add(tuner)
    assert "cannot be stored" in caplog.text
    # the message names the value's type without printing all of the tensor's 100 elements
    message = next(m for m in caplog.messages if "cannot be stored" in m)
    assert "Tensor" in message and len(message) < 600
    assert tuner.last_decision == "tuned" and bench.calls == 4
    assert not tuner.cache_path().exists()


def test_restore_happens_once_per_process_not_per_call(monkeypatch):
    run_add(tuned_add(FakeBench()))
    from triton_dejavu_like import store as storage

    loads = []
    real = storage.CacheFile.load

    def counting(self, **options):
        loads.append(1)
        return real(self, **options)

    monkeypatch.setattr(storage.CacheFile, "load", counting)
    tuner = tuned_add(FakeBench())
    for n in (100, 100, 200, 300):
        run_add(tuner, n=n)
    assert loads == [1]


@triton.jit
def _scaled_copy(x_ptr, s_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * tl.load(s_ptr), mask=mask)


def _scale_by(value):
    def pre_hook(nargs):
        nargs["s_ptr"].fill_(value)

    pre_hook.__name__ = f"scale_by_{value}"
    return pre_hook


def test_configs_alike_but_for_their_pre_hook_restore_the_one_that_won():
    """Two configs with the same fields and different pre_hooks are one stored config: the entry
    says which of them won (its position among them), so that a restore launches that one, not the
    first with those fields, which the numerical check had ruled out here."""

    def decorated():
        configs = [
            triton.Config({"BLOCK": 64}, num_warps=1, pre_hook=_scale_by(3.0)),  # wrong: ruled out
            triton.Config({"BLOCK": 64}, num_warps=1, pre_hook=_scale_by(2.0)),
            triton.Config({"BLOCK": 16}, num_warps=1, pre_hook=_scale_by(2.0)),
        ]
        reference = lambda x_ptr, **_: {"out_ptr": 2 * x_ptr}  # noqa: E731
        timings = {64: 1.0, 16: 5.0}
        # the launch runs the config's pre_hook, which records its BLOCK: that config's time is answered
        timed = lambda call, quantiles: (call(), [timings[seen[-1]]] * 3)[1]  # noqa: E731
        seen: list[int] = []
        for config in configs:
            hook = config.pre_hook
            config.pre_hook = lambda nargs, hook=hook, b=config.kwargs["BLOCK"]: (seen.append(b), hook(nargs))
        tuner = tdl.autotune(
            configs=configs, key=["n"], do_bench=timed, reference_fn=reference, check_outputs=["out_ptr"]
        )(_scaled_copy)
        return tuner, configs

    for decision in ("tuned", "restored"):
        tuner, configs = decorated()
        x, s, out = torch.randn(300), torch.zeros(1), torch.zeros(300)
        tuner[lambda meta: (triton.cdiv(300, meta["BLOCK"]),)](x, s, out, 300)
        assert tuner.last_decision == decision
        assert tuner.best_config is configs[1]
        assert torch.equal(out, 2 * x)


# --- .configs changed while a key is decided, or after -------------------------------------------------


def test_a_config_pinned_while_another_thread_tunes_is_launched_afterwards(tmp_path):
    """A serving engine pins a config (``kernel.configs = [config]``) while a warm-up thread tunes:
    the tuning's decision, made over the old list, must not stay in the launch table (every later
    launch of that key used the old winner)."""
    import threading

    from storage_helpers import launch, make_tuner

    started, release = threading.Event(), threading.Event()

    def bench(kernel_call, quantiles=(0.5, 0.2, 0.8)):
        started.set()
        assert release.wait(30)
        return [1.0] * len(quantiles)

    tuner = make_tuner(bench=bench, custom_data_storage=tmp_path)
    warm_up = threading.Thread(target=launch, args=(tuner, 300))
    warm_up.start()
    assert started.wait(30)
    pinned_launches = []
    tuner.configs = [
        triton.Config({"BLOCK": 128}, pre_hook=lambda nargs: pinned_launches.append(nargs["BLOCK"]))
    ]
    release.set()
    warm_up.join(30)
    assert not warm_up.is_alive()
    launch(tuner, 300)
    assert pinned_launches == [128]


def test_a_key_tuned_over_reassigned_configs_is_stored_with_that_list(tmp_path):
    """The storage identity hashes the config list: after ``kernel.configs = other`` a key tuned over
    ``other`` goes to that list's file (a fresh process with that list restores it), not to the
    file of the list the process started with."""
    from storage_helpers import InstantBench, launch, make_tuner

    tuner = make_tuner(bench=InstantBench(), custom_data_storage=tmp_path)
    launch(tuner, 400)
    first_file = tuner.cache_path()
    other = [triton.Config({"BLOCK": b}, num_warps=2) for b in (16, 32)]
    tuner.configs = other
    launch(tuner, 500)
    assert tuner.last_decision == "tuned" and tuner.cache_path() != first_file
    fresh_bench = InstantBench()
    fresh = make_tuner(bench=fresh_bench, custom_data_storage=tmp_path, configs=other)
    launch(fresh, 500)
    assert fresh.last_decision == "restored" and fresh_bench.calls == 0
    from storage_helpers import stored_entries

    assert [e["key"][0] for e in stored_entries(first_file).values()] == [400]  # tuned over that list


def test_a_result_whose_write_was_interrupted_is_written_at_the_next_call(monkeypatch):
    """A KeyboardInterrupt while the tuned result was written (waiting for the file's lock, say) left
    it known in memory only: the next call answered it as restored and it was never written, so
    every later process tuned the key again."""
    from triton_dejavu_like.store.cache_file import CacheFile

    write = CacheFile.update

    def interrupted(self, change):
        monkeypatch.setattr(CacheFile, "update", write)
        raise KeyboardInterrupt

    monkeypatch.setattr(CacheFile, "update", interrupted)
    tuner = tuned_add(FakeBench())
    with pytest.raises(KeyboardInterrupt):
        run_add(tuner, 100)
    run_add(tuner, 100)
    assert tuner.last_decision == "tuned"  # the interrupted run's result was not kept
    stored = json.loads(tuner.cache_path().read_text())["entries"]
    assert [json.loads(kid)[0] for kid in stored] == [100]
