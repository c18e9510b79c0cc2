"""Storage: typed entries, the on-disk layout, identity hashes, cache files, stores, inventory (reading many
files), merging, pruning and export of stored results, warm start."""

from __future__ import annotations

from . import export, inventory, tree_merge, tree_prune
from .cache_file import CacheFile
from .document import (
    SCHEMA_VERSION,
    Document,
    InvalidCacheFile,
    NewerSchemaFile,
    dump_document,
    new_document,
    parse_document,
)
from .entry import InvalidEntry, StoredEntry, UnknownEntry, parse_timestamp
from .files import atomic_write, read_bounded, read_document
from .identity import KernelIdentity, Platform, detect_platform
from .layered import LayeredStore, StoreLayer, add_store, registered_stores
from .layout import CACHE_FILE_NAME, default_root, default_tag
from .store import FileStore, MemoryStore, Store

__all__ = [
    "CACHE_FILE_NAME",
    "SCHEMA_VERSION",
    "CacheFile",
    "Document",
    "FileStore",
    "InvalidCacheFile",
    "InvalidEntry",
    "KernelIdentity",
    "LayeredStore",
    "MemoryStore",
    "NewerSchemaFile",
    "Platform",
    "Store",
    "StoreLayer",
    "StoredEntry",
    "UnknownEntry",
    "add_store",
    "atomic_write",
    "default_root",
    "default_tag",
    "detect_platform",
    "dump_document",
    "export",
    "inventory",
    "new_document",
    "parse_document",
    "parse_timestamp",
    "read_bounded",
    "read_document",
    "registered_stores",
    "tree_merge",
    "tree_prune",
]
