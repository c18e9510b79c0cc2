"""Whether re-importing the program's main script is harmless: a fork-server worker imports it again,
as multiprocessing does in each worker it starts."""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def _is_main_guard(test: ast.expr) -> bool:
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and len(test.comparators) == 1
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value == "__main__"
    )


def main_reimport_is_harmless() -> bool:
    """Whether a worker may import the program's main script (multiprocessing re-imports it in each
    worker it starts): true for ``python -m`` and interactive sessions, and for a script whose top
    level only imports, defines and assigns, with its work under ``if __name__ == "__main__":``."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if getattr(main, "__spec__", None) is not None or not path:
        return True
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return False
    return _harmless(tree.body)


_DEFINITIONS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _harmless(statements: list[ast.stmt]) -> bool:
    """Imports, definitions, assignments, docstrings, the main guard, and ``if``/``try`` blocks made
    of those: what can run at import without doing the program's work."""
    for node in statements:
        if isinstance(node, (*_DEFINITIONS, ast.Assign, ast.AnnAssign, ast.Pass)):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # a docstring
        if isinstance(node, ast.If) and (_is_main_guard(node.test) or _harmless(node.body + node.orelse)):
            continue
        if isinstance(node, ast.Try) and _harmless(
            [*node.body, *node.orelse, *node.finalbody, *(s for h in node.handlers for s in h.body)]
        ):
            continue
        return False
    return True
