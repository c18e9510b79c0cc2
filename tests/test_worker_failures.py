"""A candidate's failure in a worker process (a compile worker, an isolated worker) travels to the
tuning process as its exception, rebuilt there: when no candidate ran, the error raised has it as
its cause, with its attributes, as when the candidate failed in process. What cannot be rebuilt
comes back as the worker's one-line reason."""

from __future__ import annotations

import ast
import concurrent.futures as cf
import math
import pickle

import pytest
import triton
from kernels import Refused
from triton.compiler.errors import CompilationError
from triton.runtime.errors import OutOfResources

import triton_dejavu_like as tdl
from triton_dejavu_like.measure.isolation.transfer import MAX_PACKED_BYTES, PackedFailure, pack_failure
from triton_dejavu_like.measure.pipeline import Pipeline
from triton_dejavu_like.search import BatchSearch, Budget, SearchSpace, make_strategy
from triton_dejavu_like.tuner.trial import Trial


def sent(failure: BaseException | str) -> PackedFailure:
    """``failure`` packed in a worker and received here: pickled, as a pipe or a process pool sends it."""
    return pickle.loads(pickle.dumps(pack_failure(failure)))


def compile_error() -> CompilationError:
    src = "def kernel(BLOCK):\n    x = tl.arange(0, BLOCK)\n"
    node = ast.parse(src).body[0].body[0]
    return CompilationError(src, node, "arange's range must be a power of 2")


@pytest.mark.parametrize(
    ("error", "attributes"),
    [
        (
            OutOfResources(16000, 1000, "shared memory"),
            {"required": 16000, "limit": 1000, "name": "shared memory"},
        ),
        (
            compile_error(),
            {"error_message": "arange's range must be a power of 2", "src": compile_error().src},
        ),
        (KeyError("acc_ptr"), {"args": ("acc_ptr",)}),
        # does not pickle: its class, arguments and the attributes that pickle travel
        (Refused(16000, 1000), {"args": ("needs 16000 bytes, has 1000",), "required": 16000, "limit": 1000}),
    ],
    ids=["OutOfResources", "CompilationError", "KeyError", "unpicklable"],
)
def test_a_workers_exception_is_rebuilt_as_its_class_with_its_attributes(error, attributes):
    packed = sent(error)
    rebuilt = packed.failure()
    assert type(rebuilt) is type(error) and str(rebuilt) == str(error)
    assert {name: getattr(rebuilt, name) for name in attributes} == attributes
    assert packed.reason.startswith(f"{type(error).__name__}: ") and "\n" not in packed.reason
    assert len(packed.payload) < 1024  # the transfer is cheap: one small pickle per failed candidate


def test_an_exception_that_pickles_comes_back_as_itself_even_where_its_text_changes():
    """Its own pickling decides what comes back (here a new object, at another address)."""
    rebuilt = sent(ValueError(object())).failure()
    assert type(rebuilt) is ValueError and type(rebuilt.args[0]) is object


def test_what_cannot_be_rebuilt_comes_back_as_the_workers_reason():
    class Local(Exception):  # a class the parent cannot name
        pass

    class NeedsItsLock(Refused):  # its text needs the attribute that cannot travel
        def __str__(self) -> str:
            return f"lock held: {self.lock.locked()}"

    large = ValueError("a large attribute")
    large.payload = bytes(MAX_PACKED_BYTES)
    assert sent(Local("x")).failure() == "Local: x"
    assert sent(NeedsItsLock(1, 0)).failure() == "NeedsItsLock: lock held: False"
    assert sent(large) == PackedFailure(None, "ValueError: a large attribute")
    died = "a compile worker died compiling it"
    assert sent(died) == PackedFailure(None, died)


class FailingPool:
    """A compile pool whose every compile fails in its worker with ``OutOfResources``, sent back as
    the real pool's futures send it (pickled)."""

    workers = 2

    def submit(self, call, config):
        future: cf.Future = cf.Future()
        future.set_result(sent(OutOfResources(config.kwargs["BLOCK"] * 1000, 1000, "shared memory")))
        return future

    def compile_started(self, future):  # each is done at once: never overdue
        return None


def test_every_candidate_failing_in_compile_workers_raises_with_the_workers_error_as_the_cause():
    """The compile pool's path: the pipeline rebuilds each worker's error and rules the candidate
    out with it; the error raised is the first candidate's, with its attributes."""
    configs = [triton.Config({"BLOCK": b}) for b in (16, 32, 64)]
    trial = Trial("k", configs)
    search = BatchSearch(make_strategy("exhaustive"), SearchSpace.from_configs(configs), Budget())
    pipeline = Pipeline(
        search,
        configs,
        measure=lambda i: pytest.fail("a candidate that did not compile was timed"),
        rule_out=lambda i, failure: trial.rule_out(configs[i], failure),
        prepare=lambda batch: {},
        batch_size=2,
    )
    pipeline.run_streamed(FailingPool(), call=None)
    assert all(math.isinf(t) for t in search.results.values()) and len(search.results) == 3
    reason = trial.failures[configs[0]]  # the worker's one-line reason, for logs and the store
    assert reason.startswith("OutOfResources: out of resource: shared memory, Required: 16000,")
    error = trial.all_failed("k: all 3 candidate configs failed")
    assert isinstance(error, OutOfResources) and isinstance(error, tdl.AutotuningError)
    assert type(error.__cause__) is OutOfResources and error.__cause__.required == 16000
    assert (error.required, error.limit, error.name) == (16000, 1000, "shared memory")
