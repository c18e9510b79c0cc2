"""The README's reference tables name what the code has: every environment variable, decorator
argument, command, option and public name, and nothing that is not there; the tests the docs name
exist; the module map and the cross-references in docstrings name modules and objects that exist."""

from __future__ import annotations

import argparse
import importlib
import inspect
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import triton_dejavu_like as tdl
from triton_dejavu_like import _env
from triton_dejavu_like.tools.cli import build_parser
from triton_dejavu_like.tuner.decorator import DEJAVU_ORDER, UPSTREAM_ORDER

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
DOCS = {path.name: path.read_text() for path in sorted((ROOT / "docs").glob("*.md"))}
#: Variables the docs name that the package does not read, on purpose (docs/compat.md says so).
NAMED_NOT_READ = {"_TRITON_DEJAVU_MIN_SEARCH_SAMPLES"}


def section(title: str) -> str:
    """The README's text under a heading, up to the next heading."""
    match = re.search(rf"^#+ {re.escape(title)}\n(.*?)(?=^#+ |\Z)", README, re.S | re.M)
    assert match, f"README has no section {title!r}"
    return match.group(1)


def first_cells(text: str) -> list[str]:
    """The first cell of every row of the tables in ``text`` (a ``\\|`` in a cell is no separator)."""
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| ---")]
    return [re.split(r"(?<!\\)\|", row)[1].replace("\\|", "|") for row in rows[1:] if row]


def test_every_variable_read_is_in_the_readme_table_and_every_one_named_is_read() -> None:
    table = section("Environment variables")
    named = set(re.findall(r"`(_?TRITON_[A-Z_]+)", "".join(first_cells(table))))
    assert set(_env.ALL) - named == {_env.ISOLATION_TIMEOUT}  # in USE_ISOLATED_PROCESS's row
    assert f"`{_env.ISOLATION_TIMEOUT}`" in table
    assert named - set(_env.ALL) == {"TRITON_PRINT_AUTOTUNING"}  # Triton's own, read as upstream does
    everywhere = set(re.findall(r"_?TRITON_DEJAVU_[A-Z_]*[A-Z]", README + "".join(DOCS.values())))
    assert everywhere - set(_env.ALL) == NAMED_NOT_READ


def test_the_decorator_table_lists_every_argument_of_autotune() -> None:
    listed = set(re.findall(r"`([a-z_]+)`", "".join(first_cells(section("Decorator arguments")))))
    parameters = inspect.signature(tdl.autotune).parameters.values()
    keywords = {p.name for p in parameters if p.kind is p.KEYWORD_ONLY}
    assert listed == keywords


def flat(text: str) -> str:
    return " ".join(text.split())


def test_the_positional_orders_written_are_the_decorators() -> None:
    assert f"`{', '.join(UPSTREAM_ORDER)}`" in flat(README)
    assert f"`autotune({', '.join(UPSTREAM_ORDER)})`" in flat(DOCS["compat.md"])
    assert f"`autotune({', '.join(DEJAVU_ORDER)})`" in flat(DOCS["compat.md"])
    # the README's, shortened: key, configs, prune_configs_by, ..., then from use_cuda_graph on
    shortened = [*DEJAVU_ORDER[:3], "...", *DEJAVU_ORDER[DEJAVU_ORDER.index("use_cuda_graph") :]]
    assert f"`{', '.join(shortened)}`" in flat(README)


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _cli_rows() -> dict[str, str]:
    rows = {}
    for cell in first_cells(section("Command line")):
        match = re.fullmatch(r"\s*`([a-z-]+)(.*)`\s*", cell)
        assert match, cell
        rows[match.group(1)] = match.group(2)
    return rows


def test_the_command_table_lists_every_command() -> None:
    assert set(_cli_rows()) == set(_commands())


@pytest.mark.parametrize("command", sorted(_commands()))
def test_the_options_the_command_table_shows_exist(command: str) -> None:
    options = {option for action in _commands()[command]._actions for option in action.option_strings}
    shown = set(re.findall(r"--[a-z][a-z-]*", _cli_rows()[command]))
    assert shown <= options


def test_every_public_name_is_documented_and_every_documented_one_is_public() -> None:
    text = README + "".join(DOCS.values())
    assert [name for name in tdl.__all__ if not re.search(rf"\b{re.escape(name)}\b", text)] == []
    used = set(re.findall(r"\b(?:tdl|triton_dejavu_like)\.([A-Za-z_]\w*)", text))
    modules = {path.stem for path in (ROOT / "triton_dejavu_like").iterdir()}
    assert used - set(tdl.__all__) - modules == set()


def test_every_test_the_docs_name_exists() -> None:
    """The docs name the tests that show a guarantee: a renamed or removed test leaves no such name."""
    sources = [*(ROOT / "tests").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")]
    defined = {name for path in sources for name in re.findall(r"def (test_\w+)", path.read_text())}
    defined |= {path.stem for path in sources}  # a test file named by its module
    named = set(re.findall(r"\b(test_\w+)", README + "".join(DOCS.values())))
    assert named - defined == set()


#: A Sphinx cross-reference in a docstring or comment: ``:func:`~.inventory.read_sources```.
ROLE = re.compile(r":(?:func|class|meth|mod|attr|data|exc|obj):`~?([^`<]+?)`")


def _module_names() -> list[str]:
    """Every module of the package by its dotted name (``__main__`` left out: importing it runs the CLI)."""
    paths = sorted((ROOT / "triton_dejavu_like").rglob("*.py"))
    names = [".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__") for p in paths]
    return [name for name in names if not name.endswith("__main__")]


def _has(obj: Any, parts: list[str]) -> bool:
    for part in parts:
        if part in getattr(obj, "__annotations__", {}) and not hasattr(obj, part):
            return True  # a field a class declares, which its instances have
        if not hasattr(obj, part):
            return False
        obj = getattr(obj, part)
    return True


def _has_absolute(dotted: str) -> bool:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        return _has(module, parts[i:])
    return False


def _set_in_init(source: str, name: str) -> bool:
    """Whether the module's code sets ``self.<name>`` (an instance attribute no class attribute shows)."""
    return re.search(rf"\bself\.{re.escape(name)}\s*(:[^=\n]+)?=", source) is not None


def _resolves(module: ModuleType, source: str, target: str) -> bool:
    """Whether ``target`` names something: relative to the module's package as an import would
    (``.x``, ``..x``), in the module, in one of its classes (a method, a field, an attribute set in
    ``__init__``), or from the package or the top level."""
    target = "".join(target.split())
    dots = len(target) - len(target.lstrip("."))
    rest, parts = target[dots:], target[dots:].split(".")
    base = module.__name__ if hasattr(module, "__path__") else module.__name__.rpartition(".")[0]
    for _ in range(dots - 1):
        base = base.rpartition(".")[0]
    if dots and _has_absolute(f"{base}.{rest}"):
        return True
    classes = [c for _, c in inspect.getmembers(module, inspect.isclass) if c.__module__ == module.__name__]
    return (
        _has(module, parts)
        or any(_has(c, parts) for c in classes)
        or (len(parts) <= 2 and _set_in_init(source, parts[-1]))
        or _has_absolute(rest)
        or _has_absolute(f"triton_dejavu_like.{rest}")
    )


@pytest.mark.parametrize("name", _module_names())
def test_every_cross_reference_in_a_docstring_names_what_exists(name: str) -> None:
    """A split or renamed module leaves no ``:func:`` or ``:data:`` pointing where nothing is."""
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:  # an optional extra's module (SMAC's models) without it
        pytest.skip(f"{name} needs {exc.name}")
    source = Path(module.__file__ or "").read_text()
    unresolved = [m.group(0) for m in ROLE.finditer(source) if not _resolves(module, source, m.group(1))]
    assert unresolved == []


def _map_entries() -> set[str]:
    """The files docs/architecture.md's map names, each under the folder it is listed in: the first
    word of a line that ends in ``/`` opens a folder (closed by a line indented as far or less), and
    every ``name.py`` on a line belongs to the folder open there."""
    block = DOCS["architecture.md"].split("```")[1]
    named: set[str] = set()
    folders: list[tuple[int, str]] = []
    for line in block.splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        while folders and folders[-1][0] >= indent:
            folders.pop()
        if line.split()[0].endswith("/"):
            folders.append((indent, line.split()[0]))
        where = "".join(folder for _, folder in folders)
        named |= {where + name for name in re.findall(r"(?<![\w/.])(\w+\.py)\b", line)}
    return named


def test_the_module_map_names_every_module_where_it_is_and_nothing_else() -> None:
    modules = {str(p.relative_to(ROOT)) for p in (ROOT / "triton_dejavu_like").rglob("*.py")}
    named = _map_entries()
    assert named - modules == set()
    # a part's __init__.py is described below the map (what it re-exports)
    assert {m for m in modules - named if not m.endswith("/__init__.py")} == set()


def _modules_by_name() -> dict[str, str]:
    """The names a doc gives a module by: its path in the package (``tuner.tuning``,
    ``store.inventory``, ``_compat``) and, for the storage and measuring modules, its file name alone
    (``inventory``, ``compile_pool``) where no other module has it. A part's package is left out:
    the docs also write ``tuner`` for an Autotuner (``tuner.cache_path()``)."""
    by_name: dict[str, list[str]] = {}
    for module in _module_names():
        if hasattr(importlib.import_module(module), "__path__"):
            continue
        parts = module.split(".")[1:]
        by_name.setdefault(".".join(parts), []).append(module)
        if len(parts) > 1 and parts[0] in ("store", "measure"):
            by_name.setdefault(parts[-1], []).append(module)
    return {name: modules[0] for name, modules in by_name.items() if len(modules) == 1}


def test_every_module_name_the_docs_write_names_what_that_module_has() -> None:
    """`inventory.as_served`, `store.tree_merge.merge_into`, `compile_pool.IDLE_RELEASE_S`: a name
    moved to another module leaves no such reference behind."""
    modules = _modules_by_name()
    wrong = []
    for doc, text in {"README.md": README, **DOCS}.items():
        for dotted in set(re.findall(r"`(?:triton_dejavu_like\.)?([A-Za-z_][\w.]*\.\w+)(?:\(\))?`", text)):
            parts = dotted.split(".")
            if parts[-1] in ("py", "md", "json"):
                continue  # a file's name, not a module's member
            known = [i for i in range(len(parts), 0, -1) if ".".join(parts[:i]) in modules]
            if known and not _has(
                importlib.import_module(modules[".".join(parts[: known[0]])]), parts[known[0] :]
            ):
                wrong.append(f"{doc}: {dotted}")
    assert wrong == []


def test_every_file_the_docs_name_exists() -> None:
    """`measure/compile_worker.py`, `tuner/deciding.py:KeyDecision`, `benchmarks/storage_io.py`: the
    file is there, and the name after a colon is defined in it."""
    folders = "|".join(
        ("triton_dejavu_like", "tuner", "measure", "store", "search", "tools", "benchmarks", "tests")
    )
    wrong = []
    for doc, text in {"README.md": README, **DOCS}.items():
        for path, name in re.findall(rf"`((?:{folders}|examples)/[\w/.]*\.py)(?::([\w.]+))?`", text):
            file = ROOT / path if (ROOT / path).exists() else ROOT / "triton_dejavu_like" / path
            if not file.exists():
                wrong.append(f"{doc}: {path} (no such file)")
            elif name and not re.search(rf"^\s*(def|class) {name.split('.')[-1]}\b", file.read_text(), re.M):
                wrong.append(f"{doc}: {path}:{name} (not defined there)")
    assert wrong == []
