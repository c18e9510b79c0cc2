"""Many writers, dead writers, and threads: the storage loses nothing and never blocks for good.

Storage-level tests run real processes (forkserver children, a few ms each); two end-to-end tests
tune a kernel through the interpreter in separate Python processes with an instant ``do_bench``.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import triton
from storage_helpers import (
    InstantBench,
    SerialLaunch,
    cache_file,
    double_kernel,
    launch,
    make_entry,
    make_tuner,
    process_context,
    stored_entries,
    worker_hold_lock,
    worker_record,
    worker_record_stopping_at_line,
)

from triton_dejavu_like.codec import decode_config, key_id

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes and signals")


def run_workers(target, args_list) -> None:
    ctx = process_context()
    start = ctx.Barrier(len(args_list))
    procs = [ctx.Process(target=target, args=(start, *args)) for args in args_list]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0, f"worker exited with {p.exitcode}"


def test_sixteen_processes_recording_different_keys_lose_nothing(tmp_path):
    workers = [(str(tmp_path), list(range(i * 4, i * 4 + 4))) for i in range(16)]
    run_workers(worker_record, workers)
    entries = stored_entries(cache_file(tmp_path).path)
    assert sorted(entries) == sorted(key_id((k,)) for k in range(64))


def test_two_processes_recording_the_same_keys_leave_one_valid_entry_each(tmp_path):
    keys = list(range(20))
    run_workers(worker_record, [(str(tmp_path), keys, 16), (str(tmp_path), keys, 128)])
    entries = stored_entries(cache_file(tmp_path).path)
    assert sorted(entries) == sorted(key_id((k,)) for k in keys)
    for entry in entries.values():
        config, _ = decode_config(entry["config"])
        assert config.kwargs["BLOCK"] in (16, 128)


@contextlib.contextmanager
def lock_held_by_another_process(path: Path) -> Iterator[Any]:
    """A process holding the lock of the cache file ``path`` while the block runs; SIGKILLed after."""
    ctx = process_context()
    parent, child = ctx.Pipe()
    holder = ctx.Process(target=worker_hold_lock, args=(str(path), child))
    holder.start()
    try:
        assert parent.poll(30) and parent.recv() == "locked"
        yield holder
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.join(10)


def test_the_lock_of_a_killed_holder_is_released(tmp_path, caplog):
    cf = cache_file(tmp_path, lock_timeout=0.5)
    with lock_held_by_another_process(cf.path) as holder:
        # while the holder lives, the lock is real: a writer gives up after its timeout
        assert not cf.record({key_id((1,)): make_entry((1,))})
        assert "could not lock" in caplog.text
    assert holder.exitcode == -signal.SIGKILL
    assert cf.lock_path.exists()  # the lock file stays; the kernel dropped the lock itself
    started = time.monotonic()
    assert cache_file(tmp_path, lock_timeout=10).record({key_id((2,)): make_entry((2,))})
    assert time.monotonic() - started < 5
    assert list(stored_entries(cf.path)) == [key_id((2,))]


def test_a_stuck_lock_costs_its_timeout_once_and_loses_no_result(tmp_path, monkeypatch):
    """A holder stopped with the lock (SIGSTOP): the first record waits the whole timeout, the later
    ones a short while, and what none of them could write is written once the lock is free, without
    overwriting what another process stored meanwhile for the same key."""
    from triton_dejavu_like.store import cache_file as cache_file_module

    monkeypatch.setattr(cache_file_module, "STUCK_LOCK_WAIT_S", 0.05)
    cf = cache_file(tmp_path, lock_timeout=1.5)
    with lock_held_by_another_process(cf.path) as holder:
        os.kill(holder.pid, signal.SIGSTOP)
        started = time.monotonic()
        assert not cf.record({key_id((1,)): make_entry((1,), block=16)})
        assert time.monotonic() - started >= 1.4
        started = time.monotonic()
        for k in (2, 3):
            assert not cf.record({key_id((k,)): make_entry((k,), block=16)})
        assert time.monotonic() - started < 1.0  # two short waits, not two timeouts
    # another process stored key 3 while this one waited: its entry is newer than the one held back
    assert cache_file(tmp_path).record({key_id((3,)): make_entry((3,), block=128)})
    started = time.monotonic()
    assert cf.record({key_id((4,)): make_entry((4,), block=16)})
    assert time.monotonic() - started < 1.0
    entries = stored_entries(cf.path)
    assert sorted(entries) == sorted(key_id((k,)) for k in (1, 2, 3, 4))
    blocks = {kid: decode_config(entry["config"])[0].kwargs["BLOCK"] for kid, entry in entries.items()}
    assert blocks[key_id((3,))] == 128 and blocks[key_id((1,))] == 16 and blocks[key_id((2,))] == 16


HELD_AT_EXIT = """
import sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from storage_helpers import cache_file, make_entry
from triton_dejavu_like.codec import key_id

cf = cache_file(Path(sys.argv[1]), lock_timeout=0.3)
print("written" if cf.record({{key_id((1,)): make_entry((1,))}}) else "held back", flush=True)
sys.stdin.readline()  # then exits, recording nothing more
"""


@pytest.mark.parametrize("free_at_exit", [True, False])
def test_results_held_back_for_a_stuck_lock_are_written_at_exit(tmp_path, free_at_exit):
    """A process whose only result met a held lock writes it when it exits, if the lock is free by
    then; if not, it says (with default warning settings) that the result was not stored."""
    cf = cache_file(tmp_path)
    script = tmp_path / "record.py"
    script.write_text(HELD_AT_EXIT.format(tests=str(Path(__file__).parent)))
    with lock_held_by_another_process(cf.path):
        child = subprocess.Popen(
            [sys.executable, str(script), str(tmp_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None and child.stdout.readline().strip() == "held back"
        if not free_at_exit:
            _, err = child.communicate("\n", timeout=120)
    if free_at_exit:  # the holder is gone: the lock is free
        _, err = child.communicate("\n", timeout=120)
    assert child.returncode == 0, err
    if free_at_exit:
        assert list(stored_entries(cf.path)) == [key_id((1,))]
        assert "were not written" not in err
    else:
        assert not cf.path.exists()
        assert "DejavuStorageWarning: 1 tuning results were not written" in err


def test_sigkill_at_every_line_of_a_write_keeps_the_previous_file(tmp_path):
    """A writer is frozen at each line of the write path in turn and SIGKILLed there."""
    cf = cache_file(tmp_path)
    assert cf.record({key_id((0,)): make_entry((0,))})
    ctx = process_context()

    def run(key: int, stop_at: tuple[str, int] | None):
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=worker_record_stopping_at_line, args=(str(tmp_path), key, stop_at, child))
        proc.start()
        assert parent.poll(30), "the writer neither stopped nor finished (a lock left behind?)"
        message = parent.recv()
        if message[0] == "stopped":
            os.kill(proc.pid, signal.SIGKILL)
        proc.join(10)
        return message

    done, lines, ok = run(1, None)
    assert done == "done" and ok
    assert {name for name, _ in lines} >= {"record", "update", "file_lock", "_read", "_dump", "atomic_write"}
    expected = {key_id((0,)), key_id((1,))}
    assert set(stored_entries(cf.path)) == expected
    for number, line in enumerate(lines):
        key = 100 + number
        message = run(key, line)
        assert message == ("stopped", line), message
        present = set(stored_entries(cf.path))  # always a complete, valid document
        assert present in (expected, expected | {key_id((key,))}), f"after a kill at {line}"
        expected = present
    # the next writer removes the temporary files the killed writers left behind
    assert cf.record({key_id((999,)): make_entry((999,))})
    assert list(cf.path.parent.glob(".cache.json.*.tmp")) == []
    assert key_id((999,)) in stored_entries(cf.path)


# --- end to end: processes tuning a kernel through the interpreter -------------------------------------

SCRIPT = """
import json, os, sys, time
os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, {tests!r})
from pathlib import Path
from storage_helpers import InstantBench, launch, make_tuner

go = Path(sys.argv[1])
while not go.exists():
    time.sleep(0.01)
bench = InstantBench()
tuner = make_tuner(bench=bench)
decisions = []
for n in map(int, sys.argv[2:]):
    launch(tuner, n)
    decisions.append(tuner.last_decision)
print(json.dumps({{"decisions": decisions, "benchmarks": bench.calls, "path": str(tuner.cache_path())}}))
"""


def test_processes_tuning_different_keys_of_one_kernel_share_one_file(tmp_path):
    store = tmp_path / "store"
    script = tmp_path / "tune.py"
    script.write_text(SCRIPT.format(tests=str(Path(__file__).parent)))
    env = {**os.environ, "TRITON_DEJAVU_STORAGE": str(store), "TRITON_INTERPRET": "1"}
    go = tmp_path / "go"
    sizes = [[100, 101], [200, 201]]
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(go), *map(str, ns)], stdout=subprocess.PIPE, text=True, env=env
        )
        for ns in sizes
    ]
    go.touch()  # both start tuning at the same moment
    results = [json.loads(p.communicate(timeout=300)[0].strip().splitlines()[-1]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert all(r["decisions"] == ["tuned", "tuned"] for r in results)
    # this process restores every key of both without benchmarking
    bench = InstantBench()
    tuner = make_tuner(bench=bench, custom_data_storage=store)
    assert {r["path"] for r in results} == {str(tuner.cache_path())}
    entries = stored_entries(tuner.cache_path())
    assert {e["key"][0] for e in entries.values()} == {n for ns in sizes for n in ns}
    for n in (n for ns in sizes for n in ns):
        launch(tuner, n)
        assert tuner.last_decision == "restored"
    assert bench.calls == 0


FORKED_MID_TUNING = """
import faulthandler, json, os, sys, threading
sys.path.insert(0, {tests!r})
from storage_helpers import InstantBench, launch, make_tuner

class HeldBench(InstantBench):  # the parent's tuning run stops in its first timing until released
    started, release = threading.Event(), threading.Event()
    def __call__(self, kernel_call, quantiles=(0.5, 0.2, 0.8)):
        self.started.set()
        self.release.wait(60)
        return super().__call__(kernel_call, quantiles)

bench = HeldBench()
tuner = make_tuner(bench=bench, custom_data_storage=sys.argv[1])
tuning = threading.Thread(target=launch, args=(tuner, 100))
tuning.start()
bench.started.wait(60)
child = os.fork()
if child == 0:  # a worker forked while the other thread tunes (holding the kernel's lock)
    faulthandler.dump_traceback_later(60, exit=True)  # a hang ends the child, not the test
    bench.release.set()  # (the child's copy: its own tuning runs are not held)
    decisions = []
    for n in (200, 100):  # a key of its own; the key its parent is tuning
        launch(tuner, n)
        decisions.append(tuner.last_decision)
    with open(sys.argv[2], "w") as out:
        json.dump(decisions, out)
    os._exit(0)
bench.release.set()
tuning.join(60)
_, status = os.waitpid(child, 0)
print(json.dumps({{"status": status, "parent": tuner.last_decision}}))
"""


def test_a_child_forked_while_another_thread_tunes_can_tune_and_wait_for_that_key(tmp_path):
    """A pre-forking server whose parent tunes in a thread while it forks a worker: the worker's
    first miss of that kernel waited forever for the lock of a thread it does not have."""
    script = tmp_path / "forked.py"
    script.write_text(FORKED_MID_TUNING.format(tests=str(Path(__file__).parent)))
    decisions = tmp_path / "child.json"
    env = {**os.environ, "TRITON_INTERPRET": "1", "TRITON_DEJAVU_SINGLE_FLIGHT_TIMEOUT": "120"}
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "store"), str(decisions)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"status": 0, "parent": "tuned"}, done.stderr[-3000:]
    # its own key tuned; the parent's key waited for through its lease and restored, not tuned again
    assert json.loads(decisions.read_text()) == ["tuned", "restored"]


# --- threads in one process ------------------------------------------------------------------------


def test_threads_tuning_one_kernel_tune_each_key_once_and_compute_correctly(tmp_path):
    bench = InstantBench(delay_s=0.002)
    tuner = make_tuner(SerialLaunch(double_kernel), bench=bench, custom_data_storage=tmp_path)
    sizes = [50, 60, 70, 80]
    threads_per_size = 3
    start = threading.Barrier(len(sizes) * threads_per_size)
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            start.wait()
            for _ in range(4):
                launch(tuner, n)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in sizes for _ in range(threads_per_size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert bench.calls == len(sizes) * 3  # one tuning of three configs per key, none repeated
    assert {key[0] for key in tuner.cache} == set(sizes)
    entries = stored_entries(tuner.cache_path())
    assert {e["key"][0] for e in entries.values()} == set(sizes)


@pytest.mark.parametrize("change", [".configs", ".cache"])
def test_a_change_from_another_thread_while_a_decision_is_written_is_not_undone_by_it(tmp_path, change):
    """``kernel.configs = [...]`` or ``kernel.cache.clear()`` in another thread at the moment a decision is
    written: the decision, made over what was there before, lands before the change (which forgets
    it) or not at all, so the next launch of that key is decided again."""
    tuner = make_tuner(custom_data_storage=tmp_path)
    launched: list[int] = []
    pinned = triton.Config({"BLOCK": 64}, pre_hook=lambda nargs: launched.append(nargs["BLOCK"]))
    if change == ".configs":
        written, changer = (
            "self._launch[lookup] = launch",
            threading.Thread(target=setattr, args=(tuner, "configs", [pinned])),
        )
    else:
        written, changer = "dict.__setitem__(self.cache", threading.Thread(target=tuner.cache.clear)
    on_miss = type(tuner)._on_miss
    source, first = inspect.getsourcelines(on_miss)
    line = first + next(i for i, text in enumerate(source) if written in text)

    def trace(frame, event, arg):
        if frame.f_code is not on_miss.__code__:
            return None
        if event == "line" and frame.f_lineno == line and changer.ident is None:
            changer.start()
            changer.join(0.5)  # it waits until the decision is written, or is done before it is
        return trace

    sys.settrace(trace)
    try:
        launch(tuner, 50)
    finally:
        sys.settrace(None)
    changer.join(10)
    assert changer.ident is not None, "the decision was not written on the traced line"
    if change == ".cache":
        assert not tuner.cache, tuner.cache
    else:
        launch(tuner, 50)
        assert launched == [64]
