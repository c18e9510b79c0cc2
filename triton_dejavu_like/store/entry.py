"""One stored result: the typed form of a tuning key's entry in a cache file.

Schema 1 of an entry (JSON object; the fields marked * are required)::

    key*            typed JSON of the tuning key (see codec)
    config*         the chosen config as typed fields
    timings_ms*     its times at the quantiles (default median, p20, p80), finite, >= 0
    evaluated*      how many candidates were measured;  space_size*: out of how many
    strategy*       the search that found it;  tuning_time_s*: wall time;  tuned_at*: ISO 8601
    budget, refined, phases_s, candidates (hash of the candidate set), quantiles (of timings_ms),
    top (best few with times), ruled_out (configs with reasons), imported_from: optional

:class:`StoredEntry` is built either from a tuning run (:meth:`StoredEntry.new`) or from data read
from disk (:meth:`StoredEntry.from_json`, which validates everything and raises
:class:`InvalidEntry` for anything wrong, whatever the data). The JSON it was made from is kept as
is, so reading and writing a file changes no byte of its entries.
"""

from __future__ import annotations

import copy
import datetime as _dt
import math
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._compat import Config, compile_option_names
from ..codec import UnknownValue, config_id, decode_config, decode_key, encode_config, encode_key, key_id


class InvalidEntry(ValueError):
    """Data that is not a valid stored entry (it is set aside, never used)."""


class UnknownEntry(InvalidEntry):
    """An entry holding a typed value of a kind this release does not read (a later release's, or a
    newer torch's dtype): never used here, and kept in its file as it is (never set aside)."""


@dataclass(frozen=True, eq=False)
class StoredEntry:
    """A validated entry: typed views of its fields, and the JSON it is stored as (:attr:`data`)."""

    key_id: str
    key: tuple[Any, ...]
    config: Config
    #: ``config_id`` of the chosen config, computed once (what restores and merges compare).
    config_id: str
    timings_ms: tuple[float, ...]
    evaluated: int
    space_size: int
    strategy: str
    tuning_time_s: float
    tuned_at: _dt.datetime
    data: Mapping[str, Any] = field(repr=False)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StoredEntry) and same_json(other.data, self.data)

    __hash__ = None  # type: ignore[assignment]

    # --- building ------------------------------------------------------------------------------------

    @classmethod
    def from_json(
        cls, kid: str, data: Any, *, parameters: Collection[str] | None = None, finite: bool = False
    ) -> StoredEntry:
        """The entry filed under ``kid``; :class:`InvalidEntry` if ``data`` is not a complete, well-typed
        result. ``parameters``: the kernel's argument names (a config naming anything else but a
        compile option, such as AMD's ``waves_per_eu``, is invalid: the rule of the decorator).
        ``finite``: the caller knows ``data`` holds no NaN or infinity (its parser saw none), so it
        is not searched for them.
        Never raises anything else: any failure on data read from disk means "invalid".
        """
        try:
            return cls._parse(kid, data, parameters, finite)
        except InvalidEntry:
            raise
        except UnknownValue as exc:
            raise UnknownEntry(str(exc)[:300]) from exc
        except ValueError as exc:  # DecodingError and friends: written for the user
            raise InvalidEntry(str(exc)[:300] or type(exc).__name__) from exc
        except Exception as exc:
            raise InvalidEntry(f"{type(exc).__name__}: {str(exc)[:280]}") from exc

    @classmethod
    def _parse(cls, kid: str, data: Any, parameters: Collection[str] | None, finite: bool) -> StoredEntry:
        if not isinstance(data, dict):
            raise InvalidEntry("an entry is not an object")
        for name, value in () if finite else data.items():  # kept as read and written back as JSON,
            if _holds_non_finite(value):  # which has no such numbers
                raise InvalidEntry(f"a non-finite number in {name!s:.40}")
        key = decode_key(data.get("key"))
        if key_id(key) != kid:
            raise InvalidEntry("the entry's key does not match the name it is filed under")
        config = _config(data.get("config"), parameters, "the config")
        timings = _timings(data.get("timings_ms"), "timings_ms")
        counts = {}
        for name in ("evaluated", "space_size"):
            value = data.get(name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidEntry(f"{name} is not a count: {value!r:.40}")
            counts[name] = value
        strategy = data.get("strategy")
        if not isinstance(strategy, str):
            raise InvalidEntry("strategy is not a string")
        tuning_time = _finite_number(data.get("tuning_time_s"), "tuning_time_s")
        tuned_at = parse_timestamp(data.get("tuned_at"))
        _check_lists(data, parameters)
        twin = data.get("twin", 0)
        if isinstance(twin, bool) or not isinstance(twin, int) or twin < 0:
            raise InvalidEntry(f"twin is not a position: {twin!r:.40}")
        return cls(
            kid,
            key,
            config,
            config_id(config),
            timings,
            counts["evaluated"],
            counts["space_size"],
            strategy,
            tuning_time,
            tuned_at,
            data,
        )

    @classmethod
    def new(
        cls,
        key: tuple[Any, ...],
        config: Config,
        timings_ms: Sequence[float],
        *,
        evaluated: int,
        space_size: int,
        strategy: str,
        tuning_time_s: float,
        tuned_at: _dt.datetime | None = None,
        top: Sequence[tuple[Config, Sequence[float]]] = (),
        ruled_out: Sequence[tuple[Config, str]] = (),
        **extra: Any,
    ) -> StoredEntry:
        """An entry for a result just found (``extra``: optional JSON fields such as ``budget``,
        ``refined``, ``phases_s``, ``candidates``, ``imported_from``). Raises
        :class:`~triton_dejavu_like.codec.EncodingError` if the key or a config cannot be stored."""
        moment = (tuned_at or _dt.datetime.now(_dt.timezone.utc)).astimezone(_dt.timezone.utc)
        data = {
            "key": encode_key(key),
            "config": encode_config(config),
            "timings_ms": [float(t) for t in timings_ms],
            "evaluated": int(evaluated),
            "space_size": int(space_size),
            "strategy": strategy,
            "tuning_time_s": round(float(tuning_time_s), 6),
            "tuned_at": moment.isoformat(timespec="milliseconds"),  # an order within a second
            **extra,
            "top": [{"config": encode_config(c), "timings_ms": [float(t) for t in ts]} for c, ts in top],
            "ruled_out": [{"config": encode_config(c), "reason": r} for c, r in ruled_out],
        }
        return cls.from_json(key_id(key), data)

    def to_json(self) -> dict[str, Any]:
        """The JSON object stored for this entry (a deep copy: changing it changes no entry)."""
        return copy.deepcopy(dict(self.data))

    # --- optional fields ---------------------------------------------------------------------------

    @property
    def candidates(self) -> str | None:
        """Hash of the candidate set the result was chosen from (None in older or imported entries)."""
        value = self.data.get("candidates")
        return value if isinstance(value, str) else None

    @property
    def ended_by(self) -> str | None:
        """What ended the search that found it (``BatchSearch.ended_by``: a time limit, the adaptive
        stop, ...); None where the entry does not say (written before it was recorded, imported, or
        tuned by ranks together)."""
        value = self.data.get("ended_by")
        return value if isinstance(value, str) else None

    @property
    def twin(self) -> int:
        """Which of the candidates with the chosen config's fields won, counted in list order: configs
        that differ only in what is not stored (a ``pre_hook``) are told apart by it; 0 when the chosen
        config's fields were unique (the field is then absent)."""
        return int(self.data.get("twin", 0))

    def chosen_among(self, matches: Sequence[Config]) -> Config:
        """The chosen candidate among ``matches``, the candidates with its fields in list order."""
        return matches[self.twin] if self.twin < len(matches) else matches[0]

    def top(self) -> list[tuple[Config, list[float]]]:
        return [(decode_config(t["config"])[0], list(t["timings_ms"])) for t in self.data.get("top", [])]

    def ruled_out(self) -> list[tuple[Config, str]]:
        return [(decode_config(r["config"])[0], r["reason"]) for r in self.data.get("ruled_out", [])]


#: What Python 3.11+ reads in an ISO time and 3.10 does not: a "Z" for UTC, and a fraction of a second
#: of other than 3 or 6 digits or after a comma (JavaScript and Go write such times).
_ZULU = re.compile(r"[Zz]$")
_FRACTION = re.compile(r"(?<=:\d\d)[.,](\d+)")


def _as_every_python_reads(text: str) -> str:
    """``text`` in the ISO form that ``fromisoformat`` reads under Python 3.10 too, with the value that
    3.11+ read (a fraction past microseconds is cut, as they cut it)."""
    text = _ZULU.sub("+00:00", text)
    return _FRACTION.sub(lambda m: "." + m.group(1)[:6].ljust(6, "0"), text, count=1)


def parse_timestamp(text: Any) -> _dt.datetime:
    """An ISO 8601 time as an aware UTC datetime (naive times are taken as UTC), the same under every
    Python; :class:`InvalidEntry` for anything else, including a time that leaves the calendar when
    moved to UTC."""
    if not isinstance(text, str):
        raise InvalidEntry(f"tuned_at is not a string: {text!r:.40}")
    try:
        moment = _dt.datetime.fromisoformat(_as_every_python_reads(text))
    except ValueError as exc:
        raise InvalidEntry(f"tuned_at is not an ISO 8601 time: {text!r:.40}") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_dt.timezone.utc)
    try:
        return moment.astimezone(_dt.timezone.utc)
    except OverflowError as exc:  # e.g. 0001-01-01T00:00:00+23:59 lands before year 1 in UTC
        raise InvalidEntry(f"tuned_at is outside the calendar in UTC: {text!r:.40}") from exc


def same_json(a: Any, b: Any) -> bool:
    """Whether two parsed JSON values are the same JSON: equal values of the same types, where
    Python's ``==`` takes 1, 1.0 and true (and 0.0 and -0.0) for one another."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_json(value, b[name]) for name, value in a.items())
    if isinstance(a, list):
        return len(a) == len(b) and all(map(same_json, a, b))
    return a == b and (a or type(a) is not float or math.copysign(1.0, a) == math.copysign(1.0, b))


def _holds_non_finite(data: Any) -> bool:
    """Whether ``data`` (parsed JSON) holds a NaN or an infinity anywhere.

    Such numbers arrive as the literals ``NaN`` and ``Infinity`` of a careless writer. Fields the
    entry does not interpret (``budget``, ``phases_s``, fields of newer versions) are kept as read,
    and a document holding one of these numbers cannot be written back."""
    stack = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, float):
            if not math.isfinite(value):
                return True
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return False


def _finite_number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidEntry(f"{what} is not a number: {type(value).__name__}")
    try:
        number = float(value)  # an int too large for a float raises OverflowError
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise InvalidEntry(f"{what} is not a finite number")
    return number


def _timings(value: Any, what: str) -> tuple[float, ...]:
    if not isinstance(value, list) or not value:
        raise InvalidEntry(f"{what} is not a non-empty list")
    times = tuple(_finite_number(v, what) for v in value)
    if any(t < 0 for t in times):
        raise InvalidEntry(f"{what} holds a negative time")
    return times


def _check_lists(data: dict[str, Any], parameters: Collection[str] | None) -> None:
    """The optional ``top`` (configs with timings) and ``ruled_out`` (configs with reasons) lists."""
    for name in ("top", "ruled_out"):
        if not isinstance(data.get(name, []), list):
            raise InvalidEntry(f"{name} is not a list")
    for item in data.get("top", []):
        if not isinstance(item, dict):
            raise InvalidEntry("a top-k item is not an object")
        _config(item.get("config"), parameters, "a top-k config")
        _timings(item.get("timings_ms"), "top-k timings_ms")
    for item in data.get("ruled_out", []):
        if not isinstance(item, dict) or not isinstance(item.get("reason"), str):
            raise InvalidEntry("a ruled-out item is not an object with a reason")
        _config(item.get("config"), parameters, "a ruled-out config")


def _config(data: Any, parameters: Collection[str] | None, what: str) -> Config:
    config, _ = decode_config(data)
    if parameters is not None:
        unknown = sorted(set(config.kwargs) - set(parameters) - compile_option_names())
        if unknown:
            raise InvalidEntry(f"{what} names parameters the kernel lacks: {', '.join(unknown)[:120]}")
    return config


__all__ = ["InvalidEntry", "StoredEntry", "UnknownEntry", "parse_timestamp", "same_json"]
