"""Arbitrary JSON in any field of a stored entry or of a triton-dejavu file never escapes as an
exception, and the valid entries of the same file still restore."""

from __future__ import annotations

import contextlib
import json
import tempfile
import textwrap
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from storage_helpers import IDENTITY, PARAMETERS, cache_file, make_entry, write_document
from test_dejavu_import import MODULE, config_text, dejavu_doc, key_text

from triton_dejavu_like import store as storage
from triton_dejavu_like.codec import key_id
from triton_dejavu_like.store.entry import StoredEntry
from triton_dejavu_like.tools import dejavu_import

SETTINGS = settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)

#: Any JSON value: null, booleans, integers up to 400 digits, floats with NaN and infinities, text,
#: and lists and objects of those.
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**400), max_value=10**400)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)

Path_ = tuple[Any, ...]


def paths(value: Any, prefix: Path_ = ()) -> Iterator[Path_]:
    """Every place in a JSON value: the value itself, each object field and each list item, below."""
    yield prefix
    if isinstance(value, dict):
        for name, item in value.items():
            yield from paths(item, (*prefix, name))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from paths(item, (*prefix, index))


def replaced(value: Any, where: Path_, new: Any) -> Any:
    """A deep copy of ``value`` with ``new`` at ``where`` (a missing object field is added)."""
    if not where:
        return new
    copy = json.loads(json.dumps(value))
    holder = copy
    for step in where[:-1]:
        holder = holder[step]
    holder[where[-1]] = new
    return copy


def _dump(doc: Any) -> bytes:
    return json.dumps(doc).encode()  # allow_nan: NaN and Infinity literals, as a careless writer makes


# --- stored entries -------------------------------------------------------------------------------------

GOOD, FUZZED = key_id((1,)), key_id((2,))
ENTRY = make_entry((2,))
ENTRY_PLACES = sorted(set(paths(ENTRY)) | {("extra",), ("config", "kwargs", "UNKNOWN")}, key=repr)


@SETTINGS
@given(where=st.sampled_from(ENTRY_PLACES), value=JSON)
@example(where=("budget",), value=float("inf"))  # a field kept as read: writing it back failed
@example(where=("extra",), value={"a": [1.0, float("nan")]})
def test_any_value_in_any_field_of_an_entry_never_escapes(where, value):
    good = make_entry((1,))
    doc = storage.new_document(IDENTITY, {GOOD: good, FUZZED: replaced(ENTRY, where, value)})
    data = _dump(doc)
    parsed = storage.parse_document(data, parameters=PARAMETERS)  # raises nothing: one entry is valid
    assert GOOD in parsed.entries and set(parsed.entries) | set(parsed.rejected) == {GOOD, FUZZED}
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cf = cache_file(Path(tmp))
        cf.path.parent.mkdir(parents=True)
        cf.path.write_bytes(data)
        loaded = cf.load()
        assert loaded[GOOD] == StoredEntry.from_json(GOOD, good, parameters=PARAMETERS)
        assert cache_file(Path(tmp)).load() == loaded  # what was set aside stays aside
        assert cf.record({key_id((3,)): make_entry((3,))})


DOC_PLACES = [("schema",), ("identity",), ("entries",), ("identity", "gpu"), ("identity", "extra"), ()]


@SETTINGS
@given(where=st.sampled_from(DOC_PLACES), value=JSON)
def test_any_value_in_the_document_is_rejected_or_used_never_raised(where, value):
    doc = replaced(storage.new_document(IDENTITY, {GOOD: make_entry((1,))}), where, value)
    with contextlib.suppress(storage.InvalidCacheFile):  # the only exception it may raise
        storage.parse_document(_dump(doc), parameters=PARAMETERS)
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cf = cache_file(Path(tmp))
        write_document(cf.path, IDENTITY, {})
        cf.path.write_bytes(_dump(doc))
        cf.load()
        assert cf.record({GOOD: make_entry((1,))}) == cf.writable


# --- triton-dejavu files --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tuner(tmp_path_factory):
    module = tmp_path_factory.mktemp("kernels") / "mykernels.py"
    module.write_text(textwrap.dedent(MODULE))
    return dejavu_import.load_tuner(f"{module}:scale")


DEJAVU = dejavu_doc(
    {key_text(100): config_text(32, 4), key_text(200): config_text(16, 2)},
    {key_text(100): [0.5, 0.45, 0.55], key_text(200): [0.7, 0.6, 0.8]},
)
#: Places whose change leaves key 100 importable (the others may make the whole file unusable).
SPARE = [p for p in paths(DEJAVU) if key_text(100) not in p and p not in ((), ("cache",), ("timings",))]
EVERYWHERE = sorted(set(paths(DEJAVU)) | {("cache", "(1,"), ("evaluated_configs",)}, key=repr)


@SETTINGS
@given(where=st.sampled_from(EVERYWHERE), value=JSON)
def test_any_value_in_a_triton_dejavu_file_never_escapes(tuner, where, value):
    doc = replaced(DEJAVU, where, value)
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "cache.json"
        source.write_bytes(_dump(doc))
        report = dejavu_import.import_dejavu([source], tuner, Path(tmp) / "root")
        left_out = report.other_kernels or report.skipped_files  # another signature, other 'keys'
        if where in SPARE and not left_out:
            assert report.imported >= 1 and len(report.written) == 1, report
            stored = storage.read_document(Path(report.written[0])).entries
            assert any(e.key[0] == 100 for e in stored.values())


@SETTINGS
@given(key=st.text(max_size=40), config=st.text(max_size=60))
def test_any_text_as_a_key_or_a_config_is_skipped_or_imported(tuner, key, config):
    doc = dejavu_doc(
        {key_text(100): config_text(32, 4), key: config},
        {key_text(100): [0.5, 0.45, 0.55], key: [0.1, 0.1, 0.1]},
    )
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "cache.json"
        source.write_bytes(_dump(doc))
        report = dejavu_import.import_dejavu([source], tuner, Path(tmp) / "root")
        assert report.imported >= 1 and not report.problems


def test_an_entry_with_an_overflowing_number_is_rejected_among_valid_ones():
    entries = {key_id((n,)): make_entry((n,)) for n in range(3)}
    raw = storage.dump_document(storage.new_document(IDENTITY, entries))
    assert raw.count(b'"budget": null') == 3  # a field kept as read, not interpreted
    raw = raw.replace(b'"budget": null', b'"budget": 0.5e400', 1)  # the first entry's
    doc = storage.parse_document(raw, parameters=PARAMETERS)
    assert len(doc.rejected) == 1 and len(doc.entries) == 2
