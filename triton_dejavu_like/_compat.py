"""Every difference between the supported Triton releases (3.2 to 3.9) lives here.

The rest of the package asks this module instead of testing ``triton.__version__`` itself.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import triton
from triton.compiler import errors as _compiler_errors
from triton.runtime import autotuner as _upstream_autotuner
from triton.runtime import errors as _runtime_errors
from triton.runtime import interpreter as _interpreter
from triton.runtime.jit import JITFunction

from ._log import log

try:  # 3.4+: the environment is read through ``triton.knobs``
    from triton import knobs as _knobs
except ImportError:  # 3.2 / 3.3
    _knobs = None


TRITON_VERSION_STR: str = triton.__version__

UpstreamAutotuner = _upstream_autotuner.Autotuner
Config = triton.Config

#: ``cache_results`` (upstream's own disk cache) exists from 3.4 on.
AUTOTUNER_HAS_CACHE_RESULTS: bool = (
    "cache_results" in inspect.signature(UpstreamAutotuner.__init__).parameters
)

#: The typed fields of ``triton.Config`` in the installed release, with their defaults, in order.
CONFIG_FIELDS: dict[str, Any] = {
    name: param.default
    for name, param in inspect.signature(Config.__init__).parameters.items()
    if name not in ("self", "kwargs", "pre_hook")
}

#: Every Config field that some Triton release 2.x-3.9 knows. A ConfigSpace list for a field in this
#: set but not in :data:`CONFIG_FIELDS` is dropped with a warning; any other name is an error.
CONFIG_FIELDS_ANY_RELEASE: frozenset[str] = frozenset(
    {
        "num_warps",
        "num_stages",
        "num_ctas",
        "maxnreg",
        "ir_override",
        "num_buffers_warp_spec",
        "num_consumer_groups",
        "reg_dec_producer",
        "reg_inc_consumer",
        "enable_warp_specialization",
        "enable_persistent",
    }
)


class _AutotunerError(RuntimeError):
    """Upstream 3.6's ``AutotunerError`` for 3.2-3.5: the same ``error_message`` and ``str()``."""

    def __init__(self, error_message: str | None = None) -> None:
        super().__init__(error_message)
        self.error_message = error_message

    def __str__(self) -> str:
        return f"Autotuner error: {self.error_message or ''}"


#: Base class for our tuning errors: upstream's ``AutotunerError`` where it exists (3.6+), else a
#: ``RuntimeError`` with its attribute and text, so the message is the same on every release.
AutotunerErrorBase: type[Exception] = getattr(_runtime_errors, "AutotunerError", _AutotunerError)

#: What upstream's ``Autotuner._bench`` turns into an infinite time, going on with the next config:
#: ``OutOfResources`` and ``CompileTimeAssertionFailure`` on every release, ``PTXASError`` from 3.3 on
#: (3.2 has no such class: a ptxas failure is a ``RuntimeError`` there). Anything else a benchmark
#: launch raises ends upstream's tuning at once. When every config got an infinite time, upstream
#: launches the first one, which raises its error again.
UPSTREAM_SKIPPED_ERRORS: tuple[type[Exception], ...] = tuple(
    cls
    for cls in (
        _runtime_errors.OutOfResources,
        _compiler_errors.CompileTimeAssertionFailure,
        getattr(_runtime_errors, "PTXASError", None),
    )
    if cls is not None
)


def triton_error_class(name: str) -> type[Exception] | None:
    """The exception class called ``name`` in ``triton.runtime.errors`` or ``triton.compiler.errors``
    (those of the installed release), or None."""
    for module in (_runtime_errors, _compiler_errors):
        found = getattr(module, name, None)
        if isinstance(found, type) and issubclass(found, Exception):
            return found
    return None


#: The compile options the interpreter's ``run`` accepts and drops. 3.2's interpreter strips only
#: these (``RESERVED_KWS``) and passes any other option (3.2's Config has ``num_buffers_warp_spec``
#: and three more) to the Python function, which then fails; later releases drop every keyword that
#: is not a kernel argument.
INTERPRETER_OPTIONS: frozenset[str] = frozenset(
    getattr(_interpreter, "RESERVED_KWS", ("num_warps", "num_stages", "num_ctas", "maxnreg"))
)

#: Compile options that may appear in a Config's kwargs on some backend even where that backend's
#: options class is not installed or not found (AMD's options on a CUDA-only or CPU-only machine).
KNOWN_COMPILE_OPTIONS: frozenset[str] = frozenset(
    {
        "num_warps",
        "num_stages",
        "num_ctas",
        "maxnreg",
        "waves_per_eu",
        "matrix_instr_nonkdim",
        "kpack",
        "enable_fp_fusion",
        "launch_cooperative_grid",
    }
)


def _env_flag(name: str) -> bool:
    """A flag as 3.2 and 3.3 read their environment (``os.getenv(name, "0") == "1"``): on only for
    exactly ``1``."""
    return os.environ.get(name, "0") == "1"


def print_autotuning() -> bool:
    """``TRITON_PRINT_AUTOTUNING``, read the way the installed Triton reads it."""
    if _knobs is not None:
        return bool(_knobs.autotuning.print)
    return _env_flag("TRITON_PRINT_AUTOTUNING")


def interpreter_env() -> bool:
    if _knobs is not None:
        return bool(_knobs.runtime.interpret)
    return _env_flag("TRITON_INTERPRET")


def autotuning_listener() -> Callable[..., Any] | None:
    """3.8+: ``knobs.autotuning.listener``, called after each tuning."""
    if _knobs is None:
        return None
    return getattr(_knobs.autotuning, "listener", None)


def python_function(fn: Any) -> Callable[..., Any]:
    """The plain Python function under a JITFunction / InterpretedFunction / Heuristics stack."""
    base = fn
    while not inspect.isfunction(base):
        base = base.fn
    return base


def _wrappers(fn: Any) -> Iterator[Any]:
    """``fn`` and each object under it (``.fn``: Heuristics, JITFunction, InterpretedFunction, ...),
    down to but not including the plain Python function."""
    current = fn
    while current is not None and not inspect.isfunction(current):
        yield current
        current = getattr(current, "fn", None)


def jit_function(fn: Any) -> JITFunction | None:
    """The JITFunction under a stack of wrappers, or None (interpreter mode)."""
    return next((w for w in _wrappers(fn) if isinstance(w, JITFunction)), None)


def heuristics_under(fn: Any) -> list[dict[str, Callable[..., Any]]]:
    """The ``values`` of each ``@triton.heuristics`` between ``fn`` and its Python function, outermost
    first (``{meta-parameter name: function of the arguments}``)."""
    return [dict(w.values) for w in _wrappers(fn) if isinstance(w, _upstream_autotuner.Heuristics)]


#: The ``@triton.jit`` arguments that change the code compiled for a function, its source aside.
_JIT_OPTIONS = ("do_not_specialize", "do_not_specialize_on_alignment", "noinline", "debug")


def _jit_arguments(fn: Any) -> dict[str, Any]:
    """The ``@triton.jit`` arguments of the JITFunction or InterpretedFunction under ``fn``'s wrappers."""
    for wrapper in _wrappers(fn):
        if isinstance(wrapper, JITFunction):
            return {name: getattr(wrapper, name, None) for name in _JIT_OPTIONS}
        if type(wrapper).__name__ == "InterpretedFunction":  # keeps the arguments it was given:
            # 3.5+ as ``kwargs``, 3.2-3.4 only in its ``rewriter`` (a FunctionRewriter)
            given = getattr(wrapper, "kwargs", None)
            if given is None:
                given = getattr(getattr(wrapper, "rewriter", None), "kwargs", None)
            return dict(given or {})
    return {}


def jit_options(fn: Any) -> dict[str, Any]:
    """The ``@triton.jit`` arguments of ``fn`` that change its compiled code, those left at their
    default omitted: the parameters not specialized (by name, sorted), ``noinline`` and ``debug``."""
    given = _jit_arguments(fn)
    names = list(inspect.signature(python_function(fn)).parameters)
    options: dict[str, Any] = {}
    for option in ("do_not_specialize", "do_not_specialize_on_alignment"):
        given_params = given.get(option) or ()
        params = {names[p] if isinstance(p, int) and 0 <= p < len(names) else str(p) for p in given_params}
        if params:
            options[option] = sorted(params)
    if given.get("noinline"):
        options["noinline"] = True
    if given.get("debug") is not None:
        options["debug"] = bool(given["debug"])
    return options


def is_interpreted(fn: Any) -> bool:
    """True when the kernel runs through the interpreter (``TRITON_INTERPRET=1`` at jit time)."""
    for wrapper in _wrappers(fn):
        if type(wrapper).__name__ == "InterpretedFunction":
            return True
        if isinstance(wrapper, JITFunction):
            return False
    return interpreter_env()


class NoGpuDriverError(RuntimeError):
    """Triton finds no GPU driver for a kernel that is not interpreted (the original error is the cause)."""


def _driver_error() -> Exception | None:
    """The error Triton raises when it chooses a driver, or None when one is active.

    Asks each backend's ``is_active()`` first, as Triton does when it chooses (the CUDA backend asks
    ``torch.cuda.is_available()``, which platform detection asks anyway), so that a machine with a
    GPU never initialises its driver here; only when none is active is Triton's own choice made, to
    get its error.
    """
    try:
        from triton.backends import backends

        if any(backend.driver.is_active() for backend in backends.values()):
            return None
        from triton.runtime.driver import driver

        driver.active.get_current_target()
    except Exception as exc:  # the layout of triton.backends differs between releases
        return exc if "active" in str(exc) else None
    return None


def require_gpu_driver(kernel: str, fn: Any) -> None:
    """Raise :class:`NoGpuDriverError`, saying what to do, when ``fn`` needs a GPU that Triton cannot
    use (no GPU, no driver, and ``TRITON_INTERPRET`` not set): the error Triton itself gives
    ("0 active drivers") comes much later, deep inside the first launch."""
    if is_interpreted(fn):
        return
    cause = _driver_error()
    if cause is not None:
        raise NoGpuDriverError(
            f"{kernel}: Triton finds no GPU driver ({cause}). To run Triton kernels on CPU tensors, set "
            "TRITON_INTERPRET=1 before triton is imported; otherwise make a CUDA or ROCm GPU and its "
            "driver visible to this process (see nvidia-smi or rocm-smi)."
        ) from cause


def is_jit_callable(obj: Any) -> bool:
    """Something a kernel can call that has Triton source of its own (a @jit helper)."""
    if isinstance(obj, JITFunction):
        return True
    jit_callable = getattr(triton.runtime.jit, "JITCallable", None)  # 3.5+: constexpr_function too
    if jit_callable is not None and isinstance(obj, jit_callable):
        return True
    return type(obj).__name__ == "InterpretedFunction" and inspect.isfunction(getattr(obj, "fn", None))


def is_constexpr(obj: Any) -> bool:
    return isinstance(obj, triton.language.constexpr)


def constexpr_value(obj: Any) -> Any:
    return obj.value if is_constexpr(obj) else obj


def aggregate_parts(obj: Any) -> tuple[dict[str, Any], list[Any]] | None:
    """A ``@triton.aggregate`` class (3.5+): its fields' annotations and the functions Triton hashes
    for it (``__init__`` and the methods, Triton's own generated ones included); None for anything
    else."""
    if not (isinstance(obj, type) and getattr(obj, "__triton_aggregate__", False)):
        return None
    return dict(getattr(obj, "__annotations__", {})), list(getattr(obj, "hash_attrs", ()))


def upstream_init_kwargs(
    *,
    do_bench: Callable[..., Any],
) -> dict[str, Any]:
    """Keyword arguments for ``triton.runtime.autotuner.Autotuner.__init__`` that differ by release.

    ``warmup``/``rep``/``use_cuda_graph`` are never forwarded (3.3+ warn about them, and our own
    benchmarker honours them), ``do_bench`` is always given (3.2/3.3 otherwise ask the driver for a
    benchmarker at init, which fails on a machine without a GPU), and upstream's own disk cache is
    off where it exists (3.4+), or ``TRITON_CACHE_AUTOTUNING=1`` would cache twice.
    """
    kwargs: dict[str, Any] = {"warmup": None, "rep": None, "use_cuda_graph": False, "do_bench": do_bench}
    if AUTOTUNER_HAS_CACHE_RESULTS:
        kwargs["cache_results"] = False
    return kwargs


def disable_upstream_disk_cache(tuner: Any) -> None:
    if hasattr(tuner, "cache_results"):
        tuner.cache_results = False


def gpu_do_bench() -> Callable[..., Any]:
    from triton.testing import do_bench

    return do_bench


def gpu_do_bench_cudagraph() -> Callable[..., Any]:
    from triton.testing import do_bench_cudagraph

    return do_bench_cudagraph


def l2_flush_buffer() -> Any:
    """The buffer Triton's own ``do_bench`` zeroes to flush the L2 cache (256 MB on the device)."""
    from triton.runtime.driver import driver

    return driver.active.get_empty_cache_for_benchmark()


def build_launcher(kernel: Any) -> None:
    """Build the host-side launcher of a compiled kernel, as its first launch would, without the GPU.

    Up to 3.6 (at least) a launcher is a C module made for the kernel's signature and built with
    the C compiler into Triton's cache (a few tenths of a second when the cache is empty; then the
    process that launches finds it there); 3.9's launcher is generic and builds nothing. Raises
    what the driver raises where no driver is present."""
    from triton.runtime.driver import driver

    driver.active.launcher_cls(kernel.src, kernel.metadata)


def load_compiled(kernel: Any) -> None:
    """Load a compiled kernel onto the current device, as its first launch would: raises
    ``OutOfResources`` when it needs more shared memory, threads or registers than the device has."""
    init = getattr(kernel, "_init_handles", None)
    if init is not None:
        init()


@dataclasses.dataclass(frozen=True)
class DriverAnswers:
    """What compiling asks Triton's driver, answered by a process that may use the GPU: the device,
    its target and its properties (a process forked from it cannot ask CUDA itself)."""

    device: int
    target: Any
    properties: dict[str, Any]

    @classmethod
    def of_current_device(cls) -> DriverAnswers:
        from triton.runtime.driver import driver

        active = driver.active
        device = active.get_current_device()
        return cls(device, active.get_current_target(), dict(active.utils.get_device_properties(device)))


class _DetachedUtils:
    def __init__(self, real: Callable[[], Any], answers: DriverAnswers) -> None:
        self._real = real
        self._answers = answers

    def get_device_properties(self, device: int) -> dict[str, Any]:
        return self._answers.properties

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real().utils, name)


class _DetachedDriver:
    """Triton's active driver in a process forked from one that initialised CUDA, which must not use
    CUDA itself: the current device, stream, target and device properties are the parent's answers;
    anything else (loading, launching) goes to the real driver and fails as it would."""

    def __init__(self, real: Callable[[], Any], answers: DriverAnswers) -> None:
        self._real = real
        self._answers = answers
        self.utils = _DetachedUtils(real, answers)

    def get_current_device(self) -> int:
        return self._answers.device

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_current_target(self) -> Any:
        return self._answers.target

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real(), name)


def detach_driver(answers: DriverAnswers) -> None:
    """In a forked compile worker: let ``JITFunction.run(..., warmup=True)`` compile for the parent's
    device without touching CUDA (every release from 3.2 asks the active driver for the current
    device, stream and target; ``DriverConfig.set_active`` exists in all of them). The real driver is
    only looked up if something else is asked."""
    from triton.runtime.driver import driver

    state = vars(driver)  # 3.5+: ``_active``, None until first used; 3.2-3.4: ``active``, a lazy proxy
    current = state.get("_active") or state.get("active")
    driver.set_active(_DetachedDriver(lambda: current if current is not None else driver.default, answers))


def triton_key_function() -> Callable[[], str]:
    """Triton's cached hash of its own sources and library, the start of every compile's key."""
    from triton.compiler import compiler

    key = getattr(compiler, "triton_key", None)  # 3.2-3.5
    if key is None:
        from triton.runtime.cache import triton_key as key  # 3.6+
    return key


def warm_compiler(target: Any | None = None) -> None:
    """Compute the process-wide values every compile starts with: the hash of Triton's own sources
    and library (0.3-0.7 s) and, given a target, its backend's hash (which runs ``ptxas --version``),
    so that processes forked afterwards inherit them instead of each computing them at its first
    compile. This process computes them anyway at its first compile or cache lookup. Best effort:
    errors are left for the compile itself to report."""
    try:
        triton_key_function()()
        if target is not None:
            from triton.compiler import compiler

            compiler.make_backend(target).hash()
    except Exception as exc:
        log.debug("warming Triton's compiler state failed: %s", exc)


def _shared_memory_error(required: Any, limit: Any) -> Exception | None:
    """The error ``CompiledKernel`` raises when it loads a kernel needing ``required`` bytes of shared
    memory on a device with ``limit`` (either unknown: None)."""
    if isinstance(required, int) and isinstance(limit, int) and required > limit:
        return _runtime_errors.OutOfResources(required, limit, "shared memory")
    return None


def shared_memory_shortfall(kernel: Any, answers: DriverAnswers) -> Exception | None:
    """The error loading ``kernel`` would raise for lack of shared memory (``OutOfResources``), or
    None: the check ``CompiledKernel`` makes when it loads, made without a GPU."""
    required = getattr(getattr(kernel, "metadata", None), "shared", None)
    return _shared_memory_error(required, answers.properties.get("max_shared_mem"))


def stop_compiles_over_shared_memory(answers: DriverAnswers) -> bool:
    """In a compile worker process: a compile whose kernel needs more shared memory than the device
    has stops right after the stage that allocates it, with the error loading it would raise
    (``OutOfResources``), instead of going on to machine code only to be refused at load. On an
    H100, the matmul configs over the limit took 1.2 s each to compile, twice the others, most of it
    in ptxas.

    Every release from 3.2 builds the stages in ``backend.add_stages(stages, options[, language])``
    and records ``metadata["shared"]`` in the ``"llir"`` stage (CUDA and ROCm); this wraps that
    stage for this process only. The cache key is unchanged, and a compile that passes the check is
    untouched. Returns whether the check is in place (False: no limit or no backend known)."""
    limit = answers.properties.get("max_shared_mem")
    if not isinstance(limit, int):
        return False
    try:
        from triton.compiler import compiler

        backend_class = type(compiler.make_backend(answers.target))
    except Exception as exc:
        log.debug("no early shared-memory check: %s", exc)
        return False
    original = backend_class.add_stages
    original = getattr(original, "_unchecked", original)  # installed before: replace, never stack

    @functools.wraps(original)
    def add_stages(self: Any, stages: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        original(self, stages, *args, **kwargs)
        make_llir = stages.get("llir")
        if make_llir is None:
            return

        def checked(src: Any, metadata: dict[str, Any]) -> Any:
            module = make_llir(src, metadata)
            error = _shared_memory_error(metadata.get("shared"), limit)
            if error is not None:
                raise error
            return module

        stages["llir"] = checked  # same key: the stage keeps its place in the order

    add_stages._unchecked = original  # type: ignore[attr-defined]
    backend_class.add_stages = add_stages
    return True


#: ``triton.AsyncCompileMode`` exists and can leave failed compiles to the caller (3.6+; 3.2-3.4 have
#: no such mode, and 3.5's takes no ``ignore_errors``: its exit raises the first failure).
# the compiles handed over are read from the mode's ``raw_futures`` (their failures, Ctrl-C cancelling
# them): a release whose mode does not keep that list, or cannot ignore errors, compiles in the
# calling thread instead
HAS_ASYNC_COMPILE: bool = (
    hasattr(triton, "AsyncCompileMode")
    and "raw_futures" in triton.AsyncCompileMode.__init__.__code__.co_names
    and "ignore_errors" in inspect.signature(triton.AsyncCompileMode.__init__).parameters
)


def async_compile_mode(executor: Any) -> Any:
    """``triton.AsyncCompileMode(executor, ignore_errors=True)`` (only where :data:`HAS_ASYNC_COMPILE`).

    Inside it, ``JITFunction.run(..., warmup=True)`` submits the compilation to ``executor`` and
    returns at once; leaving the context waits for every compilation.
    """
    return triton.AsyncCompileMode(executor, ignore_errors=True)


def async_compile_futures(mode: Any) -> list[Any]:
    """The futures of the compiles ``mode`` (:func:`async_compile_mode`) has handed to its executor so
    far, in order; the list grows as launches hand more over."""
    return mode.raw_futures


def _options_class(namespace: dict[str, Any] | None) -> type | None:
    """The options dataclass in a backend's compiler module (``CUDAOptions``, ``HIPOptions``), or None."""
    for obj in namespace.values() if namespace is not None else ():
        if (
            isinstance(obj, type)
            and dataclasses.is_dataclass(obj)
            and obj.__module__ == namespace.get("__name__")
            and "num_warps" in obj.__dataclass_fields__
        ):
            return obj
    return None


def _compiler_namespace(name: str) -> dict[str, Any] | None:
    """The globals of backend ``name``'s compiler module, read without initialising a driver."""
    from triton.backends import backends

    entry = backends.get(name)
    if entry is None:
        return None
    module = sys.modules.get(entry.compiler.__module__)
    if module is not None:
        return vars(module)
    # 3.2 loads each backend under a bare name ("nvidia") that is not in sys.modules
    for attr in vars(entry.compiler).values():
        if inspect.isfunction(attr):
            return attr.__globals__
    return None


@functools.lru_cache(maxsize=1)
def compile_option_names() -> frozenset[str]:
    """Every compile option a Config's kwargs may carry: the fields of each installed backend's
    options dataclass, plus :data:`KNOWN_COMPILE_OPTIONS`."""
    from triton.backends import backends

    names = set(KNOWN_COMPILE_OPTIONS)
    for name in backends:
        options = _options_class(_compiler_namespace(name))
        if options is not None:
            names.update(options.__dataclass_fields__)
    return frozenset(names)


@functools.lru_cache(maxsize=4)
def launch_option_defaults(backend: str) -> dict[str, Any]:
    """The compile options a launch gets when it does not pass them (``num_warps``, ``num_stages``,
    ``num_ctas``, ...) on ``backend`` ("cuda" or "hip"); empty when they cannot be found.

    They are the field defaults of the backend's options dataclass (``CUDAOptions``, ``HIPOptions``),
    read without initialising the driver. A launch that leaves out an option equal to its default
    compiles to the same kernel, and each keyword ``JITFunction.run`` does not bind saves time.
    """
    options = _options_class(_compiler_namespace({"cuda": "nvidia", "hip": "amd"}.get(backend, "")))
    if options is None:
        return {}
    fields = options.__dataclass_fields__
    return {
        name: fields[name].default
        for name in CONFIG_FIELDS
        if name in fields and fields[name].default is not dataclasses.MISSING
    }


__all__ = [
    "AUTOTUNER_HAS_CACHE_RESULTS",
    "CONFIG_FIELDS",
    "CONFIG_FIELDS_ANY_RELEASE",
    "INTERPRETER_OPTIONS",
    "KNOWN_COMPILE_OPTIONS",
    "TRITON_VERSION_STR",
    "UPSTREAM_SKIPPED_ERRORS",
    "AutotunerErrorBase",
    "Config",
    "UpstreamAutotuner",
]
