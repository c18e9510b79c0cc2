"""What torch.compile's support for user-defined Triton kernels reads from an autotuner, checked with
torch's own code (``torch._higher_order_ops.triton_kernel_wrap`` and ``torch._inductor.ir``): a kernel
of ours is accepted or refused as upstream's is, and yields the same configs and tensor names.

Compiling such a kernel needs a GPU (torch finds no Triton device on a CPU build, and the interpreter's
kernels are no ``JITFunction``), so only the checks and the metadata torch reads are exercised here."""

from __future__ import annotations

import types
import warnings
from typing import Any

import pytest
import triton
from compat_helpers import TRITON, add_kernel
from triton_release import needs_upstream_run

import triton_dejavu_like as tdl

functions = pytest.importorskip("torch._dynamo.variables.functions")
inductor_ir = pytest.importorskip("torch._inductor.ir")

PLAIN = [triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})]
CASES: dict[str, dict[str, Any]] = {
    "plain": {},
    "reset_restore": {"reset_to_zero": ["out_ptr"], "restore_value": ["x_ptr"]},
    "do_bench": {"do_bench": lambda call, quantiles=None: 1.0},
    "pre_hook": {"pre_hook": lambda *args, **kwargs: None},
    "config_pre_hook": {"configs": [triton.Config({"BLOCK": 16}, pre_hook=lambda nargs: None)]},
    # upstream's timing arguments, which torch reads from the attributes: it refuses use_cuda_graph
    "warmup_rep": {"warmup": 5, "rep": 20},
    "cuda_graph": {"use_cuda_graph": True},
}


def torch_reads(tuner: Any) -> tuple[str, Any, list[dict[str, Any]], list[str], list[str]]:
    """Whether torch's tracing accepts the kernel, then what Inductor reads from it."""
    variable = types.SimpleNamespace()
    try:
        functions.dynamo_triton_hopifier_singleton.init_variable(variable, tuner, None, (1,))
        verdict = "accepted"
    except Exception as error:  # torch's Unsupported
        verdict = f"refused: {type(error).__name__}"
    node = types.SimpleNamespace(kernel_idx=variable.kernel_idx)
    kernel, configs, restore, reset = inductor_ir.UserDefinedTritonKernel.get_kernel_and_metadata(node)
    return verdict, kernel, [c.kwargs for c in configs], restore, reset


#: What upstream records of its timing arguments, and torch reads.
TIMING_ATTRIBUTES = ("num_warmups", "num_reps", "use_cuda_graph")
ACCEPTED = ("plain", "reset_restore", "do_bench", "warmup_rep")


def upstream_buildable(options: dict[str, Any]) -> dict[str, Any]:
    """Upstream's arguments, with a ``do_bench`` before 3.4 when none is given: its Autotuner then asks
    the GPU driver for a benchmarker when it is built (lazily from 3.4), which fails without a GPU.
    torch does not read ``do_bench``, so the verdict and the metadata are the same."""
    if TRITON >= (3, 4) or "do_bench" in options:
        return options
    return {**options, "do_bench": lambda call, quantiles=None: 1.0}


@needs_upstream_run
@pytest.mark.parametrize("case", list(CASES))
def test_torch_compile_reads_our_autotuner_as_upstreams(case):
    options = dict(CASES[case])
    configs = options.pop("configs", PLAIN)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours_tuner = tdl.autotune(configs=configs, key=["n"], **options)(add_kernel)
        theirs_tuner = triton.autotune(configs=configs, key=["n"], **upstream_buildable(options))(add_kernel)
        ours, theirs = torch_reads(ours_tuner), torch_reads(theirs_tuner)
    assert ours == theirs
    assert ours[1] is add_kernel
    assert [getattr(ours_tuner, a) for a in TIMING_ATTRIBUTES] == [
        getattr(theirs_tuner, a) for a in TIMING_ATTRIBUTES
    ]
    assert ours[0] == ("accepted" if case in ACCEPTED else "refused: Unsupported")


def test_torch_compile_reads_the_configs_of_a_config_space():
    space = tdl.ConfigSpace({"BLOCK": [16, 32]}, num_warps=[1])
    verdict, kernel, configs, _, _ = torch_reads(tdl.autotune(config_space=space, key=["n"])(add_kernel))
    assert verdict == "accepted" and kernel is add_kernel
    assert configs == [{"BLOCK": 16}, {"BLOCK": 32}]
