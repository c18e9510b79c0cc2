"""The README's reference tables name what the code has: every environment variable, decorator
argument, command, option and public name, and nothing that is not there; the tests the docs name
exist."""

from __future__ import annotations

import argparse
import inspect
import re
from pathlib import Path

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
