"""Property-based tests: every value a tuning key or a config can hold survives storage exactly.

"Exactly" means the same type as well as the same value: ``1`` stays an int and ``1.0`` a float,
``True`` stays a bool, ``-0.0`` keeps its sign, NaN stays NaN, a tuple stays a tuple, and a dtype
comes back as the very same dtype object.
"""

from __future__ import annotations

import json
import math
import string
from typing import Any

import pytest
import torch
import triton
import triton.language as tl
from hypothesis import given, settings
from hypothesis import strategies as st

from triton_dejavu_like import store as storage
from triton_dejavu_like._compat import CONFIG_FIELDS
from triton_dejavu_like.codec import (
    EncodingError,
    config_id,
    decode_config,
    decode_key,
    decode_value,
    encode_config,
    encode_key,
    encode_value,
    key_id,
)
from triton_dejavu_like.store import layout

TORCH_DTYPES = sorted({v for v in vars(torch).values() if isinstance(v, torch.dtype)}, key=str)
TRITON_DTYPES = [
    tl.dtype(name)
    for name in tl.dtype.SINT_TYPES + tl.dtype.UINT_TYPES + tl.dtype.FP_TYPES + tl.dtype.OTHER_TYPES
]
DTYPE_STRINGS = [str(d) for d in TORCH_DTYPES] + [d.name for d in TRITON_DTYPES]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, math.inf, -math.inf, math.nan, 1e-308, 5e-324, 1.7976931348623157e308]),
    st.text(),
    st.sampled_from(DTYPE_STRINGS),
    st.sampled_from(TORCH_DTYPES),
    st.sampled_from(TRITON_DTYPES),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4).map(tuple), st.lists(inner, max_size=4)),
    max_leaves=12,
)
keys = st.lists(values, max_size=6).map(tuple)
identifiers = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True)


def assert_same(a: Any, b: Any) -> None:
    """Equal value and equal type, all the way down (NaN equals NaN, -0.0 differs from 0.0)."""
    assert type(a) is type(b), (a, b)
    if isinstance(a, float):
        if math.isnan(a):
            assert math.isnan(b)
        else:
            assert a == b and math.copysign(1.0, a) == math.copysign(1.0, b), (a, b)
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b), (a, b)
        for x, y in zip(a, b):
            assert_same(x, y)
    elif isinstance(a, torch.dtype):
        assert a is b
    else:
        assert a == b, (a, b)


def through_json(data: Any) -> Any:
    """What a file gives back: strict JSON text (no NaN literals), parsed again."""
    return json.loads(json.dumps(data, allow_nan=False))


@given(values)
@settings(deadline=None)
def test_every_value_round_trips_exactly(value):
    assert_same(decode_value(through_json(encode_value(value))), value)


@given(keys)
@settings(deadline=None)
def test_every_key_round_trips_and_files_under_the_same_name(key):
    restored = decode_key(through_json(encode_key(key)))
    assert_same(restored, key)
    assert key_id(restored) == key_id(key)


@given(st.lists(keys, min_size=1, max_size=4, unique_by=key_id))
@settings(max_examples=50, deadline=None)
def test_keys_survive_a_whole_cache_file(key_list):
    entries = {}
    for key in key_list:
        entry = {
            "key": encode_key(key),
            "config": encode_config(triton.Config({"BLOCK": 64})),
            "timings_ms": [1.0],
            "evaluated": 1,
            "space_size": 1,
            "strategy": "exhaustive",
            "tuning_time_s": 0.0,
            "tuned_at": "2025-01-01T00:00:00+00:00",
        }
        entries[key_id(key)] = entry
    identity = dict.fromkeys(layout.IDENTITY_FIELDS, "x")
    doc = storage.parse_document(storage.dump_document(storage.new_document(identity, entries)))
    assert not doc.rejected
    for key in key_list:
        assert_same(decode_key(doc.entries[key_id(key)].data["key"]), key)


def _field_values(name: str) -> st.SearchStrategy:
    default = CONFIG_FIELDS[name]
    if isinstance(default, bool):
        return st.booleans()
    if isinstance(default, int):
        return st.integers(min_value=0, max_value=64)
    if name == "maxnreg":
        return st.one_of(st.none(), st.integers(min_value=1, max_value=255))
    return st.just(default)


configs = st.builds(
    lambda kwargs, fields: triton.Config(kwargs, **fields),
    st.dictionaries(identifiers, values, max_size=5),
    st.fixed_dictionaries({name: _field_values(name) for name in CONFIG_FIELDS}),
)


@given(configs)
@settings(deadline=None)
def test_every_config_round_trips_exactly(config):
    restored, dropped = decode_config(through_json(encode_config(config)))
    assert dropped == []
    assert list(restored.kwargs) == list(config.kwargs)
    for name, value in config.kwargs.items():
        assert_same(restored.kwargs[name], value)
    for name in CONFIG_FIELDS:
        assert_same(getattr(restored, name), getattr(config, name))
    assert config_id(restored) == config_id(config)


@given(st.dictionaries(identifiers, values, min_size=1, max_size=4), st.randoms())
@settings(deadline=None)
def test_a_config_id_does_not_depend_on_the_order_of_its_parameters(kwargs, rng):
    shuffled = list(kwargs.items())
    rng.shuffle(shuffled)
    assert config_id(triton.Config(kwargs)) == config_id(triton.Config(dict(shuffled)))


@given(st.sampled_from(TRITON_DTYPES))
@settings(deadline=None)
def test_a_triton_type_that_cannot_come_back_is_refused_when_stored(dtype):
    with pytest.raises(EncodingError, match="cannot store"):  # a pointer type is not decoded
        encode_value(tl.pointer_type(dtype))


@given(st.text(alphabet=string.printable, max_size=40))
@settings(deadline=None)
def test_decoding_arbitrary_dtype_names_never_executes_or_crashes(name):
    for tag in ("torch.dtype", "triton.dtype"):
        try:
            value = decode_value({tag: name})
        except ValueError:
            continue
        assert isinstance(value, (torch.dtype, tl.dtype))
