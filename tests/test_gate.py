"""Stream gates (``measure/gate.py``): the order in which gates close and open around timed chunks.

The gate kernel itself needs a GPU (``tests/test_gpu_timing.py``); here a gate records what it would
launch, so the protocol the timing relies on is checked on CPU: a chunk's gate opens only after the
chunk and the gate behind it are enqueued, and every gate is open when the call returns or raises.
"""

from __future__ import annotations

import numpy as np
import pytest

from triton_dejavu_like.measure import gate as gate_module
from triton_dejavu_like.measure.gate import StreamGate, chunked


class RecordingGate(StreamGate):
    def __init__(self, capacity: int = 16) -> None:  # no pinned memory, no kernel
        self._view = np.zeros(capacity, dtype=np.int32)
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


def test_without_a_gpu_timing_goes_ungated(caplog):
    with caplog.at_level("DEBUG", logger=gate_module.__name__):
        assert gate_module.make_gate() is None
    assert "timing without a stream gate" in caplog.text


def test_chunked_covers_every_round_once_in_order():
    pieces = list(chunked(10, 4))
    assert [list(p) for p in pieces] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert list(chunked(0, 4)) == []
