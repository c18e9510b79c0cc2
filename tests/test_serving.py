"""Serving with tuning off: read-only mode, the tuning() switch, the misses counter and file, and
deterministic selection (CPU, interpreter, a counting do_bench: nothing here may benchmark)."""

from __future__ import annotations

import gc
import json
import os
import re
import subprocess
import sys
import threading
import warnings
import weakref
from pathlib import Path

import pytest
import torch
import triton
from kernels import FakeBench, block_configs, run_add, tuned_add
from serving_helpers import add_key, seed, tree

import triton_dejavu_like as tdl
from triton_dejavu_like.store.layered import forget_stores
from triton_dejavu_like.tools import cli
from triton_dejavu_like.tuner.mode import tuning_enabled
from triton_dejavu_like.tuner.nearest import distance

ROOT_ENV = "TRITON_DEJAVU_STORAGE"
ADD = "kernels.add_kernel"  # add_kernel's label: misses are counted under it


def storage() -> Path:
    return Path(os.environ[ROOT_ENV])


def block(tuner: tdl.Autotuner) -> int:
    return tuner.best_config.kwargs["BLOCK"]


# --- the nearest key -----------------------------------------------------------------------------------


def test_distance_is_log_scale_over_numbers_and_requires_equal_other_values():
    assert distance((1023, "torch.float16"), (2047, "torch.float16")) == pytest.approx(1.0)
    assert distance((1023, "torch.float16"), (1023, "torch.float32")) is None  # another dtype
    assert distance((8, True), (8, False)) is None  # bools are flags, not sizes
    assert distance((8,), (8, 1)) is None
    assert distance((3, 7), (3, 7)) == 0.0


def test_read_only_answers_nearest_then_heuristic_then_first_config(monkeypatch):
    monkeypatch.setenv("TRITON_DEJAVU_READ_ONLY", "1")
    bench = FakeBench()
    tuner = tuned_add(bench)
    seed(tuner, storage(), {add_key(64): 32, add_key(4096): 128})
    before = tree(storage())

    with pytest.warns(tdl.DejavuTuningWarning, match="tune SPEC"):
        run_add(tuner, 100)
    assert (tuner.last_decision, block(tuner)) == ("nearest", 32)
    run_add(tuner, 3000)
    assert (tuner.last_decision, block(tuner)) == ("nearest", 128)
    run_add(tuner, 64)
    assert (tuner.last_decision, block(tuner)) == ("restored", 32)
    run_add(tuner, 100, dtype=torch.float64)  # no stored key with these dtypes, no heuristic
    assert (tuner.last_decision, block(tuner)) == ("default", 16)

    heuristic = lambda key: triton.Config({"BLOCK": 64}, num_warps=1)  # noqa: E731
    with_heuristic = tuned_add(bench, fallback_heuristic=heuristic)
    run_add(with_heuristic, 100, dtype=torch.float64)
    assert (with_heuristic.last_decision, block(with_heuristic)) == ("heuristic", 64)
    run_add(with_heuristic, 100)  # the nearest key comes before the heuristic
    assert with_heuristic.last_decision == "nearest"

    assert bench.calls == 0
    assert tree(storage()) == before  # no file, no lock file, no directory


def test_a_stored_key_with_an_int_too_large_for_a_float_does_not_break_serving(monkeypatch):
    """One stored key past the float range made every miss of the kernel with tuning off raise
    OverflowError (while the nearest-key index was built)."""
    monkeypatch.setenv("TRITON_DEJAVU_READ_ONLY", "1")
    tuner = tuned_add(FakeBench())
    seed(tuner, storage(), {add_key(64): 32, add_key(10**400): 128})
    with pytest.warns(tdl.DejavuTuningWarning):
        run_add(tuner, 100)
    assert (tuner.last_decision, block(tuner)) == ("nearest", 32)


def test_nearest_skips_stored_configs_that_are_no_longer_candidates(monkeypatch):
    monkeypatch.setenv("TRITON_DEJAVU_READ_ONLY", "1")
    tuner = tuned_add(FakeBench(), configs=block_configs((16, 32, 64, 128)))
    seed(tuner, storage(), {add_key(64): 512, add_key(4096): 128})  # BLOCK 512 is not a candidate
    run_add(tuner, 100)
    assert (tuner.last_decision, block(tuner)) == ("nearest", 128)


def test_nearest_ties_go_to_the_smaller_key_id(monkeypatch):
    monkeypatch.setenv("TRITON_DEJAVU_READ_ONLY", "1")
    tuner = tuned_add(FakeBench())
    # s(x) = log2(1 + x): 31 lies exactly one unit from 15 and from 63
    seed(tuner, storage(), {add_key(63): 64, add_key(15): 16})
    run_add(tuner, 31)
    assert (tuner.last_decision, block(tuner)) == ("nearest", 16)


def test_read_only_with_an_empty_store_creates_nothing(monkeypatch):
    monkeypatch.setenv("TRITON_DEJAVU_READ_ONLY", "1")
    bench = FakeBench()
    tuner = tuned_add(bench)
    run_add(tuner, 100)
    assert tuner.last_decision == "default" and bench.calls == 0
    assert not storage().exists()


@pytest.mark.parametrize("read_only", [True, False])
def test_a_storage_root_that_is_a_file_is_reported_once(tmp_path, monkeypatch, read_only):
    """Read-only, nothing is written, so no write can fail and say so: the root is named at the
    first miss instead. With tuning on, the failed write is the one warning."""
    root = tmp_path / "a-file"
    root.write_text("not a folder")
    monkeypatch.setenv("TRITON_DEJAVU_STORAGE", str(root))
    if read_only:
        monkeypatch.setenv("TRITON_DEJAVU_READ_ONLY", "1")
    tuner = tuned_add(FakeBench())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_add(tuner, 100)
        run_add(tuner, 200)
    about_root = [
        w for w in caught if issubclass(w.category, tdl.DejavuStorageWarning) and str(root) in str(w.message)
    ]
    assert len(about_root) == 1
    assert ("is not a folder" in str(about_root[0].message)) == read_only
    assert root.read_text() == "not a folder"


def test_read_only_does_not_set_a_bad_cache_file_aside(monkeypatch):
    tuner = tuned_add(FakeBench())
    path = seed(tuner, storage(), {add_key(64): 32})
    path.write_text("{not json")
    before = tree(storage())
    monkeypatch.setenv("TRITON_DEJAVU_READ_ONLY", "1")
    with pytest.warns(tdl.DejavuStorageWarning, match="invalid tuning cache"):
        run_add(tuner, 100)
    assert tuner.last_decision == "default"
    assert tree(storage()) == before


# --- the tuning() switch ---------------------------------------------------------------------------------


def test_warm_up_with_tuning_then_serve_without():
    bench = FakeBench()
    tuner = tuned_add(bench)
    with tdl.tuning(True):
        run_add(tuner, 64)  # warm-up: tuned and stored
    assert tuner.last_decision == "tuned"
    calls, stored = bench.calls, tree(storage())
    with tdl.tuning(False), pytest.warns(tdl.DejavuTuningWarning):
        run_add(tuner, 100)
        run_add(tuner, 100)  # answered once, then launched from memory
        run_add(tuner, 64)  # a hit in memory: launched with its tuned config, nothing decided
    assert (tuner.last_decision, block(tuner)) == ("nearest", 128)
    assert bench.calls == calls and tree(storage()) == stored
    assert tdl.misses() == {ADD: {add_key(100): 1}}
    tdl.reset_misses()
    assert tdl.misses() == {}
    run_add(tuner, 5000)  # the switch is off again outside the block: tuning resumes
    assert tuner.last_decision == "tuned" and bench.calls > calls


def test_a_miss_during_cuda_graph_capture_is_answered_without_timing(monkeypatch):
    """Timing a candidate synchronises, which ends a CUDA graph capture with an error: a key missed
    while the current stream captures is answered as with tuning off (here by the nearest tuned
    key), counted as a miss, stored nowhere, and said once; outside the capture tuning resumes."""
    bench = FakeBench()
    tuner = tuned_add(bench)
    run_add(tuner, 64)  # warm-up: tuned and stored
    calls, stored = bench.calls, tree(storage())
    capturing = {"now": True}
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing["now"])
    with pytest.warns(tdl.DejavuTuningWarning, match=r"add_kernel: key .* a CUDA graph is being captured"):
        run_add(tuner, 100)
    assert (tuner.last_decision, block(tuner)) == ("nearest", 128)
    assert bench.calls == calls and tree(storage()) == stored
    assert tdl.misses() == {ADD: {add_key(100): 1}}
    capturing["now"] = False
    run_add(tuner, 5000)
    assert tuner.last_decision == "tuned" and bench.calls > calls


def test_serving_keeps_only_the_chosen_config_of_each_key_a_pruner_made():
    """An early_config_prune that makes its configs anew (as pruners that build configs do): every
    miss kept all of its candidates alive for the life of the kernel, in the memo of config ids, so a
    server answering thousands of shapes grew by every candidate of every shape."""
    made: list[weakref.ref[triton.Config]] = []

    def prune(configs, nargs, **kwargs):
        fresh = [triton.Config(dict(c.kwargs), num_warps=c.num_warps) for c in configs]
        made.extend(weakref.ref(c) for c in fresh)
        return fresh

    tuner = tuned_add(FakeBench(), prune_configs_by={"early_config_prune": prune})
    with tdl.tuning(False), warnings.catch_warnings():
        warnings.simplefilter("ignore", tdl.DejavuTuningWarning)
        for n in range(1, 41):
            run_add(tuner, n)
    gc.collect()
    assert len(made) == 40 * 4
    assert sum(ref() is not None for ref in made) <= 40  # what each key launches, nothing more


def test_tuning_blocks_nest_and_leave_in_any_order(monkeypatch):
    assert tuning_enabled()
    monkeypatch.setenv("TRITON_DEJAVU_READ_ONLY", "1")
    assert not tuning_enabled()
    outer, inner = tdl.tuning(True), tdl.tuning(False)
    outer.__enter__()
    assert tuning_enabled()
    inner.__enter__()
    assert not tuning_enabled()
    outer.__exit__(None, None, None)  # another thread may leave its block first
    assert not tuning_enabled()
    inner.__exit__(None, None, None)
    assert not tuning_enabled()  # back to the environment's default
    monkeypatch.setenv("TRITON_DEJAVU_DETERMINISTIC", "1")
    with tdl.tuning(True):
        assert not tuning_enabled()  # deterministic mode never times
    with pytest.raises(TypeError):
        tdl.tuning("no").__enter__()


@pytest.mark.parametrize(
    ("value", "tuning"), [("", True), ("0", True), ("Off", True), ("1", False), ("yes", False)]
)
def test_read_only_values(monkeypatch, value, tuning):
    monkeypatch.setenv("TRITON_DEJAVU_READ_ONLY", value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning for a value it knows
        assert tuning_enabled() is tuning


def test_a_read_only_value_not_understood_fails_safe(monkeypatch):
    """A safety switch set to a value it does not know (``enabled``) turns read-only on and says so
    (it warned, then tuned and wrote in production)."""
    monkeypatch.setenv("TRITON_DEJAVU_READ_ONLY", "enabled")
    bench = FakeBench()
    tuner = tuned_add(bench)
    said = "TRITON_DEJAVU_READ_ONLY='enabled' is not valid .*; using read-only mode"
    with pytest.warns(tdl.DejavuConfigWarning, match=said), pytest.warns(tdl.DejavuTuningWarning):
        run_add(tuner, 100)
    assert (tuner.last_decision, bench.calls) == ("default", 0)
    assert not storage().exists()


def test_tuning_switch_is_process_wide():
    seen = []
    entered, checked = threading.Event(), threading.Event()

    def other():
        entered.wait(5)
        seen.append(tuning_enabled())
        checked.set()

    thread = threading.Thread(target=other)
    thread.start()
    with tdl.tuning(False):
        entered.set()
        checked.wait(5)
    thread.join()
    assert seen == [False]


# --- the misses file and the CLI ---------------------------------------------------------------------------


def test_misses_file_and_cli(tmp_path, monkeypatch, capsys):
    misses = tmp_path / "misses.jsonl"
    monkeypatch.setenv("TRITON_DEJAVU_MISSES_FILE", str(misses))
    monkeypatch.setenv("TRITON_DEJAVU_READ_ONLY", "1")
    first = tuned_add(FakeBench())
    seed(first, storage(), {add_key(64): 32})
    with pytest.warns(tdl.DejavuTuningWarning) as said:
        for tuner in (first, tuned_add(FakeBench())):  # two kernel objects: the key is answered twice
            run_add(tuner, 100)
    # the advice fits: the variable is set already
    assert "TRITON_DEJAVU_MISSES_FILE records them" in str(said[0].message)
    run_add(first, 7, dtype=torch.float64)
    with misses.open("a") as f:
        f.write("not json\n")

    assert cli.main(["misses", str(misses), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    counts = {(m["label"], m["kernel"], m["key"], m["answer"]): m["count"] for m in payload["misses"]}
    assert counts == {
        (ADD, "add_kernel", repr(add_key(100)), "nearest"): 2,
        (ADD, "add_kernel", repr((7, *("torch.float64",) * 3)), "default"): 1,
    }
    assert payload["invalid_lines"] == 1
    stages = triton.Config({}).num_stages  # the default: 2 on Triton 3.2, 3 later
    assert payload["misses"][0]["configs"] == [f"BLOCK=32, num_warps=1, num_stages={stages}"]

    assert cli.main(["misses"]) == 0  # the file named by the variable
    out = capsys.readouterr().out
    assert ADD in out and "nearest" in out and "tune" in out


OTHER_ADD = """
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)
"""


def test_misses_of_two_kernels_of_one_name_are_told_apart(tmp_path, monkeypatch, capsys):
    """A serving engine has kernels of one short name in several modules: their misses are counted,
    written and aggregated under the label the warnings name them by (they were merged under the
    short name); a line written before the label is still read, grouped by its short name."""
    (tmp_path / "engine_ops.py").write_text(OTHER_ADD)
    monkeypatch.syspath_prepend(str(tmp_path))
    import engine_ops

    misses = tmp_path / "misses.jsonl"
    monkeypatch.setenv("TRITON_DEJAVU_MISSES_FILE", str(misses))
    monkeypatch.setenv("TRITON_DEJAVU_READ_ONLY", "1")
    with pytest.warns(tdl.DejavuTuningWarning):
        run_add(tuned_add(FakeBench()), 100)
        run_add(tdl.autotune(key=["n"], configs=block_configs())(engine_ops.add_kernel), 100)
    assert tdl.misses() == {ADD: {add_key(100): 1}, "engine_ops.add_kernel": {add_key(100): 1}}
    lines = [json.loads(line) for line in misses.read_text().splitlines()]
    assert [(line["label"], line["kernel"]) for line in lines] == [
        (ADD, "add_kernel"),
        ("engine_ops.add_kernel", "add_kernel"),
    ]
    older = {name: value for name, value in lines[0].items() if name != "label"}
    with misses.open("a") as f:
        f.write(json.dumps(older) + "\n")

    assert cli.main(["misses", str(misses), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["invalid_lines"] == 0
    assert sorted((m["label"], m["kernel"], m["count"]) for m in payload["misses"]) == [
        ("add_kernel", "add_kernel", 1),
        ("engine_ops.add_kernel", "add_kernel", 1),
        (ADD, "add_kernel", 1),
    ]
    assert cli.main(["misses", str(misses)]) == 0
    table = capsys.readouterr().out
    assert "engine_ops.add_kernel" in table and ADD in table


def test_cli_reads_a_misses_file_of_any_size(tmp_path, monkeypatch, capsys):
    misses = tmp_path / "misses.jsonl"
    with misses.open("wb") as handle:  # a file serving processes appended to for months: 65 MiB
        handle.truncate(65 << 20)  # (sparse: one long line of NULs, then the newest records)
        handle.seek(0, os.SEEK_END)
        handle.write(b"\n")
    monkeypatch.setenv("TRITON_DEJAVU_MISSES_FILE", str(misses))
    monkeypatch.setenv("TRITON_DEJAVU_READ_ONLY", "1")
    run_add(tuned_add(FakeBench()), 100)
    assert cli.main(["misses", str(misses), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert [(m["key"], m["count"]) for m in payload["misses"]] == [(repr(add_key(100)), 1)]
    assert payload["invalid_lines"] == 1


def test_misses_file_inside_the_store_is_refused(monkeypatch):
    inside = storage() / "misses.jsonl"
    storage().mkdir(parents=True)
    monkeypatch.setenv("TRITON_DEJAVU_MISSES_FILE", str(inside))
    monkeypatch.setenv("TRITON_DEJAVU_READ_ONLY", "1")
    with pytest.warns(tdl.DejavuStorageWarning, match="not written into a store"):
        run_add(tuned_add(FakeBench()), 100)
    assert not inside.exists()
    assert tdl.misses() == {ADD: {add_key(100): 1}}


@pytest.mark.parametrize("root", ["custom_data_storage", "add_store"])
def test_misses_file_inside_a_kernels_own_root_or_a_registered_store_is_refused(tmp_path, monkeypatch, root):
    """Not only the roots of TRITON_DEJAVU_STORAGE: the kernel's custom_data_storage root and the
    folders registered with add_store are storage roots too (the file was written there)."""
    folder = tmp_path / "own"
    folder.mkdir()
    inside = folder / "misses.jsonl"
    monkeypatch.setenv("TRITON_DEJAVU_MISSES_FILE", str(inside))
    monkeypatch.setenv("TRITON_DEJAVU_READ_ONLY", "1")
    options = {"custom_data_storage": str(folder)} if root == "custom_data_storage" else {}
    if root == "add_store":
        tdl.add_store(folder)
    try:
        with pytest.warns(
            tdl.DejavuStorageWarning, match=f"inside the storage root {folder}; misses are not"
        ):
            run_add(tuned_add(FakeBench(), **options), 100)
    finally:
        forget_stores()
    assert not inside.exists()
    assert tdl.misses() == {ADD: {add_key(100): 1}}


def test_misses_file_inside_the_default_store_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv(ROOT_ENV)  # the default root: the user cache directory
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = tdl.store.default_root()
    assert root.is_relative_to(tmp_path)
    root.mkdir(parents=True)
    inside = root / "misses.jsonl"
    monkeypatch.setenv("TRITON_DEJAVU_MISSES_FILE", str(inside))
    monkeypatch.setenv("TRITON_DEJAVU_READ_ONLY", "1")
    with pytest.warns(tdl.DejavuStorageWarning, match="not written into a store"):
        run_add(tuned_add(FakeBench()), 100)
    assert not inside.exists()


MISS_INTO_A_PIPE = """
import sys, warnings
sys.path[:0] = sys.argv[1:2]
from kernels import FakeBench, run_add, tuned_add
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    run_add(tuned_add(FakeBench()), 100)
print([str(w.message) for w in caught])
"""


def run_snippet(code: str, env: dict[str, str], *, timeout: int) -> str:
    """Run ``code`` in a fresh Python (the tests' folder as its first argument, ``env`` added to the
    environment); its standard output, once it exited 0."""
    done = subprocess.run(
        [sys.executable, "-c", code, str(Path(__file__).parent)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_misses_file_that_is_a_pipe_nobody_reads_does_not_block_the_launch(tmp_path):
    # a pipe to a log collector that is down: opening it for writing waited for a reader for good,
    # in the launch that missed (the kernel never ran)
    pipe = tmp_path / "misses.pipe"
    os.mkfifo(pipe)
    env = {"TRITON_DEJAVU_MISSES_FILE": str(pipe), "TRITON_DEJAVU_READ_ONLY": "1"}
    out = run_snippet(MISS_INTO_A_PIPE, env, timeout=240)
    assert f"cannot append misses to TRITON_DEJAVU_MISSES_FILE={pipe}" in out


def test_cli_misses_needs_a_file(capsys):
    assert cli.main(["misses"]) == 2


def test_cli_misses_before_any_miss_is_no_error(tmp_path, monkeypatch, capsys):
    """Serving processes create the misses file at their first miss: before one, `misses --json` (an
    operator's cron job, under `set -e`) exited 1 with an error where nothing was missed."""
    misses = tmp_path / "misses.jsonl"
    monkeypatch.setenv("TRITON_DEJAVU_MISSES_FILE", str(misses))
    assert cli.main(["misses", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["misses"] == [] and "no miss recorded" in captured.err
    nowhere = tmp_path / "no-such-folder" / "misses.jsonl"
    assert cli.main(["misses", str(nowhere)]) == 1  # nowhere to write it: a mistyped path
    assert f"does not exist, nor does its folder {nowhere.parent}" in capsys.readouterr().err


def test_cli_aggregates_the_misses_files_of_several_deployments(tmp_path, monkeypatch, capsys):
    """One misses file per deployment (the docs' advice: the file only grows): `misses A B` counts a
    key missed in both once, with the sum of its counts, as if their lines were in one file; a file
    not created yet (no miss there) is no error."""
    monkeypatch.setenv("TRITON_DEJAVU_READ_ONLY", "1")
    files = [tmp_path / "misses-a.jsonl", tmp_path / "misses-b.jsonl"]
    for misses, ns in zip(files, [(100, 100, 7), (100, 9)]):
        monkeypatch.setenv("TRITON_DEJAVU_MISSES_FILE", str(misses))
        for n in ns:
            run_add(tuned_add(FakeBench()), n)
    monkeypatch.delenv("TRITON_DEJAVU_MISSES_FILE")
    with files[1].open("a") as f:
        f.write("not json\n")

    never = tmp_path / "misses-c.jsonl"
    assert cli.main(["misses", *map(str, files), str(never), "--json"]) == 0
    captured = capsys.readouterr()
    payload = json.loads(captured.out)
    assert {m["key"]: m["count"] for m in payload["misses"]} == {
        repr(add_key(100)): 3,
        repr(add_key(7)): 1,
        repr(add_key(9)): 1,
    }
    assert payload["misses"][0]["key"] == repr(add_key(100))  # most frequent first, over all files
    assert payload["invalid_lines"] == 1 and payload["files"] == [*map(str, files), str(never)]
    assert "misses-c.jsonl does not exist: no miss recorded" in captured.err


# --- deterministic selection -------------------------------------------------------------------------------

SERVE = """
import json, sys
sys.path[:0] = sys.argv[1:2]
from kernels import FakeBench, run_add, tuned_add
import logging, torch, triton, warnings
records = []
handler = logging.Handler(logging.INFO)
handler.emit = lambda record: records.append(record.getMessage())
logging.getLogger("triton_dejavu_like").addHandler(handler)
logging.getLogger("triton_dejavu_like").setLevel(logging.INFO)
bench = FakeBench()
tuner = tuned_add(bench)
answers = []
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for n, dtype in [(100, torch.float32), (31, torch.float32), (9000, torch.float32), (100, torch.float64)]:
        run_add(tuner, n, dtype=dtype)
        answers.append([n, str(dtype), tuner.last_decision, tuner.best_config.kwargs["BLOCK"]])
warned = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
logged = [text for text in records if "is not in the store; answered by" in text]
print(json.dumps({"answers": answers, "calls": bench.calls, "warned": warned, "logged": logged}))
"""


def test_deterministic_answers_are_identical_in_fresh_processes(tmp_path):
    tuner = tuned_add(FakeBench())
    seed(tuner, storage(), {add_key(63): 64, add_key(15): 16, add_key(4096): 128})
    before = tree(storage())
    outputs = []
    for hash_seed in ("1", "2"):
        env = {"TRITON_DEJAVU_DETERMINISTIC": "1", "PYTHONHASHSEED": hash_seed}
        outputs.append(json.loads(run_snippet(SERVE, env, timeout=300).splitlines()[-1]))
    assert outputs[0] == outputs[1]
    result = outputs[0]
    assert result["calls"] == 0
    assert result["answers"] == [
        [100, "torch.float32", "nearest", 64],
        [31, "torch.float32", "nearest", 16],
        [9000, "torch.float32", "nearest", 128],
        [100, "torch.float64", "default", 16],
    ]
    # one warning for the kernel (it was one per key: unbounded with dynamic shapes), a log record per key
    [warning] = result["warned"]
    assert "tuning is off (TRITON_DEJAVU_DETERMINISTIC=1)" in warning
    assert len(result["logged"]) == 4 and all("TRITON_DEJAVU_DETERMINISTIC=1" in t for t in result["logged"])
    assert "key (9000, 'torch.float32', 'torch.float32', 'torch.float32')" in result["logged"][2]
    assert tree(storage()) == before


def test_a_forced_fallback_with_tuning_off_is_counted_as_a_miss(tmp_path, monkeypatch):
    misses = tmp_path / "misses.jsonl"
    monkeypatch.setenv("TRITON_DEJAVU_MISSES_FILE", str(misses))
    monkeypatch.setenv("TRITON_DEJAVU_READ_ONLY", "1")
    monkeypatch.setenv("TRITON_DEJAVU_FORCE_FALLBACK", "1")
    bench = FakeBench()
    heuristic = lambda key: triton.Config({"BLOCK": 64}, num_warps=1)  # noqa: E731
    tuner = tuned_add(bench, fallback_heuristic=heuristic)
    run_add(tuner, 100)
    assert (tuner.last_decision, block(tuner), bench.calls) == ("heuristic", 64, 0)
    assert tdl.misses() == {ADD: {add_key(100): 1}}
    [line] = misses.read_text().splitlines()
    assert json.loads(line)["answer"] == "heuristic"

    monkeypatch.delenv("TRITON_DEJAVU_READ_ONLY")  # tuning on: the forced fallback is no miss
    run_add(tuner, 200)
    assert tuner.last_decision == "heuristic" and tdl.misses() == {ADD: {add_key(100): 1}}


# --- fallback functions that fail ----------------------------------------------------------------------


def raising_heuristic(key):
    raise KeyError(key[0])


def misnamed_heuristic(key):
    return triton.Config({"BLOCKX": 32}, num_warps=1)


def overfull_heuristic(key):
    """Sets BLOCK, and a parameter add_kernel does not have: Triton refuses the launch ("Keyword
    argument BLOCK_N was specified but unrecognised"; the interpreter ignores it)."""
    return triton.Config({"BLOCK": 32, "BLOCK_N": 8}, num_warps=1)


def said(caught, category=tdl.DejavuTuningWarning) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, category)]


@pytest.mark.parametrize(
    ("heuristic", "problem"),
    [
        (raising_heuristic, "raised KeyError: 100 for key"),
        (
            misnamed_heuristic,
            r"returned a config without BLOCK \(tuned meta-parameters of the kernel; it sets BLOCKX\)",
        ),
        (overfull_heuristic, "returned a config that sets 'BLOCK_N', neither an argument of the kernel"),
    ],
    ids=["raises", "misnamed", "unknown parameter"],
)
def test_a_heuristic_that_fails_while_serving_is_said_once_and_passed_over(monkeypatch, heuristic, problem):
    """Serving: the call is answered as if there were no heuristic (the first config), counted as a
    miss, and the failure is said once per kernel, naming it, the function and the key (a raising
    heuristic failed every call with its bare error; a config without BLOCK failed the launch)."""
    monkeypatch.setenv("TRITON_DEJAVU_READ_ONLY", "1")
    tuner = tuned_add(FakeBench(), fallback_heuristic=heuristic)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_add(tuner, 100)
        run_add(tuner, 100)
        run_add(tuner, 200)
    assert (tuner.last_decision, block(tuner)) == ("default", 16)
    assert tdl.misses() == {ADD: {add_key(100): 1, add_key(200): 1}}
    [failure] = [text for text in said(caught) if "fallback_heuristic test_serving" in text]
    assert re.match(f"{ADD}: fallback_heuristic test_serving.{heuristic.__name__} {problem}", failure)
    assert repr(add_key(100)) in failure and "answering as if there were no fallback_heuristic" in failure


@pytest.mark.parametrize(
    ("heuristic", "problem", "cause"),
    [
        (raising_heuristic, "raised KeyError: 100", KeyError),
        (misnamed_heuristic, "returned a config without BLOCK", type(None)),
        (overfull_heuristic, "returned a config that sets 'BLOCK_N'", type(None)),
    ],
    ids=["raises", "misnamed", "unknown parameter"],
)
def test_a_heuristic_that_fails_while_tuning_is_allowed_is_an_error_naming_it(
    monkeypatch, heuristic, problem, cause
):
    monkeypatch.setenv("TRITON_DEJAVU_FORCE_FALLBACK", "1")
    tuner = tuned_add(FakeBench(), fallback_heuristic=heuristic)
    named = f"{ADD}: fallback_heuristic test_serving.{heuristic.__name__} {problem}"
    with pytest.raises(tdl.AutotuningError, match=named) as failed:
        run_add(tuner, 100)
    assert repr(add_key(100)) in str(failed.value)
    assert isinstance(failed.value.__cause__, cause)


def test_a_forced_heuristic_that_fails_while_serving_is_asked_once_per_miss(monkeypatch):
    """TRITON_DEJAVU_FORCE_FALLBACK=1 with tuning off: a heuristic with no answer was asked again by
    the rules of a miss with tuning off, twice for one key."""
    monkeypatch.setenv("TRITON_DEJAVU_READ_ONLY", "1")
    monkeypatch.setenv("TRITON_DEJAVU_FORCE_FALLBACK", "1")
    asked = []

    def unsure(key):
        asked.append(key)
        return None

    tuner = tuned_add(FakeBench(), fallback_heuristic=unsure)
    seed(tuner, storage(), {add_key(64): 32})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_add(tuner, 100)
        run_add(tuner, 100, dtype=torch.float64)
    assert any("unsure returned NoneType" in text for text in said(caught))
    assert asked == [add_key(100), (100, *("torch.float64",) * 3)]
    assert tuner.last_decision == "default"
    assert tdl.misses() == {ADD: {add_key(100): 1, (100, *("torch.float64",) * 3): 1}}


def test_an_informed_fallback_that_fails_is_handled_as_a_heuristic(monkeypatch):
    """Without a fallback_heuristic to fall back to: an error naming it while tuning is allowed (it
    was its bare error), and answered as any miss with tuning off (here by the nearest key)."""
    tuner = tuned_add(FakeBench())
    seed(tuner, storage(), {add_key(64): 32})
    monkeypatch.setenv("TRITON_DEJAVU_FORCE_FALLBACK", "1")

    def informed(key, cache):
        raise RuntimeError("no idea")

    with pytest.raises(
        tdl.AutotuningError, match=r"informed_fallback .*informed raised RuntimeError"
    ) as failed:
        run_add(tuned_add(FakeBench(), informed_fallback=informed), 100)
    assert isinstance(failed.value.__cause__, RuntimeError)

    monkeypatch.setenv("TRITON_DEJAVU_READ_ONLY", "1")
    serving = tuned_add(FakeBench(), informed_fallback=informed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_add(serving, 100)
    assert (serving.last_decision, block(serving)) == ("nearest", 32)
    assert any(re.search("informed_fallback .* raised RuntimeError", text) for text in said(caught))
    assert not said(caught, tdl.DejavuConfigWarning)  # no "no fallback_heuristic was given"
