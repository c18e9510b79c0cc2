"""``heuristic KERNEL``: a readable ``fallback_heuristic`` learnt from a kernel's stored results.

The output is plain Python: a list of literal ``triton.Config`` objects and a function of the tuning
key that picks one, either by a decision tree over the key's values (scikit-learn's
``DecisionTreeClassifier``, installed with the ``bo`` extra) written out as ``if``/``else``, or by
the nearest stored key (a literal table). Its accuracy is measured on stored keys held out of the
learning (leave-one-out up to 20 keys, 5-fold above). Nothing is pickled; the file can be read,
reviewed and committed.
"""

from __future__ import annotations

import ast
import inspect
import keyword
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .._compat import CONFIG_FIELDS, Config
from ..codec import config_id
from ..store import StoredEntry, inventory, tree_merge

METHODS = ("auto", "tree", "nearest")
Features = tuple[Any, ...]


class HeuristicError(ValueError):
    """No heuristic can be learnt (nothing stored, a config that cannot be written as a literal)."""


@dataclass
class Heuristic:
    source: str  # the Python module
    method: str  # "tree" or "nearest"
    keys: int
    configs: int
    correct: int  # held-out keys whose stored config the heuristic picked
    tested: int
    validation: str  # "leave-one-out", "5-fold" (", N of M keys tested" past MAX_TESTED) or "none"


def stored_entries(files: Sequence[inventory.StoredFile]) -> list[StoredEntry]:
    """One entry per key over ``files`` (the newest wins, as ``merge`` decides)."""
    if not files:
        return []
    merged = tree_merge.MergeResult({}, {})
    for f in files:
        tree_merge.merge_entries(merged, f.entries, f.source, "newest", about=files[0])
    return sorted(merged.entries.values(), key=lambda e: e.key_id)


# --- features: what the generated code computes from a key --------------------------------------------


#: The largest float: an int beyond it has no float, an infinity or NaN is no size.
FLOAT_MAX = sys.float_info.max


def _numeric(value: Any) -> bool:
    """A number that is a finite float (an int too large for a float is not: ``float()`` fails); a
    bool is a flag, a category, as the tuner's nearest key compares it."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) <= FLOAT_MAX


#: How a generated heuristic reads a key (as :func:`_key_features`): a value that is not a number
#: where the stored keys had numbers (None for an optional argument, a flag, an int too large for a
#: float) reads as NaN, which every threshold sends one way and the nearest-key table leaves out,
#: instead of failing in ``float()``.
_FEATURES = (
    "tuple(str(v) if cat else float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) "
    f'and abs(v) <= {FLOAT_MAX!r} else float("nan") for v, cat in zip(key, CATEGORICAL))'
)


def _key_features(key: Sequence[Any], categorical: Sequence[bool]) -> Features:
    return tuple(str(v) if cat else float(v) if _numeric(v) else math.nan for v, cat in zip(key, categorical))


def _nearest(features, table):  # type: ignore[no-untyped-def]
    """The config index of the stored key nearest to ``features``: summed distances on a log scale
    for numbers (as the tuner's nearest key), a number the key lacks (NaN) left out, another category
    costing more than any difference of numbers; the first of equals (the table is in key id order,
    so a tie goes to the smaller key id, as the tuner's)."""
    best, best_distance = table[0][1], None
    for stored, index in table:
        distance = 0.0
        for x, y in zip(features, stored):
            if isinstance(x, str) or isinstance(y, str):
                distance += 0.0 if x == y else 1e6
            elif x == x:  # not NaN
                distance += abs(
                    math.copysign(math.log2(1 + abs(x)), x) - math.copysign(math.log2(1 + abs(y)), y)
                )
        if best_distance is None or distance < best_distance:
            best, best_distance = index, distance
    return best


#: What the generated module defines besides the function: a function so named would replace it.
_MODULE_NAMES = frozenset({"math", "Config", "CONFIGS", "CATEGORICAL", "TABLE", "CODES", _nearest.__name__})


# --- learning -----------------------------------------------------------------------------------------


def _tree_available() -> bool:
    try:
        import sklearn.tree  # noqa: F401
    except ImportError:
        return False
    return True


class _Codes:
    """Categorical key values (dtypes, strings) as numbers for the tree, in a literal dict."""

    def __init__(self, rows: Sequence[Features], categorical: Sequence[bool]) -> None:
        self.maps = [
            {v: i for i, v in enumerate(sorted({row[p] for row in rows}))} if cat else None
            for p, cat in enumerate(categorical)
        ]

    def encode(self, row: Features) -> list[float]:
        return [float(v) if m is None else float(m.get(v, -1)) for v, m in zip(row, self.maps)]


def _fit_tree(
    rows: Sequence[Features], labels: Sequence[int], categorical: Sequence[bool]
) -> tuple[Any, _Codes]:
    from sklearn.tree import DecisionTreeClassifier

    codes = _Codes(rows, categorical)
    model = DecisionTreeClassifier(random_state=0, max_depth=MAX_TREE_DEPTH)
    model.fit([codes.encode(r) for r in rows], list(labels))
    return model, codes


def _predictor(
    method: str, rows: Sequence[Features], labels: Sequence[int], categorical: Sequence[bool]
) -> Callable[[Features], int]:
    if method == "nearest":
        table = list(zip(rows, labels))
        return lambda row: _nearest(row, table)
    model, codes = _fit_tree(rows, labels, categorical)
    return lambda row: int(model.predict([codes.encode(row)])[0])


#: At most this many held-out keys are tested in all: a nearest-key prediction scans the whole
#: table, so testing every key of a file of thousands took minutes.
MAX_TESTED = 1000
#: The tree's depth limit: each level is an indented ``if`` in the generated module, and Python
#: refuses to compile more than 100 levels of indentation.
MAX_TREE_DEPTH = 32


def _folds(n: int) -> tuple[str, list[tuple[set[int], list[int]]]]:
    """The validation's name and its folds, each (the keys held out, those of them tested)."""
    if n < 2:
        return "none", []
    if n <= 20:
        return "leave-one-out", [({i}, [i]) for i in range(n)]
    folds = [list(range(k, n, 5)) for k in range(5)]
    step = math.ceil(n / MAX_TESTED)
    tested = [held[::step] for held in folds]
    name = "5-fold" if step == 1 else f"5-fold, {sum(map(len, tested))} of {n} keys tested"
    return name, [(set(held), test) for held, test in zip(folds, tested)]


def _validate(
    method: str, rows: list[Features], labels: list[int], categorical: Sequence[bool]
) -> tuple[str, int, int]:
    name, folds = _folds(len(rows))
    correct = 0
    for held, tested in folds:
        keep = [i for i in range(len(rows)) if i not in held]
        predict = _predictor(method, [rows[i] for i in keep], [labels[i] for i in keep], categorical)
        correct += sum(predict(rows[i]) == labels[i] for i in tested)
    return name, correct, sum(len(tested) for _, tested in folds)


# --- writing the module --------------------------------------------------------------------------------


def _literal(value: Any) -> str:
    text = repr(value)
    try:
        same = ast.literal_eval(text) == value
    except (ValueError, SyntaxError):
        same = False
    if not same:
        raise HeuristicError(f"a config value {value!r:.80} cannot be written as a Python literal")
    return text


def config_literal(config: Config) -> str:
    kwargs = ", ".join(f"{_literal(k)}: {_literal(v)}" for k, v in config.kwargs.items())
    options = [
        f"{name}={_literal(getattr(config, name, default))}"
        for name, default in CONFIG_FIELDS.items()
        if name in ("num_warps", "num_stages") or getattr(config, name, default) != default
    ]
    return f"Config({{{kwargs}}}, {', '.join(options)})"


def _tree_lines(model: Any, node: int, depth: int) -> list[str]:
    tree, pad = model.tree_, "    " * depth
    left, right = tree.children_left[node], tree.children_right[node]
    if left == right:  # a leaf
        return [f"{pad}return CONFIGS[{int(model.classes_[tree.value[node][0].argmax()])}]"]
    test = f"{pad}if x[{int(tree.feature[node])}] <= {float(tree.threshold[node])!r}:"
    return [test, *_tree_lines(model, left, depth + 1), f"{pad}else:", *_tree_lines(model, right, depth + 1)]


def _module(
    kernel: str,
    name: str,
    heuristic: Heuristic,
    configs: list[Config],
    counts: list[int],
    categorical: list[bool],
    body: list[str],
    extra: list[str],
) -> str:
    accuracy = (
        f"{heuristic.correct}/{heuristic.tested} held-out keys ({heuristic.validation}) "
        "got their stored config"
        if heuristic.tested
        else "not measured (one stored key)"
    )
    kinds = ", ".join(f"key[{i}]: {'category' if c else 'number'}" for i, c in enumerate(categorical))
    # the name comes from a stored file: written escaped, so that no text in it can end a docstring
    kernel = repr(kernel).replace("\\", "\\\\").replace('"', '\\"')
    lines = [
        f'"""fallback_heuristic for {kernel}, generated by `python -m triton_dejavu_like heuristic` from',
        f"{heuristic.keys} stored keys ({heuristic.method}). Accuracy: {accuracy}.",
        "",
        f"Use: @triton_dejavu_like.autotune(..., fallback_heuristic={name})",
        "with TRITON_DEJAVU_FORCE_FALLBACK=1, or with tuning off for a key no stored key is comparable to.",
        '"""',
        "",
        *(["import math", ""] if heuristic.method == "nearest" else []),
        "from triton import Config",
        "",
        "CONFIGS = [",
        *[
            f"    {config_literal(c)},  # {i}: stored for {n} key(s)"
            for i, (c, n) in enumerate(zip(configs, counts))
        ],
        "]",
        f"CATEGORICAL = {categorical!r}  # {kinds}",
        *extra,
        "",
        "",
        f"def {name}(key):",
        f'    """The config for a tuning key of {kernel} (its values in the autotuner\'s key order)."""',
        f"    x = {_FEATURES}",
        *body,
        "",
    ]
    return "\n".join(lines)


def learn(
    entries: Sequence[StoredEntry], kernel: str, *, method: str = "auto", name: str = "heuristic"
) -> Heuristic:
    """The heuristic module for ``entries`` (one kernel's stored results)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}")
    if not entries:
        raise HeuristicError(f"nothing stored for {kernel}")
    if not name.isidentifier() or keyword.iskeyword(name):
        raise HeuristicError(f"{name!r} is not a Python function name")
    if name in _MODULE_NAMES:
        raise HeuristicError(f"{name!r} is a name the generated module uses itself; choose another")
    if len({len(e.key) for e in entries}) != 1:
        raise HeuristicError(f"{kernel}'s stored keys differ in length: tuned with different keys")
    if method == "auto":
        method = "tree" if _tree_available() else "nearest"
    entries = sorted(entries, key=lambda e: e.key_id)  # the nearest table's order: its tie rule
    ids: dict[str, int] = {}
    configs: list[Config] = []
    labels: list[int] = []
    for e in entries:
        cid = config_id(e.config)
        if cid not in ids:
            ids[cid] = len(configs)
            configs.append(e.config)
        labels.append(ids[cid])
    categorical = [not all(_numeric(e.key[p]) for e in entries) for p in range(len(entries[0].key))]
    rows = [_key_features(e.key, categorical) for e in entries]
    validation, correct, tested = _validate(method, rows, labels, categorical)
    result = Heuristic("", method, len(entries), len(configs), correct, tested, validation)
    counts = [labels.count(i) for i in range(len(configs))]
    if method == "nearest":
        table = ",\n".join(f"    ({row!r}, {label})" for row, label in zip(rows, labels))
        extra = ["TABLE = [", table + ",", "]", "", "", inspect.getsource(_nearest).rstrip()]
        body = ["    return CONFIGS[_nearest(x, TABLE)]"]
    else:
        model, codes = _fit_tree(rows, labels, categorical)
        extra = [f"CODES = {codes.maps!r}  # categorical values as the tree's numbers (-1: unseen)"]
        body = [
            "    x = [v if m is None else float(m.get(v, -1)) for v, m in zip(x, CODES)]",
            *_tree_lines(model, 0, 1),
        ]
    result.source = _module(kernel, name, result, configs, counts, categorical, body, extra)
    try:  # compiled, never run: a module that cannot be imported is an error here, not at serving time
        compile(result.source, f"<heuristic for {kernel}>", "exec")
    except (SyntaxError, RecursionError, MemoryError) as exc:
        raise HeuristicError(f"the generated module does not compile ({type(exc).__name__}: {exc})") from exc
    return result
