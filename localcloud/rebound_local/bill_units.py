"""The units AWS bills a request in: an item's size as DynamoDB counts it, the read and write
units of a size, a transaction's, the empty receives of an SQS event source mapping, Lambda's
GB-seconds, the bytes of an EMF document."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

KB = 1024
WRITE_STEP = 1 * KB
READ_STEP = 4 * KB
TRANSACTION_FACTOR = 2

ESM_POLLERS = 5
"""Long polls each SQS event source mapping keeps open while its queue is empty (AWS: 5)."""
ESM_WAIT_S = 20
"""How long each of them waits before an empty receive returns (the long-poll maximum, 20 s)."""
PLATFORM_LOG_BYTES = 330
"""Lambda's own START, END and REPORT lines for one invocation (text format, typical lengths)."""


@functools.lru_cache(maxsize=4096)
def number_size(text: str) -> int:
    digits = text.lstrip("+-").lower().split("e")[0].replace(".", "").strip("0")
    return math.ceil(max(1, len(digits)) / 2) + 1


def value_size(value: Mapping[str, Any]) -> int:
    """The size DynamoDB counts for one attribute value (AttributeValue JSON), without its name."""
    ((kind, inner),) = value.items()
    if kind == "S":
        return len(str(inner).encode())
    if kind == "N":
        return number_size(str(inner))
    if kind == "B":
        return len(inner) if isinstance(inner, bytes) else len(str(inner)) * 3 // 4
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(str(v).encode()) for v in inner)
    if kind == "NS":
        return sum(number_size(str(v)) for v in inner)
    if kind == "BS":
        return sum(value_size({"B": v}) for v in inner)
    if kind == "L":
        return 3 + sum(value_size(v) + 1 for v in inner)
    if kind == "M":
        return 3 + sum(len(k.encode()) + value_size(v) + 1 for k, v in inner.items())
    raise ValueError(f"unknown DynamoDB attribute type {kind!r}")


def utf8_len(text: str) -> int:
    """Bytes of ``text`` in UTF-8; an ASCII string is counted without encoding it."""
    return len(text) if text.isascii() else len(text.encode())


def item_size(item: Mapping[str, Mapping[str, Any]] | None) -> int:
    """An item's size as DynamoDB bills it: each attribute's name in UTF-8 plus its value.

    The meter sizes every item a write touches, before and after it: a string attribute (most of
    them) is counted here without a call per value."""
    if not item:
        return 0
    total = 0
    for name, value in item.items():
        total += utf8_len(name)
        text = value.get("S")
        if text.__class__ is str and len(value) == 1:
            total += utf8_len(text)
        else:
            total += value_size(value)
    return total


def write_units(size: int) -> int:
    """Write units of one write of an item this size: one per started KB, at least one."""
    return max(1, math.ceil(size / WRITE_STEP))


def read_units(size: int, consistent: bool = False) -> float:
    """Read units of reading this many bytes: one per started 4 KB, at least one; half if
    eventually consistent."""
    units = max(1, math.ceil(size / READ_STEP))
    return float(units) if consistent else units / 2


def transaction_write_units(sizes: Iterable[int]) -> int:
    """A ``TransactWriteItems`` of items of these sizes: each item's write units, twice."""
    return sum(TRANSACTION_FACTOR * write_units(size) for size in sizes)


def esm_empty_receives(seconds: float, queues: int, busy_receives: int = 0) -> int:
    """The empty receives of the SQS event source mappings' long polls over ``seconds``.

    Model: each mapping keeps ``ESM_POLLERS`` long polls open, and each returns empty after
    ``ESM_WAIT_S`` when there is nothing to receive. Receives that returned messages replace
    empty ones, so the empty receives are what the pollers' time allows minus those.
    """
    capacity = int(queues * ESM_POLLERS * seconds / ESM_WAIT_S)
    return max(0, capacity - busy_receives)


def lambda_gb_seconds(billed_ms: int, memory_mb: int) -> float:
    return billed_ms / 1000.0 * memory_mb / 1024.0


def emf_document_bytes(namespace: str, service: str, metrics: Mapping[str, str]) -> int:
    """The bytes of the one EMF document an invocation prints for ``metrics`` (name -> unit)."""
    return _emf_bytes(namespace, service, tuple(sorted(metrics.items())))


@functools.lru_cache(maxsize=1024)
def _emf_bytes(namespace: str, service: str, metrics: tuple[tuple[str, str], ...]) -> int:
    """``emf_document_bytes`` of metrics sorted by name: the same few sets again and again."""
    document = {
        "_aws": {
            "Timestamp": 1_700_000_000_000,
            "CloudWatchMetrics": [
                {
                    "Namespace": namespace,
                    "Dimensions": [["service"]],
                    "Metrics": [{"Name": name, "Unit": unit} for name, unit in metrics],
                }
            ],
        },
        "service": service,
        **{name: [0.0] for name, _ in metrics},
    }
    return len(json.dumps(document, separators=(",", ":"))) + 1


IndexShape = tuple[list[str], list[str], str, list[str]]
"""A global index as the meter prices it: its key attributes, the table's key attributes, its
projection type and included attributes."""
