"""The event contract: committed schemas match the models, and every sample in events/ is valid."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from rebound.domain.events import DETAIL_MODELS, EventType
from rebound.domain.schedules import WORKSTREAM_START
from rebound.engine.control_messages import parse_control_event
from rebound.engine.messages import parse_execution_message

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
EVENTS = ROOT / "events"
SCHEMAS = EVENTS / "schemas"


def _load(path: Path) -> dict:  # type: ignore[type-arg]
    return json.loads(path.read_text())


def test_committed_schemas_match_the_models() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen", ROOT / "scripts" / "generate_event_schemas.py")
    assert spec and spec.loader
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    expected = gen.expected()
    on_disk = {p.name: p.read_text() for p in SCHEMAS.glob("*.json")}
    assert on_disk == expected, "events/schemas is stale: run `make schemas`"


def test_the_retry_status_page_is_what_the_schemas_and_samples_say() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen", ROOT / "scripts" / "generate_event_schemas.py")
    assert spec and spec.loader
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    page = ROOT / "docs" / "standards" / "events" / "retry-status-schema.md"
    assert page.read_text() == gen.status_page(), "the retry status page is stale: run `make schemas`"
    for name in gen.STATUS_EVENTS:
        assert f"## `{name}`" in page.read_text()


def test_there_is_a_bus_sample_for_every_event_type() -> None:
    samples = {p.stem for p in (EVENTS / "bus").glob("*.json")}
    assert samples == {t.value for t in EventType}


@pytest.mark.parametrize("sample", sorted((EVENTS / "bus").glob("*.json")), ids=lambda p: p.stem)
def test_bus_sample_matches_its_schema(sample: Path) -> None:
    event = _load(sample)
    schema = _load(SCHEMAS / f"{event['detail-type']}.json")
    jsonschema.validate(event["detail"], schema)
    assert event["source"] == "io.rebound"
    DETAIL_MODELS[EventType(event["detail-type"])].model_validate(event["detail"])


def test_schema_rejects_a_detail_with_a_missing_field() -> None:
    event = _load(EVENTS / "bus" / "task.dead_lettered.json")
    detail = dict(event["detail"])
    del detail["reason"]
    with pytest.raises(jsonschema.ValidationError, match="reason"):
        jsonschema.validate(detail, _load(SCHEMAS / "task.dead_lettered.json"))


@pytest.mark.parametrize(
    "sample",
    ["sqs-schedule-fire.json", "sqs-retry-attempt.json"],
)
def test_executor_samples_carry_valid_execution_messages(sample: str) -> None:
    schema = _load(SCHEMAS / "execution-message.json")
    for record in _load(EVENTS / "executor" / sample)["Records"]:
        body = json.loads(record["body"])
        jsonschema.validate(body, schema)
        parse_execution_message(record["body"])


def test_malformed_sample_is_refused_by_the_execution_schema() -> None:
    from rebound.domain.errors import ValidationFailed

    record = _load(EVENTS / "executor" / "sqs-malformed-message.json")["Records"][0]
    with pytest.raises(ValidationFailed):
        parse_execution_message(record["body"])


@pytest.mark.parametrize("folder", ["retry_scheduler", "escalation"])
def test_rule_delivered_samples_wrap_a_valid_bus_event(folder: str) -> None:
    for path in (EVENTS / folder).glob("*.json"):
        for record in _load(path)["Records"]:
            event = json.loads(record["body"])
            if event["detail-type"] == WORKSTREAM_START:  # from a schedule or a rule, not the outbox
                parse_control_event(record["body"], (WORKSTREAM_START,))
                continue
            jsonschema.validate(event["detail"], _load(SCHEMAS / f"{event['detail-type']}.json"))


def test_the_workstream_start_samples_are_what_a_schedule_and_a_rule_send() -> None:
    kinds = set()
    for path in (EVENTS / "escalation").glob("sqs-workstream-start-*.json"):
        (record,) = _load(path)["Records"]
        _, detail = parse_control_event(record["body"], (WORKSTREAM_START,))
        kinds.add("event" if detail.model_dump().get("event_id") else "schedule")
    assert kinds == {"schedule", "event"}


def test_outbox_stream_sample_holds_one_record_per_event_type() -> None:
    records = _load(EVENTS / "outbox_relay" / "dynamodb-stream-outbox.json")["Records"]
    types = {r["dynamodb"]["NewImage"]["detail_type"]["S"] for r in records}
    assert types == {t.value for t in EventType}
    for record in records:
        image = record["dynamodb"]["NewImage"]
        jsonschema.validate(
            json.loads(image["detail"]["S"]), _load(SCHEMAS / f"{image['detail_type']['S']}.json")
        )


NAME = r"[a-z][a-z_]*(?:\.[a-z][a-z_]*)+"


def test_every_event_type_is_named_subject_dot_what_happened_and_carries_its_schema_version() -> None:
    import re

    for event_type, model in DETAIL_MODELS.items():
        assert re.fullmatch(NAME, event_type.value), event_type.value
        schema = _load(SCHEMAS / f"{event_type.value}.json")
        assert schema["properties"]["schema_version"]["const"] == 1, event_type.value
        assert model.model_fields["schema_version"].default == 1, event_type.value


def test_the_events_page_lists_exactly_the_event_types_with_their_versions() -> None:
    import re

    page = (ROOT / "docs" / "architecture" / "events.md").read_text()
    rows = dict(re.findall(rf"^\| `({NAME})` \| [^|]+ \| (\d+) \|$", page, flags=re.M))
    assert set(rows) == {t.value for t in EventType}, "docs/architecture/events.md's table is stale"
    for name, version in rows.items():
        assert _load(SCHEMAS / f"{name}.json")["properties"]["schema_version"]["const"] == int(version)
    files = {p.stem for p in SCHEMAS.glob("*.json")} - {"execution-message"}
    assert files == set(rows), "a schema with no event type, or an event type with no schema"
