"""The moto patches give the guarantees Rebound relies on from DynamoDB and SQS."""

from __future__ import annotations

import random
import threading
from datetime import timedelta
from itertools import product
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from rebound.settings import Settings

pytestmark = pytest.mark.integration


def test_a_transaction_with_one_failing_condition_writes_nothing(
    aws: boto3.session.Session, settings: Settings
) -> None:
    ddb = aws.client("dynamodb")
    runs, outbox = settings.table("runs"), settings.table("outbox")
    ddb.put_item(TableName=runs, Item={"run_id": {"S": "a"}, "audit_seq": {"N": "1"}})
    with pytest.raises(ClientError) as err:
        ddb.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": outbox, "Item": {"event_id": {"S": "e1"}}}},
                {
                    "Put": {
                        "TableName": runs,
                        "Item": {"run_id": {"S": "a"}, "audit_seq": {"N": "2"}},
                        "ConditionExpression": "audit_seq = :s",
                        "ExpressionAttributeValues": {":s": {"N": "9"}},
                    }
                },
            ]
        )
    reasons = [r["Code"] for r in err.value.response["CancellationReasons"]]  # type: ignore[typeddict-item]
    assert reasons == ["None", "ConditionalCheckFailed"]
    assert ddb.scan(TableName=outbox)["Items"] == []
    from moto.dynamodb.models import dynamodb_backends

    shard = dynamodb_backends["123456789012"]["us-east-1"].get_table(outbox).stream_shard
    assert shard.items == []  # no event can leak out of the stream


def test_concurrent_conditional_creates_have_exactly_one_winner(
    aws: boto3.session.Session, settings: Settings
) -> None:
    ddb = aws.client("dynamodb")
    wins: list[int] = []
    start = threading.Barrier(8)

    def claim(i: int) -> None:
        start.wait()
        try:
            ddb.put_item(
                TableName=settings.table("control"),
                Item={"pk": {"S": "claim"}, "by": {"N": str(i)}},
                ConditionExpression="attribute_not_exists(pk)",
            )
            wins.append(i)
        except ClientError:
            pass

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1


def test_index_queries_match_a_full_scan_after_random_writes(
    aws: boto3.session.Session, settings: Settings
) -> None:
    ddb = aws.client("dynamodb")
    table = settings.table("runs")
    rng = random.Random(3)
    states = ["pending", "running", "failed", "succeeded"]
    for step in range(400):
        run_id = f"r{rng.randrange(60)}"
        action = rng.random()
        if action < 0.15:
            ddb.delete_item(TableName=table, Key={"run_id": {"S": run_id}})
        elif action < 0.3:
            ddb.update_item(
                TableName=table,
                Key={"run_id": {"S": run_id}},
                UpdateExpression="SET #s = :s",
                ExpressionAttributeNames={"#s": "state"},
                ExpressionAttributeValues={":s": {"S": rng.choice(states)}},
            )
        else:
            ddb.put_item(
                TableName=table,
                Item={
                    "run_id": {"S": run_id},
                    "state": {"S": rng.choice(states)},
                    "task_id": {"S": f"t{step % 3}"},
                    "updated_at": {"S": f"2026-03-07T{step:05d}"},
                    "scheduled_for": {"S": f"s{step:05d}"},
                },
            )
    everything = ddb.scan(TableName=table)["Items"]
    for state in states:
        expected = sorted(
            i["run_id"]["S"] for i in everything if i.get("state", {}).get("S") == state and "updated_at" in i
        )
        got = ddb.query(
            TableName=table,
            IndexName="by_state",
            KeyConditionExpression="#s = :s",
            ExpressionAttributeNames={"#s": "state"},
            ExpressionAttributeValues={":s": {"S": state}},
        )
        assert sorted(i["run_id"]["S"] for i in got["Items"]) == expected
    for task_id in ("t0", "t1", "t2"):
        expected = sorted(
            i["run_id"]["S"]
            for i in everything
            if i.get("task_id", {}).get("S") == task_id and "scheduled_for" in i
        )
        got = ddb.query(
            TableName=table,
            IndexName="by_task_keys",
            KeyConditionExpression="task_id = :t",
            ExpressionAttributeValues={":t": {"S": task_id}},
        )
        assert sorted(i["run_id"]["S"] for i in got["Items"]) == expected


def test_sqs_delays_follow_the_local_clock(
    aws: boto3.session.Session, settings: Settings, clock: object
) -> None:
    sqs = aws.client("sqs")
    url = settings.queue("execution").url
    sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=900)
    assert sqs.receive_message(QueueUrl=url).get("Messages", []) == []
    clock.advance(timedelta(seconds=899).total_seconds())  # type: ignore[attr-defined]
    assert sqs.receive_message(QueueUrl=url).get("Messages", []) == []
    clock.advance(2)  # type: ignore[attr-defined]
    assert [m["Body"] for m in sqs.receive_message(QueueUrl=url)["Messages"]] == ["later"]


def test_the_redrive_policy_moves_a_message_after_max_receive_count(
    aws: boto3.session.Session, settings: Settings, clock: object
) -> None:
    sqs = aws.client("sqs")
    url = settings.queue("execution").url
    sqs.send_message(QueueUrl=url, MessageBody="poison")
    for _ in range(5):
        [_msg] = sqs.receive_message(QueueUrl=url, VisibilityTimeout=1)["Messages"]
        clock.advance(2)  # type: ignore[attr-defined]
    assert sqs.receive_message(QueueUrl=url).get("Messages", []) == []
    [dead] = sqs.receive_message(QueueUrl=settings.queue("dlq").url)["Messages"]
    assert dead["Body"] == "poison"


def test_item_reads_answer_exactly_as_moto_s_serialiser_would(
    aws: boto3.session.Session, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rebound_local.motopatch import answers

    client = aws.client("dynamodb")
    table = settings.tables["control"]
    item = {
        "pk": {"S": "every-type"},
        "n": {"N": "12.50"},
        "b": {"B": b"\x00\xffbinary"},
        "ss": {"SS": ["a", "b"]},
        "ns": {"NS": ["1", "2.5"]},
        "bs": {"BS": [b"\x01", b"\x02"]},
        "m": {"M": {"inner": {"L": [{"S": "x"}, {"NULL": True}, {"BOOL": False}, {"B": b"\x03"}]}}},
    }
    client.put_item(TableName=table, Item=item)
    client.put_item(TableName=table, Item={"pk": {"S": "plain"}, "v": {"S": "ü"}})
    reads = {
        "get": lambda: client.get_item(TableName=table, Key={"pk": {"S": "every-type"}}, ConsistentRead=True),
        "missing": lambda: client.get_item(TableName=table, Key={"pk": {"S": "nothing"}}),
        "query": lambda: client.query(
            TableName=table,
            KeyConditionExpression="pk = :p",
            ExpressionAttributeValues={":p": {"S": "every-type"}},
            ReturnConsumedCapacity="TOTAL",
        ),
        "scan": lambda: client.scan(TableName=table, Limit=1),
        "batch": lambda: client.batch_get_item(
            RequestItems={table: {"Keys": [{"pk": {"S": "every-type"}}, {"pk": {"S": "plain"}}]}}
        ),
    }

    def answers_of() -> dict[str, object]:
        out = {}
        for name, read in reads.items():
            answer = read()
            answer.pop("ResponseMetadata")
            out[name] = answer
        return out

    encoded: list[str] = []
    encode = answers.encode
    monkeypatch.setattr(answers, "encode", lambda result: encoded.append("x") or encode(result))
    fast = answers_of()
    assert len(encoded) == len(reads)  # every read took the fast path
    monkeypatch.setattr(answers, "FAST", frozenset())
    generic = answers_of()

    assert fast == generic
    assert fast["get"]["Item"] == item  # type: ignore[index]


def test_every_scan_page_of_every_segment_is_the_one_moto_would_answer(
    aws: boto3.session.Session, settings: Settings
) -> None:
    """Patch 12 (``table_scan``): pages resumed by bisection give moto's own pages, on a table
    with a sort key (the audit table) and one without (the runs table), whole or in segments."""
    from moto.dynamodb.models import dynamodb_backends

    from rebound_local.motopatch import table_scan

    ddb = aws.client("dynamodb")
    rng = random.Random(7)
    audit, runs = settings.table("audit"), settings.table("runs")
    for n in range(60):
        subject = f"s{rng.randrange(25):02d}"
        ddb.put_item(
            TableName=audit, Item={"subject": {"S": subject}, "seq": {"N": str(rng.randrange(1, 40))}}
        )
        ddb.put_item(TableName=runs, Item={"run_id": {"S": f"r{rng.randrange(1000)}"}, "x": {"S": "y" * n}})
    backend = dynamodb_backends["123456789012"]["us-east-1"]
    moto_scan = table_scan.MOTO["scan"]

    def keys(items: list[object]) -> list[tuple[object, object]]:
        return [(i.hash_key, i.range_key) for i in items]  # type: ignore[attr-defined]

    compared = 0
    for name in (audit, runs):
        table = backend.get_table(name)
        for segments in ((None, None), (0, 3), (1, 3), (2, 3)):
            for limit in (1, 7, None):
                start = None
                while True:
                    patched = table.scan({}, limit, start, segments=segments)
                    expected = moto_scan(table, {}, limit, start, segments=segments)
                    assert keys(patched[0]) == keys(expected[0]) and patched[1:] == expected[1:]
                    compared += 1
                    start = patched[2]
                    if start is None:
                        break
                    start = {k: v.to_json() for k, v in start.items()}
    assert compared > 50


def test_plain_scans_answer_byte_for_byte_as_moto_while_items_change_between_pages(
    aws: boto3.session.Session, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Patch 13 (``scan_answers``): every page of a plain scan, whole or in segments, with and
    without ``Limit``, is the body moto answers, while items are updated in place (``UpdateItem``,
    and an edit of moto's item as the simulator's sabotage makes), deleted, replaced and added
    between pages; pages also end at the 1 MB limit (items of 150 KB)."""
    from moto.dynamodb.models import dynamodb_backends
    from moto.dynamodb.models.dynamo_type import DynamoType
    from moto.dynamodb.responses import DynamoHandler

    from rebound_local.motopatch import scan_answers

    ddb = aws.client("dynamodb")
    bodies: list[bytes] = []
    ddb.meta.events.register(
        "before-parse.dynamodb.Scan", lambda response_dict, **_: bodies.append(response_dict["body"])
    )
    rng = random.Random(13)
    audit, runs = settings.table("audit"), settings.table("runs")
    backend = dynamodb_backends["123456789012"]["us-east-1"]

    def item(key: dict[str, dict[str, object]], n: int) -> dict[str, dict[str, object]]:
        kinds: list[dict[str, object]] = [
            {"S": f"ü{n}" * rng.randrange(1, 4)},
            {"N": str(rng.choice([n, -n, n / 8]))},
            {"B": bytes([n % 256, 255, 0])},
            {"M": {"in": {"L": [{"S": "x"}, {"NULL": True}, {"BOOL": n % 2 == 0}, {"N": "1.50"}]}}},
            {"SS": [f"a{n}", "b"]},
            {"NS": ["1", str(n + 2)]},
            {"BS": [b"\x01", bytes([n % 256])]},
        ]
        attrs = {f"a{i}": kinds[i] for i in rng.sample(range(len(kinds)), rng.randrange(1, 5))}
        if n % 17 == 0:
            attrs["doc"] = {"S": "y" * 150_000}  # pages end at the 1 MB limit
        return {**key, **attrs}

    def audit_key(n: int) -> dict[str, dict[str, object]]:
        return {"subject": {"S": f"s{n % 23:02d}"}, "seq": {"N": str(n)}}

    def run_key(n: int) -> dict[str, dict[str, object]]:
        return {"run_id": {"S": f"r{n}"}}

    for n in range(120):
        ddb.put_item(TableName=audit, Item=item(audit_key(n), n))
        ddb.put_item(TableName=runs, Item=item(run_key(n), n))

    def change(table: str, key_of: object, step: int) -> None:
        n = rng.randrange(200)
        key = key_of(n)  # type: ignore[operator]
        what = step % 5
        if what == 0:
            ddb.update_item(
                TableName=table,
                Key=key,
                UpdateExpression="SET a0 = :v, big = :b",
                ExpressionAttributeValues={
                    ":v": {"S": f"updated {step}"},
                    ":b": {"S": "z" * rng.randrange(9)},
                },
            )
        elif what == 1:
            ddb.delete_item(TableName=table, Key=key)
        elif what == 2:
            ddb.put_item(TableName=table, Item=item(key, n + step))  # replaced (or added)
        elif what == 3:  # edited in place, as the simulator's sabotage edits a record
            for held in backend.get_table(table).items.values():
                for stored in held.values() if isinstance(held, dict) else [held]:
                    stored.attrs["a1"] = DynamoType({"S": f"tampered {step}"})
                    break
                break
        else:
            ddb.put_item(TableName=table, Item=item(key_of(1000 + step), step))  # type: ignore[operator]

    fast_scan = DynamoHandler.scan
    compared = 0
    step = 0
    for table, key_of in ((audit, audit_key), (runs, run_key)):
        cases = [*product(((None, None), (0, 3), (2, 3)), (None, 5)), ((2, 3), 1)]
        for segments, limit in cases:
            kwargs: dict[str, object] = {"TableName": table, "ConsistentRead": True}
            if segments[0] is not None:
                kwargs.update(Segment=segments[0], TotalSegments=segments[1])
            if limit:
                kwargs["Limit"] = limit
            while True:
                bodies.clear()
                monkeypatch.setattr(DynamoHandler, "scan", fast_scan)
                answer = ddb.scan(**kwargs)  # type: ignore[arg-type]
                monkeypatch.setattr(DynamoHandler, "scan", scan_answers.MOTO["scan"])
                ddb.scan(**kwargs)  # type: ignore[arg-type]
                assert len(bodies) == 2 and bodies[0] == bodies[1], (table, segments, limit, compared)
                compared += 1
                step += 1
                change(table, key_of, step)
                if "LastEvaluatedKey" not in answer:
                    break
                kwargs["ExclusiveStartKey"] = answer["LastEvaluatedKey"]
    assert compared > 60

    # A page that is exactly 1 MB: moto's measure of every type, to the byte, decides its end.
    control = settings.table("control")
    for n in range(9):
        ddb.put_item(
            TableName=control, Item={**item({"pk": {"S": f"p{n:02d}"}}, n), "pad": {"S": "é" * 40_000}}
        )
    control_table = backend.get_table(control)
    sizes = sum(control_table.items[DynamoType({"S": f"p{n:02d}"})].size() for n in range(9))
    filler = 1_000_000 - sizes - len("pk") - len("p09") - len("f")
    ddb.put_item(TableName=control, Item={"pk": {"S": "p09"}, "f": {"S": "x" * filler}})
    ddb.put_item(TableName=control, Item={"pk": {"S": "p10"}})
    bodies.clear()
    monkeypatch.setattr(DynamoHandler, "scan", fast_scan)
    page = ddb.scan(TableName=control)
    assert page["Count"] == 10
    monkeypatch.setattr(DynamoHandler, "scan", scan_answers.MOTO["scan"])
    ddb.scan(TableName=control)
    assert bodies[0] == bodies[1]

    # The fast path was taken: without it the answers differ in nothing but in how long they took.
    monkeypatch.setattr(DynamoHandler, "scan", fast_scan)
    calls: list[int] = []
    answer_form = scan_answers._answer_form
    monkeypatch.setattr(scan_answers, "_answer_form", lambda *a: calls.append(1) or answer_form(*a))
    count = ddb.scan(TableName=runs)["Count"]
    assert 0 < count <= len(calls) <= count + 1  # and the first item the page had no room for


def test_xml_answers_still_carry_their_request_id_and_json_answers_their_header(
    aws: boto3.session.Session,
) -> None:
    """Patch 13 skips moto's search of a JSON answer for an XML ``<RequestId>``; an XML answer
    still gets the request id of its header filled into its body."""
    iam = aws.client("iam")
    iam.create_role(RoleName="r13", AssumeRolePolicyDocument="{}")
    meta = iam.get_role(RoleName="r13")["ResponseMetadata"]
    assert meta["RequestId"] == meta["HTTPHeaders"]["x-amzn-requestid"] != ""
    json_meta = aws.client("dynamodb").list_tables()["ResponseMetadata"]
    assert json_meta["RequestId"] == json_meta["HTTPHeaders"]["x-amzn-requestid"] != ""


ATTRIBUTE_VALUES = [
    {"S": "run#1"},
    {"S": ""},
    {"S": "né"},
    {"B": "AP8="},
    {"N": "12.50"},
    {"N": "12.5"},
    {"N": "-3"},
    {"B": b"\x00\xff"},
    {"BOOL": True},
    {"BOOL": False},
    {"NULL": True},
    {"SS": ["a", "b"]},
    {"NS": ["1", "2.5"]},
    {"BS": [b"\x01", b"\x02"]},
    {"L": [{"S": "x"}, {"N": "1"}, {"NULL": True}]},
    {"M": {"inner": {"L": [{"S": "x"}, {"BOOL": False}]}, "n": {"N": "7"}}},
]


def test_attribute_values_hash_compare_and_build_as_moto_s_own_code_does(
    aws: boto3.session.Session,
) -> None:
    from moto.dynamodb.models.dynamo_type import DynamoType

    from rebound_local.motopatch import dynamo_values

    moto = dynamo_values.MOTO
    assert set(moto) == {"cast_value", "__hash__", "__eq__", "__ne__", "__init__", "size"}
    assert DynamoType.__hash__ is not moto["__hash__"]  # the patch is in place

    def built_by_moto(raw: object) -> DynamoType:
        value = DynamoType.__new__(DynamoType)
        moto["__init__"](value, raw)
        return value

    def shape(value: DynamoType) -> object:
        inner = value.value
        if isinstance(inner, list):
            inner = [shape(v) if isinstance(v, DynamoType) else v for v in inner]
        elif isinstance(inner, dict):
            inner = {k: shape(v) for k, v in inner.items()}
        return (value.type, inner)

    values = [DynamoType(raw) for raw in ATTRIBUTE_VALUES]
    for raw, value in zip(ATTRIBUTE_VALUES, values, strict=True):
        reference = built_by_moto(raw)
        assert shape(value) == shape(reference)
        assert shape(DynamoType(value)) == shape(built_by_moto(reference))
        assert value.cast_value == moto["cast_value"](reference)
        assert value.size() == moto["size"](reference)
        if value.type not in ("SS", "NS", "BS", "L", "M"):  # unhashable casts raise in both
            assert hash(value) == moto["__hash__"](reference)
    for a in values:
        for b in values:
            assert (a == b) == moto["__eq__"](a, b), (a.to_json(), b.to_json())
            assert (a != b) == moto["__ne__"](a, b), (a.to_json(), b.to_json())
    assert DynamoType({"N": "12.50"}) == DynamoType({"N": "12.5"})  # numbers compare as numbers
    assert DynamoType({"S": "a"}) < DynamoType({"S": "b"})
    with pytest.raises(IndexError):
        DynamoType({})


def test_projections_onto_top_level_names_answer_as_moto_s_own_code_does(
    aws: boto3.session.Session,
) -> None:
    from moto.dynamodb.models.dynamo_type import DynamoType, Item

    from rebound_local.motopatch import projections

    moto_project = projections.MOTO["project"]
    assert Item.project is not moto_project  # the patch is in place

    def shape(item: Item) -> object:
        return {name: value.to_json() for name, value in item.attrs.items()}

    attrs = {f"a{index}": raw for index, raw in enumerate(ATTRIBUTE_VALUES)}
    attrs |= {"n1": {"N": "1E+2"}, "n2": {"N": "0.10"}, "n3": {"N": "-0"}}
    item = Item(hash_key=DynamoType({"S": "k"}), range_key=None, attrs={"k": {"S": "k"}, **attrs})
    names = [[name] for name in ("k", *attrs)]
    paths = [
        *([path] for path in names),  # each attribute alone
        names,  # all of them
        [["k"], ["k"]],  # one named twice
        [["missing"]],  # none of them
        [["k"], ["missing"], ["a14"]],
        [["a15", "inner"]],  # nested: moto's own code
        [["a14[1]"]],  # indexed: moto's own code
        [["k"], ["a15", "n"]],
    ]
    for projection in paths:
        patched, reference = item.project(projection), moto_project(item, projection)
        assert shape(patched) == shape(reference), projection
        assert (patched.hash_key, patched.range_key) == (reference.hash_key, reference.range_key)


def test_receipt_handles_have_moto_s_shape_and_follow_the_seed(aws: boto3.session.Session) -> None:
    import re
    import string

    import moto.sqs.models as sqs_models
    from moto.moto_api._internal import mock_random

    def draw() -> list[str]:
        mock_random.seed(5)
        return [sqs_models.generate_receipt_handle() for _ in range(50)]  # type: ignore[attr-defined]

    handles = draw()
    assert all(re.fullmatch("[a-z]{185}", handle) for handle in handles)
    assert len(set(handles)) == 50
    assert set("".join(handles)) == set(string.ascii_lowercase)
    assert draw() == handles  # a scenario's seed decides them
    sqs = aws.client("sqs")
    url = sqs.create_queue(QueueName="handles")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="x")
    [message] = sqs.receive_message(QueueUrl=url)["Messages"]
    assert re.fullmatch("[a-z]{185}", message["ReceiptHandle"])
    sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    assert sqs.receive_message(QueueUrl=url, VisibilityTimeout=0).get("Messages", []) == []


def test_an_item_lookup_finds_the_very_item_moto_s_own_lookup_finds(
    aws: boto3.session.Session, settings: Settings
) -> None:
    """Patch 14 (``item_lookup``): one dictionary lookup for a table without a sort key (the runs
    table), moto's own code for one with a sort key (the audit table); the same item objects,
    present or missing, whole or projected."""
    from moto.dynamodb.models import dynamodb_backends
    from moto.dynamodb.models.dynamo_type import DynamoType
    from moto.dynamodb.models.table import Table

    from rebound_local.motopatch import item_lookup

    moto_get_item = item_lookup.MOTO["get_item"]
    assert Table.get_item is not moto_get_item  # the patch is in place
    ddb = aws.client("dynamodb")
    runs, audit = settings.table("runs"), settings.table("audit")
    for n in range(5):
        ddb.put_item(
            TableName=runs, Item={"run_id": {"S": f"r{n}"}, "state": {"S": "ok"}, "n": {"N": str(n)}}
        )
        ddb.put_item(TableName=audit, Item={"subject": {"S": "run#r1"}, "seq": {"N": str(n)}})
    backend = dynamodb_backends["123456789012"]["us-east-1"]
    table, trail = backend.get_table(runs), backend.get_table(audit)
    compared = 0
    for key in ("r0", "r4", "missing", ""):
        for projection in (None, [["state"]]):
            found = table.get_item(DynamoType({"S": key}), None, projection)
            expected = moto_get_item(table, DynamoType({"S": key}), None, projection)
            if projection is None:
                assert found is expected
            else:
                assert (found and found.to_json()) == (expected and expected.to_json())
            compared += found is not None
    assert compared == 4  # r0 and r4, whole and projected
    for seq in ("0", "3", "9"):
        got = trail.get_item(DynamoType({"S": "run#r1"}), DynamoType({"N": seq}))
        assert got is moto_get_item(trail, DynamoType({"S": "run#r1"}), DynamoType({"N": seq}))
    with pytest.raises(Exception, match="range key"):
        trail.get_item(DynamoType({"S": "run#r1"}))
    assert ddb.get_item(TableName=runs, Key={"run_id": {"S": "r4"}})["Item"]["n"] == {"N": "4"}


def _outcome(check: object, *args: object) -> tuple[str, str] | None:
    try:
        check(*args)  # type: ignore[operator]
    except Exception as exc:
        return type(exc).__name__, str(exc)
    return None


KEY_TEXTS = ("a" * 2048, "a" * 2049, "a" * 1024, "a" * 1025, "é" * 512, "é" * 1025, "𝄞" * 512, "𝄞" * 513, "x")
"""Keys at and just over DynamoDB's limits (2,048 bytes for a partition key, 1,024 for a sort key)
in 1-, 2- and 4-byte characters."""


def test_write_checks_pass_and_fail_the_items_moto_s_own_checks_do(
    aws: boto3.session.Session, settings: Settings
) -> None:
    """Patch 17 (``write_checks``): the type check and the key-size check give every item the
    same verdict and the same error as moto's own, fast path or not."""
    from moto.dynamodb.models import dynamodb_backends
    from moto.dynamodb.models.table import Table

    from rebound_local.motopatch import write_checks

    moto_types = write_checks.MOTO["_validate_item_types"]
    moto_sizes = write_checks.MOTO["_validate_key_sizes"]
    assert Table._validate_item_types is not moto_types  # the patch is in place
    backend = dynamodb_backends["123456789012"]["us-east-1"]
    runs, audit = backend.get_table(settings.table("runs")), backend.get_table(settings.table("audit"))
    assert runs.global_indexes  # its index keys are measured too

    odd_values = [
        {"N": "abc"},
        {"N": " 1"},
        {"N": "1e200"},
        {"N": "1e-200"},
        {"N": "9" * 38},
        {"N": "9" * 39},
        {"N": "٣"},  # a digit, but not ASCII
        {"N": "inf"},
        {"N": 5},
        {"N": 1.5},
        {"S": 5},
        {"S": {"S": "x"}},
        {"BOOL": "yes"},
        {"NULL": False},
        {"NULL": True},
        {"M": {"N": {"N": "x"}}},
        {"L": [{"N": "1e300"}]},
        {},
    ]
    values = [*ATTRIBUTE_VALUES, *odd_values]
    failures = 0
    for table in (runs, audit):
        for name in ("plain", "N", "S", "NULL", "BOOL", runs.hash_key_attr):
            for value in values:
                item = {"run_id": {"S": "r1"}, "subject": {"S": "run#r1"}, "seq": {"N": "1"}, name: value}
                verdict = _outcome(table._validate_item_types, item)
                assert verdict == _outcome(moto_types, table, item), (name, value)
                failures += verdict is not None
    assert failures > 20  # the odd values do fail

    too_long = 0
    for table, key_names in ((runs, runs.hash_key_names + runs.range_key_names), (audit, ["subject", "seq"])):
        for name in key_names:
            for text in KEY_TEXTS:
                for value in ({"S": text}, {"B": text.encode()}, {"N": "1" * 38}, {}):
                    item = {name: value}
                    verdict = _outcome(table._validate_key_sizes, item)
                    assert verdict == _outcome(moto_sizes, table, item), (table.name, name, value)
                    too_long += verdict is not None
    assert too_long > 10
    ddb = aws.client("dynamodb")
    with pytest.raises(ClientError, match="Size of hashkey"):
        ddb.put_item(TableName=runs.name, Item={"run_id": {"S": "r" * 2049}})
    with pytest.raises(ClientError, match="numeric value"):
        ddb.put_item(TableName=runs.name, Item={"run_id": {"S": "r"}, "n": {"N": "one"}})
    # An index created later has its key measured from then on.
    ddb.create_table(
        TableName="later-index",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    ddb.put_item(TableName="later-index", Item={"pk": {"S": "a"}, "g": {"S": "g" * 3000}})
    ddb.update_table(
        TableName="later-index",
        AttributeDefinitions=[{"AttributeName": "g", "AttributeType": "S"}],
        GlobalSecondaryIndexUpdates=[
            {
                "Create": {
                    "IndexName": "by_g",
                    "KeySchema": [{"AttributeName": "g", "KeyType": "HASH"}],
                    "Projection": {"ProjectionType": "KEYS_ONLY"},
                }
            }
        ],
    )
    with pytest.raises(ClientError, match="Size of hashkey"):
        ddb.put_item(TableName="later-index", Item={"pk": {"S": "b"}, "g": {"S": "g" * 3000}})


SSM_WITHOUT_EC2 = """
import sys
import boto3
from moto import mock_aws
import rebound_local.motopatch as motopatch
motopatch.install()
assert "moto.ssm.models" in sys.modules and "moto.ec2" not in sys.modules, "installed: SSM, not EC2"
with mock_aws():
    ssm = boto3.client("ssm", region_name="us-east-1")
    ssm.put_parameter(Name="/rebound/p", Value="v", Type="String")
    assert ssm.get_parameter(Name="/rebound/p")["Parameter"]["Value"] == "v"
    assert "moto.ec2" not in sys.modules, "parameters do not need EC2"
    ec2 = boto3.client("ec2", region_name="us-east-1")
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    tags = [{"ResourceType": "instance", "Tags": [{"Key": "Name", "Value": "web"}]}]
    [instance] = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, TagSpecifications=tags)["Instances"]
    command = ssm.send_command(
        Targets=[{"Key": "tag:Name", "Values": ["web"]}],
        DocumentName="AWS-RunShellScript",
        Parameters={"commands": ["true"]},
    )["Command"]
    assert command["TargetCount"] == 1, command
    found = ssm.get_command_invocation(CommandId=command["CommandId"], InstanceId=instance["InstanceId"])
    assert found["InstanceId"] == instance["InstanceId"]
print("ok")
"""


def test_ssm_loads_moto_s_ec2_only_when_a_run_command_targets_instances() -> None:
    """Patch 18 (``ssm_import``), in a fresh interpreter: installing the patches imports moto's
    SSM but not its EC2; parameters work without it; a Run Command that targets instances by tag
    loads it and finds them."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", SSM_WITHOUT_EC2], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"


def test_result_items_are_measured_and_converted_as_moto_s_own_code_does(
    aws: boto3.session.Session, settings: Settings
) -> None:
    """Patch 19 (``result_items``): an item's size and the answer form of a read's result are
    moto's own, for attribute values of every type, names and strings beyond ASCII included."""
    from datetime import UTC, datetime

    import moto.dynamodb.responses as responses
    from moto.dynamodb.models.dynamo_type import DynamoType, Item

    from rebound_local.motopatch import result_items

    moto_size, moto_to_dict = result_items.MOTO["size"], result_items.MOTO["dynamo_to_dict"]
    assert Item.size is not moto_size and responses.dynamo_to_dict is not moto_to_dict  # in place
    attrs = {f"a{index}": raw for index, raw in enumerate(ATTRIBUTE_VALUES)}
    attrs |= {"naïve": {"S": "ascii"}, "plain": {"S": "crème brûlée"}, "n": {"N": "-0.50"}}
    items = [
        Item(hash_key=DynamoType({"S": "k"}), range_key=None, attrs={"k": {"S": "k"}, **attrs}),
        Item(hash_key=DynamoType({"S": "k2"}), range_key=None, attrs={"k": {"S": "k2"}}),
    ]
    for item in items:
        assert item.size() == moto_size(item)
    result = {
        "Count": 2,
        "Items": [item.attrs for item in items],
        "LastEvaluatedKey": {"k": DynamoType({"S": "k2"})},
        "When": datetime(2026, 1, 1, tzinfo=UTC),
        "Nested": [{"inner": DynamoType({"N": "3"})}, items[1]],
    }
    assert responses.dynamo_to_dict(result) == moto_to_dict(result)
    assert responses.dynamo_to_dict(items[0].attrs)["a7"] == {"B": b"\x00\xff"}  # bytes stay bytes
    ddb = aws.client("dynamodb")
    runs = settings.table("runs")
    ddb.put_item(TableName=runs, Item={"run_id": {"S": "q1"}, "state": {"S": "pending"}, "n": {"N": "7"}})
    got = ddb.get_item(TableName=runs, Key={"run_id": {"S": "q1"}})["Item"]
    assert got == {"run_id": {"S": "q1"}, "state": {"S": "pending"}, "n": {"N": "7"}}


def test_an_item_over_the_size_limit_is_refused_where_moto_s_measure_puts_it(
    aws: boto3.session.Session, settings: Settings
) -> None:
    """Patch 7 (``parsing``) measures each attribute of an item once as it is built: an item is
    refused exactly when moto's own measure of it is over moto's limit, ASCII or not."""
    from moto.dynamodb.exceptions import ItemSizeTooLarge
    from moto.dynamodb.models.dynamo_type import DynamoType, Item
    from moto.dynamodb.models.utilities import bytesize

    from rebound_local.motopatch import ITEM_SIZE_LIMIT, dynamo_values

    moto_size = dynamo_values.MOTO["size"]

    def measured_by_moto(attrs: dict[str, Any]) -> int:
        return sum(bytesize(name) + moto_size(DynamoType(value)) for name, value in attrs.items())

    room = ITEM_SIZE_LIMIT - len("k") - len("kk") - len("big")
    cases: list[dict[str, Any]] = []
    for text in (
        "x" * room,
        "x" * (room + 1),
        "é" * (room // 2),
        "é" * (room // 2 + 1),
        "𝄞" * (room // 4 + 1),
    ):
        cases.append({"k": {"S": "kk"}, "big": {"S": text}})
    for name, extra in product(("big", "bíg"), (3, 4)):  # at the limit, and a byte over it
        cases.append({"k": {"S": "kk"}, name: {"S": "x" * (room - len(name.encode()) + extra)}})
    cases.append({"k": {"S": "kk"}, "big": {"L": [{"S": "x" * (room // 2)}] * 2}, "n": {"N": "1" * 38}})
    cases.append({"k": {"S": "kk"}, "big": {"B": b"\x00" * (room + 1)}})
    refused = 0
    for attrs in cases:
        over = measured_by_moto(attrs) > ITEM_SIZE_LIMIT
        if over:
            with pytest.raises(ItemSizeTooLarge):
                Item(DynamoType({"S": "kk"}), None, attrs)
        else:
            assert Item(DynamoType({"S": "kk"}), None, attrs).attrs["k"] == DynamoType({"S": "kk"})
        refused += over
    assert 0 < refused < len(cases)
    with pytest.raises(ClientError, match="Item size"):
        aws.client("dynamodb").put_item(
            TableName=settings.table("runs"), Item={"run_id": {"S": "big"}, "doc": {"S": "x" * 410_000}}
        )


def test_a_send_reads_only_the_deduplication_flag_and_fifo_queues_still_honour_it(
    aws: boto3.session.Session,
) -> None:
    """Patch 7 (``parsing``): while a message is sent, a queue's attributes are only its content
    deduplication flag; FIFO queues deduplicate by content or refuse a send without an id, as
    moto does, and a queue's attributes read outside a send are all of them."""
    sqs = aws.client("sqs")
    dlq = sqs.create_queue(QueueName="sends-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    plain = sqs.create_queue(
        QueueName="sends",
        Attributes={"RedrivePolicy": f'{{"deadLetterTargetArn": "{dlq_arn}", "maxReceiveCount": "3"}}'},
    )["QueueUrl"]
    sqs.send_message(QueueUrl=plain, MessageBody="a")
    sqs.send_message(QueueUrl=plain, MessageBody="a")
    attributes = sqs.get_queue_attributes(QueueUrl=plain, AttributeNames=["All"])["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == "2"
    assert "RedrivePolicy" in attributes and "ContentBasedDeduplication" not in attributes
    by_content = sqs.create_queue(
        QueueName="sends.fifo", Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"}
    )["QueueUrl"]
    for _ in range(2):
        sqs.send_message(QueueUrl=by_content, MessageBody="same", MessageGroupId="g")
    sqs.send_message(QueueUrl=by_content, MessageBody="other", MessageGroupId="g")
    bodies = [m["Body"] for m in sqs.receive_message(QueueUrl=by_content, MaxNumberOfMessages=10)["Messages"]]
    assert bodies == ["same", "other"]  # the second "same" was a duplicate
    by_id = sqs.create_queue(QueueName="ids.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    with pytest.raises(ClientError, match="ContentBasedDeduplication"):
        sqs.send_message(QueueUrl=by_id, MessageBody="x", MessageGroupId="g")
    fifo_attributes = sqs.get_queue_attributes(QueueUrl=by_id, AttributeNames=["All"])["Attributes"]
    assert fifo_attributes["ContentBasedDeduplication"] == "false" and fifo_attributes["FifoQueue"] == "true"


def test_a_transaction_tells_two_operations_on_one_item_apart_by_the_whole_key(
    aws: boto3.session.Session, settings: Settings
) -> None:
    ddb = aws.client("dynamodb")
    audit = settings.table("audit")

    def record(seq: str) -> dict[str, Any]:
        return {"Put": {"TableName": audit, "Item": {"subject": {"S": "run#k"}, "seq": {"N": seq}}}}

    ddb.transact_write_items(TransactItems=[record("1"), record("2")])  # one subject, two items
    with pytest.raises(ClientError) as err:
        ddb.transact_write_items(
            TransactItems=[
                record("3"),
                {"Delete": {"TableName": audit, "Key": {"seq": {"N": "3"}, "subject": {"S": "run#k"}}}},
            ]
        )
    assert err.value.response["Error"]["Code"] == "ValidationException"
    stored = ddb.query(
        TableName=audit,
        KeyConditionExpression="subject = :s",
        ExpressionAttributeValues={":s": {"S": "run#k"}},
    )
    assert [i["seq"]["N"] for i in stored["Items"]] == ["1", "2"]
