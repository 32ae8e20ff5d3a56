"""Patches that make moto a faithful and fast stand-in for what Rebound relies on: the registry.

moto is pinned (requirements/constraints.txt) and ``tests/integration/test_motopatch.py`` pins
the behaviour each patch provides, so an upgrade that breaks one fails loudly. This module owns
``install``, which applies every patch once per process in a fixed order (later patches wrap what
earlier ones installed), and re-exports what the rest of the local cloud uses. One module per
patch, each with its reason:

1. **Clock** (``clock``): moto's time follows the local runtime's (virtual) clock.
2. **Atomicity** (``lock``): one re-entrant lock around every moto action.
3. **Transactions** (``transactions``): every condition is checked first; writes happen only if
   all pass, as DynamoDB does.
4. **SQS receive** (``sqs_retention``): the retention check reads only the attribute it needs.
5. **Change counters** (``scheduler_versions``): schedule changes bump ``versions["scheduler"]``
   so the local Scheduler re-reads schedules only when something changed (SQS and stream
   counters: ``changes``).
6. **Queries** (``query_index``): a ``Query`` reads one partition instead of the whole table,
   only the part of it in the key condition's range, and only a first page's worth when it has
   a ``Limit`` and no filter.
7. **Parsing once** (``parsing``): parsed expressions are cached; repeated work of DynamoDB items
   and SQS queues is done once.
8. **Message ledger** (``sqs_ledger``): with ``track_messages(ledger)``, every message SQS
   accepts, deletes, purges or moves to a dead-letter queue is reported to the ledger.
9. **Event routing** (``event_routing``): a DISABLED rule matches nothing, as on AWS.
10. **Local audit key** (``kms_material``): the audit chain's local KMS key has the same material
    every time the same environment provisions it, so a restart with ``--state-dir`` keeps the
    records' MACs checkable.
11. **Item answers as JSON** (``answers``): ``GetItem``, ``Query``, ``Scan`` and ``BatchGetItem``
    answer with one ``json.dumps`` instead of moto's walk of the output shape.
12. **Scans** (``table_scan``): a ``Scan`` page of a table starts where the last one stopped
    instead of sorting and walking the whole table again (every segment too).
13. **Plain scans in one pass** (``scan_answers``): a ``Scan`` with no filter, projection or
    index measures and encodes each item once, with moto's page limits and answer.
14. **Item lookup** (``item_lookup``): an item of a table without a sort key is found with one
    dictionary lookup instead of a membership test and a read (two hashes of the key).
15. **Attribute values** (``dynamo_values``): strings, binaries, booleans and numbers, every key
    Rebound has, are built, hashed, compared and measured without moto's chain of type questions.
16. **Projections** (``projections``): an item projected onto top-level attributes converts only
    those, not every attribute of the item.
17. **Write checks** (``write_checks``): the type and key-size checks of each item written pass
    over the attributes and keys that cannot fail them.
18. **SSM without EC2** (``ssm_import``): moto's SSM models load moto's EC2 models only when a
    Run Command needs them.
19. **Result items** (``result_items``): the items a read returns are measured and converted to
    their answer without a call per string or number.
20. **AppConfig deployments and AppConfigData** (``appconfig_service``): environments,
    deployment strategies and deployments, and the configuration sessions the feature flags
    are read through, which moto lacks.
"""

from __future__ import annotations

from typing import Any

from rebound_local.motopatch.answers import _patch_answers
from rebound_local.motopatch.appconfig_service import _patch_appconfig_service
from rebound_local.motopatch.clock import _patch_clock, _unix_time, _unix_time_millis, set_clock
from rebound_local.motopatch.dynamo_values import _patch_dynamo_values
from rebound_local.motopatch.event_routing import _patch_event_routing
from rebound_local.motopatch.item_lookup import _patch_item_lookup
from rebound_local.motopatch.kms_material import LOCAL_AUDIT_KEY, _patch_kms_material
from rebound_local.motopatch.lock import LOCK, _patch_lock
from rebound_local.motopatch.parsing import _RECEIPTS, ITEM_SIZE_LIMIT, KEPT_RECEIPT_HANDLES, _patch_parsing
from rebound_local.motopatch.projections import _patch_projections
from rebound_local.motopatch.query_index import INDEX_VIEW, _index_of, _patch_query_index
from rebound_local.motopatch.result_items import _patch_result_items
from rebound_local.motopatch.scan_answers import _patch_scan_answers
from rebound_local.motopatch.scheduler_versions import _patch_scheduler_versions, versions
from rebound_local.motopatch.sqs_ledger import _patch_sqs_ledger, track_messages
from rebound_local.motopatch.sqs_retention import _patch_sqs_retention
from rebound_local.motopatch.ssm_import import _patch_ssm_import
from rebound_local.motopatch.table_scan import _patch_table_scan
from rebound_local.motopatch.transactions import _key_values, _patch_transactions
from rebound_local.motopatch.write_checks import _patch_write_checks

__all__ = [
    "INDEX_VIEW",
    "ITEM_SIZE_LIMIT",
    "KEPT_RECEIPT_HANDLES",
    "LOCAL_AUDIT_KEY",
    "LOCK",
    "_RECEIPTS",
    "_index_of",
    "_key_values",
    "_unix_time",
    "_unix_time_millis",
    "install",
    "set_clock",
    "track_messages",
    "versions",
]

_state: dict[str, Any] = {"installed": False}


def install() -> None:
    """Apply the patches once per process. Safe to call again."""
    with LOCK:
        if _state["installed"]:
            return
        _patch_clock()
        _patch_lock()
        _patch_transactions()
        _patch_sqs_retention()
        _patch_scheduler_versions()
        _patch_query_index()
        _patch_parsing()
        _patch_sqs_ledger()
        _patch_event_routing()
        _patch_kms_material()
        _patch_answers()
        _patch_table_scan()
        _patch_scan_answers()
        _patch_item_lookup()
        _patch_dynamo_values()
        _patch_projections()
        _patch_write_checks()
        _patch_ssm_import()
        _patch_result_items()
        _patch_appconfig_service()
        _state["installed"] = True
    from rebound_local import changes, hostile, streams

    hostile.install()  # faults inside moto; they pass through until activated
    streams.install()
    changes.install()
