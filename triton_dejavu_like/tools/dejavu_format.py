"""The text of a triton-dejavu ``cache.json``: keys, configs and timings, read with a strict parser.

Keys are ``str()`` of a tuple and configs ``str()`` of a ``triton.Config``: Python's own tokenizer/AST
(``ast.parse``) and a whitelist of literal nodes (numbers, strings, ``True``/``False``/``None``,
tuples) read them; nothing is evaluated (:mod:`.dejavu_import` says what is assumed of them).
"""

from __future__ import annotations

import ast
import math
import re
from typing import Any

from .._compat import CONFIG_FIELDS, CONFIG_FIELDS_ANY_RELEASE, Config
from ..measure.bench import QUANTILES, normalise

MAX_TEXT = 10_000
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_PAIR = re.compile(rf"^({_NAME}): (.*)$", re.DOTALL)
_PAIR_SPLIT = re.compile(rf", (?={_NAME}: )")
_BARE_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")


class FormatError(ValueError):
    """Text that is not what triton-dejavu writes."""


# --- the strict literal parser ---------------------------------------------------------------------


def _literal(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant) and (
        node.value is None or isinstance(node.value, (bool, int, float, str))
    ):
        return node.value
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, (ast.USub, ast.UAdd))
        and isinstance(node.operand, ast.Constant)
        and isinstance(node.operand.value, (int, float))
        and not isinstance(node.operand.value, bool)
    ):
        return -node.operand.value if isinstance(node.op, ast.USub) else node.operand.value
    if isinstance(node, ast.Tuple):
        return tuple(_literal(e) for e in node.elts)
    raise FormatError(f"not a plain literal: {ast.dump(node)[:80]}")


def parse_literal(text: str) -> Any:
    """A number, string, bool, None, or a tuple of them, from its Python spelling; never evaluated."""
    if len(text) > MAX_TEXT:
        raise FormatError(f"text of {len(text)} characters is too long")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise FormatError(f"cannot parse {text[:80]!r}") from exc
    return _literal(tree.body)


def _typed(text: str) -> Any:
    """A key element triton-dejavu stored as a string, back to the type it had."""
    try:
        value = parse_literal(text)
    except FormatError:
        return text
    return value if isinstance(value, (bool, int, float)) or value is None else text


def parse_key(text: str) -> tuple[Any, ...]:
    """``"('1024', '512', 'torch.float16')"`` -> ``(1024, 512, 'torch.float16')``."""
    value = parse_literal(text)
    if not isinstance(value, tuple):
        raise FormatError(f"a key is a tuple, not {text[:80]!r}")
    return tuple(_typed(v) if isinstance(v, str) else v for v in value)


def _config_value(raw: str) -> Any:
    if raw in ("inf", "-inf", "nan"):
        return float(raw)
    if _BARE_WORD.match(raw) and raw not in ("None", "True", "False"):
        return raw  # str(Config) prints a string parameter without quotes
    return parse_literal(raw)


def parse_config(text: str) -> tuple[Config, list[str]]:
    """``"BLOCK_M: 64, num_warps: 4, maxnreg: None"`` -> a Config, and the fields dropped.

    Fields this Triton lacks (``maxnreg`` on 3.2, ``enable_warp_specialization``, ...) are dropped
    and named; ``pre_hook`` is ignored; any text that is not ``name: literal`` pairs is refused.
    """
    if len(text) > MAX_TEXT:
        raise FormatError(f"config text of {len(text)} characters is too long")
    kwargs: dict[str, Any] = {}
    options: dict[str, Any] = {}
    dropped: list[str] = []
    for piece in _PAIR_SPLIT.split(text.strip()):
        match = _PAIR.match(piece)
        if match is None:
            raise FormatError(f"not a 'name: value' pair: {piece[:80]!r}")
        name, raw = match.groups()
        if name == "pre_hook":
            continue
        value = _config_value(raw)
        if name in CONFIG_FIELDS:
            if value is not None and not isinstance(value, (bool, int)):
                raise FormatError(f"config field {name} holds {raw[:40]!r}")
            options[name] = value
        elif name in CONFIG_FIELDS_ANY_RELEASE:
            dropped.append(name)
        elif name in kwargs:
            raise FormatError(f"parameter {name} appears twice")
        else:
            kwargs[name] = value
    if not kwargs and not options:
        raise FormatError("an empty config")
    return Config(kwargs, **options), dropped


def parse_timings(raw: Any) -> list[float]:
    if isinstance(raw, dict):
        raw = raw.get("values")
    numbers = [raw] if not isinstance(raw, list) else raw
    if not numbers or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in numbers):
        raise FormatError(f"timings are not a time or a list of times: {str(raw)[:80]!r}")
    values = normalise(raw, len(QUANTILES))
    if not all(math.isfinite(v) and v >= 0 for v in values):
        raise FormatError(f"timings are not finite, non-negative times: {values}")
    return values
