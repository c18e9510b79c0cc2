"""Typed JSON encoding of tuning keys and ``triton.Config`` objects.

Storage files are data: decoding builds only plain Python values (and torch/triton dtypes looked up
by name among the dtypes those libraries define); nothing read from a file is executed.

Encoding of a value:

====================  =====================================
Python value          JSON
====================  =====================================
``None``/bool/int/str itself
finite float          itself (``1.0`` stays a float)
nan / inf / -inf      ``{"float": "nan" | "inf" | "-inf"}``
tuple                 ``{"tuple": [...]}``
list                  ``{"list": [...]}``
torch.dtype           ``{"torch.dtype": "float16"}``
triton dtype          ``{"triton.dtype": "fp16"}``
====================  =====================================
"""

from __future__ import annotations

import json
import math
import operator
import reprlib
from collections.abc import Sequence
from typing import Any

from ._compat import CONFIG_FIELDS, CONFIG_FIELDS_ANY_RELEASE, Config, is_constexpr


class EncodingError(ValueError):
    """A key or config holds a value that cannot be stored as typed JSON."""


class DecodingError(ValueError):
    """Stored JSON does not describe a valid key or config."""


class UnknownValue(DecodingError):
    """Stored JSON of a typed value this release does not know (a tag, a torch dtype name) but a later
    release, or a newer torch, may write: not malformed, only unreadable here."""


_SHORT = reprlib.Repr()  # keyword arguments need Python 3.12
_SHORT.maxstring = _SHORT.maxother = 80


def short_repr(value: Any) -> str:
    """``repr(value)`` cut to a readable length (a tensor in a key would print all its elements)."""
    return _SHORT.repr(value)


_TORCH_DTYPE = "torch.dtype"
_TRITON_DTYPE = "triton.dtype"
#: The tags of typed values (``{"<tag>": payload}``) this release reads
_TAGS = ("float", "tuple", "list", _TORCH_DTYPE, _TRITON_DTYPE)


def encode_value(value: Any) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):  # a str subclass (a str-Enum member) as JSON stores it: a plain str, so
        return str.__str__(value)  # an entry kept in memory holds the key a later process decodes
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if math.isfinite(value):
            return float(value)
        return {"float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
    if isinstance(value, tuple):
        return {"tuple": [encode_value(v) for v in value]}
    if isinstance(value, list):
        return {"list": [encode_value(v) for v in value]}
    name = _dtype_name(value)
    if name is not None:
        return name
    # numpy scalars and tl.constexpr wrap a plain value
    if is_constexpr(value):
        return encode_value(value.value)
    item = getattr(value, "item", None)
    if callable(item) and type(value).__module__ == "numpy":
        return encode_value(item())
    raise EncodingError(f"cannot store a value of type {type(value).__qualname__}: {short_repr(value)}")


def _dtype_name(value: Any) -> dict[str, str] | None:
    import torch
    import triton.language as tl

    if isinstance(value, torch.dtype):
        return {_TORCH_DTYPE: str(value).removeprefix("torch.")}

    if type(value) is tl.dtype:  # scalar types only: pointer/block/tuple types cannot be decoded
        return {_TRITON_DTYPE: value.name}
    return None


def decode_value(data: Any) -> Any:
    if data is None or isinstance(data, (bool, str)):
        return data
    if isinstance(data, int):
        return data
    if isinstance(data, float):
        if not math.isfinite(data):
            raise DecodingError(f"non-finite number {data!r} must be tagged")
        return data
    if isinstance(data, dict) and len(data) == 1:
        ((tag, payload),) = data.items()
        if tag == "float" and payload in ("nan", "inf", "-inf"):
            return float(payload)
        if tag in ("tuple", "list") and isinstance(payload, list):
            items = [decode_value(v) for v in payload]
            return tuple(items) if tag == "tuple" else items
        if tag == _TORCH_DTYPE and isinstance(payload, str):
            return _torch_dtype(payload)
        if tag == _TRITON_DTYPE and isinstance(payload, str):
            return _triton_dtype(payload)
        if tag not in _TAGS and _is_tag(tag):
            raise UnknownValue(f"a typed value of a kind this release does not read: {data!r:.200}")
    raise DecodingError(f"not a typed value: {data!r:.200}")


def _is_tag(tag: Any) -> bool:
    """Whether ``tag`` is shaped as the tags are (dotted names), so a later release may define it."""
    return isinstance(tag, str) and all(part.isidentifier() for part in tag.split("."))


def _torch_dtype(name: str) -> Any:
    import torch

    if not name.isidentifier():
        raise DecodingError(f"not a torch dtype name: {name!r:.80}")
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):  # a dtype of a newer torch, say
        raise UnknownValue(f"unknown torch dtype {name!r:.80}")
    return dtype


def _triton_dtype(name: str) -> Any:
    import triton.language as tl

    if name not in tl.dtype.SINT_TYPES + tl.dtype.UINT_TYPES + tl.dtype.FP_TYPES + tl.dtype.OTHER_TYPES:
        raise DecodingError(f"unknown triton dtype {name!r:.80}")
    return tl.dtype(name)


#: ``json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)`` made once: dumps
#: builds an encoder at every call, which is a tenth of an id's cost over a large ConfigSpace
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=False)


def canonical_json(data: Any) -> str:
    """One string per value: sorted keys, no spaces; stable across processes and machines."""
    return _CANONICAL.encode(data)


# --- tuning keys -------------------------------------------------------------------------------------


def encode_key(key: tuple[Any, ...]) -> list[Any]:
    return [encode_value(v) for v in key]


def decode_key(data: Any) -> tuple[Any, ...]:
    if not isinstance(data, list):
        raise DecodingError(f"a tuning key is a list, not {type(data).__name__}")
    return tuple(decode_value(v) for v in data)


def key_id(key: tuple[Any, ...]) -> str:
    """The string a tuning key is filed under: canonical JSON of its typed encoding."""
    return canonical_json(encode_key(key))


# --- configs -----------------------------------------------------------------------------------------


def encode_config(config: Config) -> dict[str, Any]:
    """``{"kwargs": {...}, "num_warps": 4, ...}``: every field the installed Triton's Config has."""
    out: dict[str, Any] = {"kwargs": {str(k): encode_value(v) for k, v in config.kwargs.items()}}
    for field in CONFIG_FIELDS:
        out[field] = encode_value(getattr(config, field, CONFIG_FIELDS[field]))
    return out


def config_id(config: Config) -> str:
    return canonical_json(encode_config(config))


_CONFIG_FIELDS_OF = operator.attrgetter(*CONFIG_FIELDS)  # (num_warps, num_stages at least: a tuple)


def config_fields(config: Config) -> tuple[Any, ...]:
    """What :func:`config_id` reads of ``config`` besides its ``kwargs``, unencoded (cheap): equal
    kwargs and fields, equal ids, so an id remembered for a Config object is still its id while
    both compare equal (a prune may change a config in place)."""
    try:
        return _CONFIG_FIELDS_OF(config)
    except AttributeError:  # an object without a field of this Triton's Config
        return tuple(getattr(config, f, d) for f, d in CONFIG_FIELDS.items())


def configs_fields(configs: Sequence[Config]) -> list[tuple[Any, ...]]:
    """:func:`config_fields` of each config, read without a Python-level loop where they allow."""
    try:
        return list(map(_CONFIG_FIELDS_OF, configs))
    except AttributeError:
        return [config_fields(config) for config in configs]


def decode_config(data: Any, *, pre_hook: Any = None) -> tuple[Config, list[str]]:
    """A Config from its typed fields, and the names of fields this Triton lacks (dropped).

    Raises :class:`DecodingError` for anything that is not a known field with a plain value.
    """
    if not isinstance(data, dict) or not isinstance(data.get("kwargs"), dict):
        raise DecodingError("a config is an object with a 'kwargs' object")
    kwargs = {}
    for name, value in data["kwargs"].items():
        if not isinstance(name, str) or not name.isidentifier():
            raise DecodingError(f"config parameter name {name!r:.80} is not an identifier")
        kwargs[name] = decode_value(value)
    options: dict[str, Any] = {}
    dropped: list[str] = []
    for field, value in data.items():
        if field == "kwargs":
            continue
        if field in CONFIG_FIELDS:
            decoded = decode_value(value)
            if decoded is not None and not isinstance(decoded, (int, str)):
                raise DecodingError(f"config field {field} holds {decoded!r:.80}")
            options[field] = decoded
        elif field in CONFIG_FIELDS_ANY_RELEASE:
            dropped.append(field)
        else:
            raise DecodingError(f"unknown config field {field!r:.80}")
    return Config(kwargs, pre_hook=pre_hook, **options), dropped


def describe_config(config: Config) -> str:
    """A short, readable one-line form (for logs and summaries; never parsed back)."""
    parts = [f"{k}={v}" for k, v in config.kwargs.items()]
    for field, default in CONFIG_FIELDS.items():
        value = getattr(config, field, default)
        if field in ("num_warps", "num_stages") or value != default:
            parts.append(f"{field}={value}")
    return ", ".join(parts)
