"""Typed encoding of keys and configs: exact round trips, no parsing of str(Config)."""

from __future__ import annotations

import math

import pytest
import torch
import triton
import triton.language as tl

from triton_dejavu_like.codec import (
    DecodingError,
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


@pytest.mark.parametrize(
    "value",
    [
        0,
        -3,
        2**40,
        1.5,
        1.0,
        True,
        False,
        None,
        "torch.float16",
        (1, (2.0, "x")),
        [1, 2],
        torch.bfloat16,
        tl.float8e4nv,
    ],
)
def test_values_round_trip_with_their_type(value):
    back = decode_value(encode_value(value))
    assert back == value and type(back) is type(value)


def test_non_finite_floats_are_tagged():
    assert encode_value(math.inf) == {"float": "inf"}
    assert decode_value({"float": "-inf"}) == -math.inf
    assert math.isnan(decode_value(encode_value(math.nan)))


def test_int_and_float_and_bool_stay_distinct_in_key_ids():
    assert len({key_id((1,)), key_id((1.0,)), key_id((True,))}) == 3


def test_key_round_trip():
    key = (4096, 128, "torch.float16", (2, 3))
    assert decode_key(encode_key(key)) == key


@pytest.mark.parametrize("inner", [16, 0, None, "x", torch.float16])
def test_a_constexpr_is_stored_as_the_value_it_wraps(inner):
    # a key value passed as tl.constexpr (None included: it used to be refused)
    assert encode_value(tl.constexpr(inner)) == encode_value(inner)


def test_unknown_values_are_refused():
    with pytest.raises(EncodingError):
        encode_value(object())
    with pytest.raises(DecodingError):
        decode_value({"pickle": "..."})
    with pytest.raises(DecodingError):
        decode_value({"torch.dtype": "__import__('os')"})
    with pytest.raises(DecodingError):
        decode_value(float("inf"))


def test_config_round_trip_and_identity():
    config = triton.Config({"BLOCK_M": 64, "SPLIT": True, "MODE": "fast"}, num_warps=8, num_stages=4)
    data = encode_config(config)
    assert data["kwargs"] == {"BLOCK_M": 64, "SPLIT": True, "MODE": "fast"}
    back, dropped = decode_config(data)
    assert dropped == []
    assert back.all_kwargs() == config.all_kwargs()
    assert config_id(back) == config_id(config)


def test_config_id_ignores_pre_hook_and_kwarg_order():
    a = triton.Config({"A": 1, "B": 2}, pre_hook=lambda nargs: None)
    b = triton.Config({"B": 2, "A": 1})
    assert config_id(a) == config_id(b)


def test_decode_config_rejects_unknown_fields_and_drops_other_releases():
    base = encode_config(triton.Config({"A": 1}))
    with pytest.raises(DecodingError, match="unknown config field"):
        decode_config({**base, "num_wraps": 4})
    with pytest.raises(DecodingError):
        decode_config({**base, "kwargs": {"not an identifier": 1}})
    _, dropped = decode_config({**base, "enable_warp_specialization": 1})
    assert dropped == ["enable_warp_specialization"]
