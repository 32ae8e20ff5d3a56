"""Write events/schemas/*.json from the models they describe. Run with `make schemas`.

tests/unit/test_event_contract.py fails when a committed schema differs from its model.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rebound.domain.events import json_schemas
from rebound.engine.messages import execution_message_schema

OUT = Path(__file__).resolve().parents[1] / "events" / "schemas"


def render(schema: dict[str, object]) -> str:
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def expected() -> dict[str, str]:
    files = {f"{name}.json": render(schema) for name, schema in json_schemas().items()}
    files["execution-message.json"] = render(execution_message_schema())
    return files


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, text in expected().items():
        (OUT / name).write_text(text)
        print(f"wrote events/schemas/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
