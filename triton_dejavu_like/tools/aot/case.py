"""What ``tune`` runs: :class:`TuneCase` and loading them from a SPEC.

A SPEC names Python code that yields the cases: ``path/to/spec.py`` or ``package.module`` (its
``cases()`` function, else its ``CASES`` list), or ``path/to/spec.py:function`` /
``package.module:function`` (that function's return value). Worker processes load the same SPEC and
pick cases by name, so a case's ``fn`` may be any callable, lambdas and closures included.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any


class SpecError(ValueError):
    """A SPEC that cannot be loaded, or whose cases are not valid."""


class SpecNotFound(SpecError):
    """A SPEC that names nothing there: no such file, module, or function in it (a typo)."""


@dataclass(frozen=True)
class TuneCase:
    """One unit of ahead-of-time tuning: ``fn(*args, **kwargs)`` builds its inputs on the current
    device and launches one or more autotuned kernels (each miss tunes or restores).

    ``name`` identifies the case in reports and between processes: unique within a SPEC.
    """

    name: str
    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise SpecError(f"a TuneCase needs a non-empty name, not {self.name!r}")
        if not callable(self.fn):
            raise SpecError(f"case {self.name!r}: fn is not callable ({type(self.fn).__name__})")
        if isinstance(self.args, (str, bytes)):  # ("x") for ("x",): split into characters otherwise
            raise SpecError(
                f"case {self.name!r}: args must be a tuple of arguments, not the string {self.args!r:.40}"
            )
        try:
            object.__setattr__(self, "args", tuple(self.args))
            object.__setattr__(self, "kwargs", dict(self.kwargs))
        except (TypeError, ValueError) as exc:
            why = f"{type(exc).__name__}: {exc}"
            raise SpecError(f"case {self.name!r}: args must be a sequence, kwargs a mapping ({why})") from exc

    def run(self) -> Any:
        return self.fn(*self.args, **self.kwargs)


def _import_file(path: Path) -> ModuleType:
    """Import a spec file under a name of its own; its folder goes on ``sys.path`` (for its imports)."""
    path = path.resolve()
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    name = "_tdl_spec_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SpecError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _import(target: str) -> ModuleType:
    if target.endswith(".py") or Path(target).is_file():
        path = Path(target).expanduser()
        if not path.is_file():
            raise SpecNotFound(f"no such spec file: {target}")
        return _import_file(path)
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as exc:  # the module named, not one it imports
        if exc.name and (target == exc.name or target.startswith(f"{exc.name}.")):
            raise SpecNotFound(f"no such spec file or module: {target}") from exc
        raise


def _source(spec: str) -> tuple[str, str | None]:
    """(module or file, function name or None); a Windows drive letter is not a separator."""
    target, sep, attr = spec.rpartition(":")
    if sep and attr.isidentifier() and target and not (len(target) == 1 and target.isalpha()):
        return target, attr
    return spec, None


def absolute_spec(spec: str) -> str:
    """``spec`` for a process whose working directory differs (a Ray actor): a file's path made
    absolute, its ``:function`` kept; a module's name unchanged."""
    target, attr = _source(spec)
    if not (target.endswith(".py") or Path(target).is_file()):
        return spec
    path = str(Path(target).expanduser().absolute())
    return path if attr is None else f"{path}:{attr}"


def load_cases(spec: str) -> list[TuneCase]:
    """The cases of ``spec`` (see the module's doc), checked: TuneCase objects with unique names.

    Raises :class:`SpecError` (:class:`SpecNotFound` for a file, module or function that is not
    there); an exception raised by the user's code is wrapped in one.
    """
    if not spec.strip():  # tune "$SPEC" with SPEC unset: a mistake in the command line
        raise SpecNotFound(f"the SPEC named is empty ({spec!r})")
    target, attr = _source(spec)
    try:
        module = _import(target)
        if attr is not None:
            if not hasattr(module, attr):
                raise SpecNotFound(f"{target} has no attribute {attr!r}")
            produced: Any = getattr(module, attr)
        elif hasattr(module, "cases"):
            produced = module.cases
        elif hasattr(module, "CASES"):
            produced = module.CASES
        else:
            raise SpecError(f"{target} defines neither cases() nor CASES (or name one: {target}:function)")
        cases = list(produced() if callable(produced) else produced)
    except SpecError:
        raise
    # the user's code may raise anything; sys.exit() (an argparse call at import) ended tune with its
    # status, 0 included, having tuned nothing
    except (Exception, SystemExit) as exc:
        raise SpecError(f"cannot load {spec}: {type(exc).__name__}: {exc}") from exc
    return _checked(cases, spec)


def _checked(cases: Iterable[Any], spec: str) -> list[TuneCase]:
    out: list[TuneCase] = []
    seen: set[str] = set()
    for case in cases:
        if not isinstance(case, TuneCase):
            raise SpecError(f"{spec} yielded {type(case).__name__}, not a TuneCase")
        if case.name in seen:
            raise SpecError(f"{spec} has two cases named {case.name!r}")
        seen.add(case.name)
        out.append(case)
    if not out:
        raise SpecError(f"{spec} yields no cases")
    return out
