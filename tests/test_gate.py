"""Stream gates (``measure/gate.py``): the order in which gates close and open around timed chunks.

The gate kernel itself needs a GPU (``tests/test_gpu_timing.py``); here a gate records what it would
launch, so the protocol the timing relies on is checked on CPU: a chunk's gate opens only after the
chunk and the gate behind it are enqueued, and every gate is open when the call returns or raises.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future

import numpy as np
import pytest

from triton_dejavu_like.measure import bench as bench_module
from triton_dejavu_like.measure import gate as gate_module
from triton_dejavu_like.measure.bench import GpuBenchmarker, TimingPolicy
from triton_dejavu_like.measure.gate import StreamGate, chunked


class RecordingGate(StreamGate):
    def __init__(self, capacity: int = 16) -> None:  # no pinned memory, no kernel
        self._view = np.zeros(capacity, dtype=np.int32)
        self._spins_view = np.zeros(capacity, dtype=np.int32)
        self._max_spins = 100
        self._used = 0
        self.log: list[tuple[str, int]] = []

    def _launch(self, index: int) -> None:
        self.log.append(("close", index))

    def _open(self, index: int) -> None:
        self.log.append(("open", index))
        super()._open(index)


def test_each_chunk_runs_only_once_it_and_the_next_gate_are_enqueued():
    gate = RecordingGate()
    gate.chunks(lambda i: gate.log.append(("chunk", i)), 3)
    assert gate.log == [
        ("close", 0), ("chunk", 0),
        ("close", 1), ("open", 0), ("chunk", 1),
        ("close", 2), ("open", 1), ("chunk", 2),
    ]  # fmt: skip
    assert gate._view[:3].tolist() == [1, 1, 1]  # the last one is opened on return
    gate.log.clear()
    gate.chunks(lambda i: gate.log.append(("chunk", i)), 1)  # the flags are reused from the start
    assert gate.log == [("close", 0), ("chunk", 0)]
    assert gate._view[:4].tolist() == [1, 0, 0, 0]


def test_every_gate_is_open_when_a_launch_raises():
    gate = RecordingGate()

    def enqueue(i: int) -> None:
        if i == 2:
            raise ValueError("launch failed")

    with pytest.raises(ValueError, match="launch failed"):
        gate.chunks(enqueue, 5)
    assert gate._used == 3
    assert gate._view[:3].tolist() == [1, 1, 1]  # nothing left for the GPU to wait on


def test_running_out_of_flags_leaves_no_gate_closed():
    gate = RecordingGate(capacity=2)
    with pytest.raises(RuntimeError, match="out of flags"):
        gate.chunks(lambda i: None, 3)
    assert gate._view.tolist() == [1, 1]


def test_a_gate_that_opened_by_itself_is_reported_for_the_last_call_only():
    gate = RecordingGate()
    gate.chunks(lambda i: None, 3)
    assert not gate.timed_out()
    gate._spins_view[1] = gate._max_spins  # what the kernel writes when it gives up waiting
    assert gate.timed_out()
    gate.chunks(lambda i: None, 2)  # the next call starts with fresh counts
    assert not gate.timed_out()


@pytest.fixture
def gates_available(monkeypatch):
    monkeypatch.setattr(gate_module, "_unavailable", None)


def test_without_a_gpu_timing_goes_ungated_and_stops_trying(gates_available, monkeypatch, caplog):
    made = []
    real = gate_module.StreamGate

    def counting(*args, **kwargs):
        made.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(gate_module, "StreamGate", counting)
    with caplog.at_level("DEBUG", logger=gate_module.__name__):
        assert gate_module.make_gate() is None  # no pinned memory without a GPU
        assert gate_module.make_gate() is None
    assert len(made) == 1  # the second call does not try again
    assert caplog.text.count("timing without stream gates") == 1


def test_a_gate_that_does_not_see_its_flag_is_not_used(gates_available, monkeypatch):
    class Deaf(RecordingGate):
        def _launch(self, index: int) -> None:
            self._spins_view[index] = self._max_spins  # spun until it gave up

    monkeypatch.setattr(gate_module, "StreamGate", Deaf)
    monkeypatch.setattr("torch.cuda.synchronize", lambda *a, **k: None)
    assert gate_module.make_gate() is None
    assert "did not see its flag" in gate_module._unavailable


def test_chunked_covers_every_round_once_in_order():
    pieces = list(chunked(10, 4))
    assert [list(p) for p in pieces] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert list(chunked(0, 4)) == []


def gpu_benchmarker(finalists: int = 3) -> GpuBenchmarker:
    return GpuBenchmarker(None, None, False, TimingPolicy(finalists=finalists))


def test_the_gate_kernel_is_compiled_ahead_and_the_first_timing_waits_for_it(gates_available, monkeypatch):
    monkeypatch.setattr(gate_module, "_made", False)
    benchmarker = gpu_benchmarker()
    compiling: Future[None] = Future()
    jobs = []
    benchmarker.compile_ahead(lambda job: jobs.append(job) or compiling)
    assert jobs == [gate_module.compile_kernel]
    made = []
    monkeypatch.setattr(bench_module, "make_gate", lambda: made.append(compiling.done()))
    threading.Timer(0.2, compiling.set_result, [None]).start()
    benchmarker._gate()
    benchmarker._gate()
    assert made == [True]  # once, after the compile ahead finished (not compiled twice at once)


@pytest.mark.parametrize("case", ["ungated", "single stage", "gates unavailable", "gate made already"])
def test_nothing_is_compiled_ahead_where_no_gate_will_be_made(case, gates_available, monkeypatch):
    monkeypatch.setattr(gate_module, "_made", case == "gate made already")
    if case == "gates unavailable":
        monkeypatch.setattr(gate_module, "_unavailable", "no pinned memory")
    benchmarker = gpu_benchmarker(finalists=0 if case == "single stage" else 3)
    benchmarker.gated = case != "ungated"
    benchmarker.compile_ahead(lambda job: pytest.fail(f"{case}: compiled {job.__name__} ahead"))
