"""Write events/schemas/*.json from the models they describe, and the retry status events' page
(docs/standards/events/retry-status-schema.md) from those schemas and the bus samples. Run with
`make schemas`.

tests/unit/test_event_contract.py fails when a committed schema, or the page, differs from what
this writes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rebound.domain.events import json_schemas
from rebound.engine.messages import execution_message_schema

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "events" / "schemas"
SAMPLES = ROOT / "events" / "bus"
STATUS_PAGE = ROOT / "docs" / "standards" / "events" / "retry-status-schema.md"
STATUS_EVENTS = (
    "task.execution.updated",
    "task.execution.failed",
    "task.retry.scheduled",
    "task.execution.waiting",
    "task.dead_lettered",
    "task.recovered",
)
"""The events that say where a run stands in its retries, in the order a run meets them."""


def render(schema: dict[str, object]) -> str:
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def expected() -> dict[str, str]:
    files = {f"{name}.json": render(schema) for name, schema in json_schemas().items()}
    files["execution-message.json"] = render(execution_message_schema())
    return files


def _type(prop: dict[str, object]) -> str:
    if "enum" in prop:
        return " \\| ".join(f"`{v}`" for v in prop["enum"])  # type: ignore[attr-defined]
    if "anyOf" in prop:
        return " or ".join(_type(p) for p in prop["anyOf"])  # type: ignore[attr-defined]
    if "$ref" in prop:
        return "object"
    return str(prop.get("type", "any"))


def status_page() -> str:
    """The retry status events' page, from their schemas and bus samples."""
    schemas = json_schemas()
    lines = [
        "# Retry status events",
        "",
        "<!-- Written by `make schemas` from events/schemas and events/bus; do not edit by hand. -->",
        "",
        "The events that say where a run stands in its retries. Rebound writes each in the same",
        "DynamoDB transaction as the state change it reports (the outbox), and the relay puts it on",
        "the environment's bus with its `source` (default `io.rebound`) and the event's name as",
        "`detail-type` when a",
        "rule of the stack consumes it or the environment's `publish_events` names it (`'*'`: every",
        "event). Delivery is at least once: consumers dedupe on `detail.event_id`. The JSON Schema",
        "of each (draft 2020-12) is `events/schemas/<name>.json`, a sample as the bus delivers it",
        "`events/bus/<name>.json`; `tests/unit/test_event_contract.py` holds the schemas, the",
        "samples and this page to the models that emit them.",
        "",
    ]
    for name in STATUS_EVENTS:
        schema = schemas[name]
        required = set(schema.get("required", []))  # type: ignore[arg-type]
        lines += [f"## `{name}`", "", str(schema.get("description", "")).strip(), ""]
        lines += ["| field | type | required | meaning |", "|---|---|---|---|"]
        for field, prop in sorted(schema["properties"].items()):  # type: ignore[attr-defined]
            meaning = str(prop.get("description", "")).replace("|", "\\|")
            yes = "yes" if field in required else ""
            lines.append(f"| `{field}` | {_type(prop)} | {yes} | {meaning} |")
        sample = json.loads((SAMPLES / f"{name}.json").read_text())
        lines += ["", "Example (`detail`):", "", "```json", json.dumps(sample["detail"], indent=2), "```", ""]
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, text in expected().items():
        (OUT / name).write_text(text)
        print(f"wrote events/schemas/{name}")
    STATUS_PAGE.parent.mkdir(parents=True, exist_ok=True)
    STATUS_PAGE.write_text(status_page())
    print(f"wrote {STATUS_PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
