"""The cache file's document: its JSON shape, parsing bytes into entries, and writing entries as bytes.

A document is ``{"schema": 1, "identity": {...}, "entries": {key id: entry}}`` plus any other
top-level member a later release adds (kept as it is). Parsing never executes anything: JSON only,
each entry validated by :class:`~triton_dejavu_like.store.entry.StoredEntry`. Writing is
deterministic (sorted keys, one-space indent), so an entry's text can be made once and reused:
:func:`assemble_document` of :func:`entry_text` pieces gives the bytes :func:`dump_document` gives.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from .entry import InvalidEntry, StoredEntry, UnknownEntry, same_json
from .layout import IDENTITY_FIELDS

SCHEMA_VERSION = 1

EntryMap = dict[str, StoredEntry]
#: The top-level members of a cache file this release reads (any other is kept as it is)
_MEMBERS = ("entries", "identity", "schema")


class InvalidCacheFile(ValueError):
    """A cache file that is not a valid document of this schema (it is moved aside)."""


class NewerSchemaFile(InvalidCacheFile):
    """A cache file written by a newer release (a higher schema version): left untouched."""


@dataclass
class Document:
    """A parsed cache file: its identity, its valid entries, and the entries it had to reject."""

    identity: dict[str, Any]
    entries: EntryMap
    #: key id -> (the raw entry, why it was rejected)
    rejected: dict[str, tuple[Any, str]] = field(default_factory=dict)
    #: top-level members other than schema, identity and entries (a note, a later release's field):
    #: written back as they were
    extra: dict[str, Any] = field(default_factory=dict)
    #: the key ids among ``rejected`` of entries holding a value of a kind this release does not read
    #: (:class:`UnknownEntry`: a later release's): kept in the file as they are, never set aside
    unknown: set[str] = field(default_factory=set)


def parse_document(
    raw: bytes,
    *,
    parameters: Collection[str] | None = None,
    only: Collection[str] | None = None,
    known: Mapping[str, StoredEntry] | None = None,
) -> Document:
    """Parse a cache file's bytes.

    Raises :class:`InvalidCacheFile` when the document as a whole is unusable (encoding, syntax,
    shape, schema, identity); an entry that is not valid lands in ``rejected``. With ``only``, just
    the entries of those key ids are validated and returned (a look-up of one key in a big file).
    ``known``: entries validated before with the same ``parameters``; one whose JSON is equal to
    what is read is taken as it is instead of being validated again.
    """
    doc, finite = _load_json(raw)
    identity, entries = _check_header(doc)
    extra = {name: value for name, value in doc.items() if name not in _MEMBERS}
    valid: EntryMap = {}
    rejected: dict[str, tuple[Any, str]] = {}
    unknown: set[str] = set()
    wanted = entries.items() if only is None else ((k, entries[k]) for k in only if k in entries)
    for kid, data in wanted:
        before = known.get(kid) if known is not None else None
        if before is not None and same_json(before.data, data):
            valid[kid] = before
            continue
        try:  # finite: no entry needs to be searched for NaN and infinities
            valid[kid] = StoredEntry.from_json(kid, data, parameters=parameters, finite=finite)
        except InvalidEntry as exc:
            rejected[kid] = (data, str(exc) or "invalid")
            if isinstance(exc, UnknownEntry):
                unknown.add(kid)
    return Document(identity, valid, rejected, extra, unknown)


def _load_json(raw: bytes) -> tuple[Any, bool]:
    """The JSON value of ``raw``, and whether it holds no NaN or infinity (the literals ``NaN`` and
    ``Infinity`` parse, as does ``1e999``; validation rejects the entries holding them)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidCacheFile(f"not UTF-8 ({exc.reason} at byte {exc.start})") from exc
    non_finite: list[str] = []

    def number(literal: str) -> float:
        value = float(literal)
        if not math.isfinite(value):
            non_finite.append(literal)
        return value

    try:
        doc = json.loads(text, parse_float=number, parse_constant=number)
    except json.JSONDecodeError as exc:
        # some of json's messages end in "at" ("Invalid control character at"): not "at at line 1"
        where = f"line {exc.lineno}, column {exc.colno}"
        raise InvalidCacheFile(f"not JSON ({exc.msg.removesuffix(' at')} at {where})") from exc
    except RecursionError as exc:
        raise InvalidCacheFile("JSON nested too deeply") from exc
    except ValueError as exc:  # e.g. an integer over Python's digit limit
        raise InvalidCacheFile(f"not a valid JSON value ({str(exc)[:120]})") from exc
    return doc, not non_finite


def _check_header(doc: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The identity and the raw entries of a parsed document whose schema this release reads."""
    if not isinstance(doc, dict):
        raise InvalidCacheFile("the document is not an object")
    schema = doc.get("schema")
    if isinstance(schema, int) and not isinstance(schema, bool) and schema > SCHEMA_VERSION:
        raise NewerSchemaFile(f"schema version {schema} is newer than this release reads ({SCHEMA_VERSION})")
    if schema != SCHEMA_VERSION or isinstance(schema, bool):
        raise InvalidCacheFile(f"unknown schema version {schema!r:.40} (this release reads {SCHEMA_VERSION})")
    identity = doc.get("identity")
    if not isinstance(identity, dict):
        raise InvalidCacheFile("'identity' is missing or not an object")
    for name in IDENTITY_FIELDS:
        if not isinstance(identity.get(name), str):
            raise InvalidCacheFile(f"identity field {name!r} is missing or not a string")
    if not all(isinstance(value, str) for value in identity.values()):
        raise InvalidCacheFile("an identity field is not a string")  # identities are hashed as JSON
    entries = doc.get("entries")
    if not isinstance(entries, dict):
        raise InvalidCacheFile("'entries' is missing or not an object")
    return identity, entries


def new_document(
    identity: Mapping[str, Any], entries: Mapping[str, Any], extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A document (``entries`` as :class:`StoredEntry` or as the JSON values to write as they are;
    ``extra``: other top-level members, written as they are)."""
    return {
        **(extra or {}),
        "schema": SCHEMA_VERSION,
        "identity": dict(identity),
        "entries": {
            kid: entry.data if isinstance(entry, StoredEntry) else entry for kid, entry in entries.items()
        },
    }


def dump_document(doc: Mapping[str, Any]) -> bytes:
    return (json.dumps(doc, indent=1, sort_keys=True, allow_nan=False) + "\n").encode("utf-8")


def _nested_text(value: Any, depth: int, *, allow_nan: bool = False) -> str:
    """``value`` as :func:`dump_document` writes it ``depth`` levels deep (strings in JSON hold no
    newline, so every line but the first is indented by ``depth``)."""
    body = json.dumps(value, indent=1, sort_keys=True, allow_nan=allow_nan)
    return body.replace("\n", "\n" + " " * depth)


def member_text(kid: str, data: Any, *, allow_nan: bool = False) -> str:
    """One member of ``entries`` as it stands in a file written by :func:`dump_document`."""
    return f"  {json.dumps(kid)}: " + _nested_text(data, 2, allow_nan=allow_nan)


def entry_text(kid: str, entry: StoredEntry) -> str:
    """One entry as it stands in a file written by :func:`dump_document` (without the separator)."""
    return member_text(kid, entry.data)


def assemble_document(
    identity: Mapping[str, Any], texts: Collection[str], extra: Mapping[str, Any] | None = None
) -> bytes:
    """The bytes :func:`dump_document` writes for ``identity``, entries already turned into text by
    :func:`entry_text` (in key order: what lets a writer serialize only the entries that changed),
    and the other top-level members ``extra``."""
    members = {name: _nested_text(value, 1, allow_nan=True) for name, value in (extra or {}).items()}
    members["entries"] = "{\n" + ",\n".join(texts) + "\n }" if texts else "{}"
    members["identity"] = _nested_text(dict(identity), 1)
    members["schema"] = str(SCHEMA_VERSION)
    body = ",\n".join(f" {json.dumps(name)}: {members[name]}" for name in sorted(members))
    return f"{{\n{body}\n}}\n".encode()
