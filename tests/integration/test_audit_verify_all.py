"""``rebound audit verify --all`` reads the audit table in parallel scan segments and reaches the
same verdicts as verifying each subject on its own: intact chains, a broken chain, a run whose
stored item differs from its trail. An auditor, with the day keys a writer exported and no
GenerateMac, reaches the same verdicts."""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from rebound.adapters.audit_keys import VerifyingAuditKeys, day_keys_document, read_day_keys
from rebound.adapters.dynamo import from_item, to_item
from rebound.adapters.dynamo.codec import pack_doc, unpack_doc
from rebound.domain.audit import GENESIS, record_hash
from rebound.domain.audit_record import AuditRecord
from rebound.domain.errors import OperationalError, ValidationFailed
from rebound.engine.deps import Deps
from rebound.ops.audit import MAX_EXPORTED_DAYS, AuditOps
from support import START, new_run, task

pytestmark = pytest.mark.integration


def populate(deps: Deps, runs: int) -> None:
    """``runs`` runs, each with its trail, a message's trail of two records, and a task's."""
    for n in range(runs):
        new_run(deps, f"r{n:02d}")
    for _ in range(2):
        uow = deps.store.unit_of_work("executor", START)
        uow.append_audit("msg#m1", action="refused")
        uow.commit()
    deps.store.save_task(task("job"), previous=None, actor="ops", at=START, action="registered")


def test_the_segmented_pass_agrees_with_verifying_each_subject(deps: Deps) -> None:
    populate(deps, 15)
    ops = AuditOps(deps)
    seen = []
    totals: list[int] = []
    results = ops.verify_all(progress=seen.append, segments=4, on_total=totals.append)
    assert [r.subject for r in results] == ops.subjects() and totals == [len(results)]
    assert sorted(seen, key=lambda r: r.subject) == results  # each heard once, as it was decided
    assert results == [ops.verify(subject) for subject in ops.subjects()]
    assert all(r.ok for r in results)


def test_a_broken_chain_and_a_run_that_differs_from_its_trail_are_reported(
    deps: Deps, aws: boto3.session.Session
) -> None:
    populate(deps, 6)
    table = deps.settings.table("audit")
    client = aws.client("dynamodb")
    client.delete_item(TableName=table, Key={"subject": {"S": "msg#m1"}, "seq": {"N": "1"}})
    runs = aws.client("dynamodb")
    item = runs.get_item(TableName=deps.settings.table("runs"), Key={"run_id": {"S": "r04"}})["Item"]
    item["task_id"] = {"S": "someone-else"}  # written without its audit record
    runs.put_item(TableName=deps.settings.table("runs"), Item=item)

    results = {r.subject: r for r in AuditOps(deps).verify_all(segments=3)}
    assert not results["msg#m1"].ok and not results["run#r04"].ok
    assert "task_id" in results["run#r04"].mismatched
    assert sum(1 for r in results.values() if not r.ok) == 2


def pages_of_two(deps: Deps, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every scan of ``deps``' store answers pages of two items; the list of their sizes."""
    scan = deps.store.client.scan  # type: ignore[attr-defined]
    pages: list[int] = []

    def small_pages(**kwargs: object) -> object:
        answer = scan(**{**kwargs, "Limit": 2})
        pages.append(len(answer["Items"]))
        return answer

    monkeypatch.setattr(deps.store.client, "scan", small_pages)  # type: ignore[attr-defined]
    return pages


def test_chains_split_across_scan_pages_verify_and_a_tampered_one_is_still_caught(
    deps: Deps, aws: boto3.session.Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pages of two items: every chain of more than two records, and the runs, arrive over
    several pages of their segment, and a segment's pages end mid-chain."""
    populate(deps, 6)
    for n in range(3):  # msg#long gets a chain of three records
        uow = deps.store.unit_of_work("executor", START)
        uow.append_audit("msg#long", action="noted", evidence={"n": n})
        uow.commit()
    pages = pages_of_two(deps, monkeypatch)
    ops = AuditOps(deps)
    results = ops.verify_all(segments=2)
    assert len(pages) > len(results) // 2 and max(pages) == 2
    assert results == [ops.verify(subject) for subject in ops.subjects()] and all(r.ok for r in results)
    assert next(r for r in results if r.subject == "msg#long").records == 3

    client = aws.client("dynamodb")
    table = deps.settings.table("audit")
    key = {"subject": {"S": "msg#long"}, "seq": {"N": "2"}}
    item = client.get_item(TableName=table, Key=key)["Item"]
    stored = item["doc"].get("S") or unpack_doc(item["doc"]["B"])  # deflated when that is smaller
    altered = pack_doc(stored.replace('"n":1', '"n":7'))
    doc = {"B": altered} if isinstance(altered, bytes) else {"S": altered}
    client.put_item(TableName=table, Item={**item, "doc": doc})
    broken = {r.subject: r for r in ops.verify_all(segments=2)}["msg#long"]
    assert not broken.ok and "seq 2 was altered" in broken.detail


def auditor_keys(deps: Deps, aws: boto3.session.Session) -> VerifyingAuditKeys:
    """An auditor's keys: the day keys the writer (``deps``) exported, on a KMS client that
    refuses GenerateMac as the auditor role's key policy does."""
    kms = aws.client("kms")

    def refuse(model: Any, **_: Any) -> None:
        raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "auditor"}}, model.name)

    kms.meta.events.register("before-call.kms.GenerateMac", refuse)
    today = deps.clock.now().date()
    labels = AuditOps(deps).day_labels(today - timedelta(days=1), today)
    document = day_keys_document(deps.store.audit_keys, labels)
    return VerifyingAuditKeys(kms, deps.store.audit_keys.key_id, read_day_keys(document, "keys.json"))


def test_an_auditor_reaches_the_writers_verdicts_and_catches_a_rekeyed_hash(
    deps: Deps, aws: boto3.session.Session
) -> None:
    """With the writer's exported day keys and no GenerateMac, ``verify_all`` gives the same
    verdicts as the writer's; a record edited with its hash recomputed (its old MAC kept) fails
    its MAC for the auditor too."""
    populate(deps, 4)
    auditor = AuditOps(deps, auditor_keys(deps, aws))
    assert auditor.verify_all(segments=2) == AuditOps(deps).verify_all(segments=2)

    table = deps.settings.table("audit")
    client = aws.client("dynamodb")
    key = to_item({"subject": "msg#m1", "seq": 2})
    record = from_item(client.get_item(TableName=table, Key=key)["Item"])
    record["action"] = "accepted"
    record["hash"] = record_hash(AuditRecord.model_validate(record).model_dump(mode="json"))  # not the MAC
    client.put_item(TableName=table, Item=to_item(record, "audit"))
    result = auditor.verify("msg#m1")
    assert not result.ok and "seq 2 has a MAC that does not verify" in result.detail


@pytest.mark.parametrize(
    ("since", "until", "key_path", "problem"),
    [
        (START.date(), START.date() + timedelta(days=1), "until", "after today"),
        (START.date(), START.date() - timedelta(days=1), "since", "is after until"),
        (START.date() - timedelta(days=MAX_EXPORTED_DAYS), START.date(), "since", "at most"),
    ],
)
def test_day_keys_are_exported_for_past_days_only_and_a_bounded_range(
    deps: Deps, since: date, until: date, key_path: str, problem: str
) -> None:
    assert deps.clock.now().date() == START.date()
    with pytest.raises(ValidationFailed, match=problem) as err:
        AuditOps(deps).day_labels(since, until)
    assert err.value.details["key_path"] == key_path


def unkeyed(record: dict[str, Any], prev_hash: str) -> dict[str, Any]:
    """``record`` as one written before the chain was keyed (or by someone without the key):
    no MAC, its hash recomputed after ``prev_hash``."""
    fields = {**record, "prev_hash": prev_hash, "mac_alg": None, "mac_key": None, "mac": None}
    fields["hash"] = record_hash(AuditRecord.model_validate(fields).model_dump(mode="json"))
    return fields


@pytest.mark.parametrize("segments", [2, 3])
def test_each_kind_of_tampering_is_caught_page_by_page_with_the_single_checks_words(
    deps: Deps, aws: boto3.session.Session, monkeypatch: pytest.MonkeyPatch, segments: int
) -> None:
    """Pages of two items, so trails and runs arrive a page at a time, a run's chain before or
    after its item: an edited record, a run that differs from its trail, a run whose item is gone,
    an unkeyed record after keyed ones, and an older chain wholly unkeyed are each reported as
    verifying the subject alone reports them; every other subject verifies."""
    populate(deps, 8)
    client = aws.client("dynamodb")
    audit, runs = deps.settings.table("audit"), deps.settings.table("runs")

    def record(subject: str, seq: int) -> dict[str, Any]:
        return from_item(
            client.get_item(TableName=audit, Key=to_item({"subject": subject, "seq": seq}))["Item"]
        )

    edited = record("run#r01", 1)
    client.put_item(TableName=audit, Item=to_item({**edited, "actor": "mallory"}, "audit"))
    run = client.get_item(TableName=runs, Key={"run_id": {"S": "r02"}})["Item"]
    client.put_item(TableName=runs, Item={**run, "state": {"S": "succeeded"}})  # without a record
    client.delete_item(TableName=runs, Key={"run_id": {"S": "r03"}})
    last = record("msg#m1", 2)
    inserted = unkeyed({**last, "seq": 3, "action": "accepted"}, last["hash"])
    client.put_item(TableName=audit, Item=to_item(inserted, "audit"))
    prev = GENESIS
    for seq in (1, 2):  # task#old: a chain of two written before chains were keyed
        older = unkeyed(record("msg#m1", seq) | {"subject": "task#old"}, prev)
        client.put_item(TableName=audit, Item=to_item(older, "audit"))
        prev = older["hash"]

    pages = pages_of_two(deps, monkeypatch)
    ops = AuditOps(deps)
    results = {r.subject: r for r in ops.verify_all(segments=segments)}
    assert max(pages) == 2 and len(pages) > len(results) // 2
    assert list(results.values()) == [ops.verify(subject) for subject in ops.subjects()]
    assert "seq 1 was altered" in results["run#r01"].detail
    assert results["run#r02"].mismatched == ["state"]
    assert "the run does not" in results["run#r03"].detail
    assert "seq 3 is unkeyed after keyed records" in results["msg#m1"].detail
    old = results["task#old"]
    assert old.ok and old.keying == "unkeyed" and old.unkeyed == 2
    assert {s for s, r in results.items() if not r.ok} == {"run#r01", "run#r02", "run#r03", "msg#m1"}


def test_a_subject_a_scan_hands_back_apart_fails_the_pass_instead_of_judging_half_a_chain(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A segment's trail is taken as whole once a page shows the next subject. A store that broke
    that (a subject's records again after another subject's) would have half a chain judged:
    the pass stops with an error naming the subject instead."""
    populate(deps, 3)
    scan = deps.store.client.scan  # type: ignore[attr-defined]
    audit = deps.settings.table("audit")

    first: list[Any] = []

    def apart(**kwargs: Any) -> Any:
        answer = scan(**{**kwargs, "Limit": 2})
        if kwargs["TableName"] == audit:
            first.extend(answer["Items"][:1] if not first else [])
            if "LastEvaluatedKey" not in answer:  # the last page: the first subject once more
                answer["Items"].append(first[0])
        return answer

    monkeypatch.setattr(deps.store.client, "scan", apart)  # type: ignore[attr-defined]
    with pytest.raises(OperationalError, match="came back apart"):
        AuditOps(deps).verify_all(segments=1)


def test_the_first_page_is_checked_before_any_other_segment_is_asked_for(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checking the first page derives the day keys its records need (KMS) while the store
    answers nothing else; only then are the other segments read."""
    populate(deps, 6)
    events: list[str] = []
    store, keys = deps.store, deps.store.audit_keys

    def reading(kind: str, read: Any) -> Any:
        def segment(n: int, *args: Any) -> Any:
            events.append(f"{kind} {n}")
            yield from read(n, *args)

        return segment

    check = keys.check

    def checking(*args: Any) -> bool:
        events.append("check")
        return check(*args)

    monkeypatch.setattr(store, "audit_segment_parts", reading("audit", store.audit_segment_parts))
    monkeypatch.setattr(store, "runs_segment_parts", reading("runs", store.runs_segment_parts))
    monkeypatch.setattr(keys, "check", checking)
    results = AuditOps(deps).verify_all(segments=2)
    assert all(r.ok for r in results)
    assert events[:2] == ["audit 0", "check"]
    assert sorted(e for e in events if e != "check") == ["audit 0", "audit 1", "runs 0", "runs 1"]
