"""The JSON Schemas of Rebound's events, published where subscribers look for them: an EventBridge
schema registry, ``rebound-<env>``, one schema ``<source>@<event type>`` each.

The registry takes JSON Schema draft 4 (``JSONSchemaDraft4``); ``events/schemas`` holds draft
2020-12, generated from the event models. ``draft4`` rewrites the few keywords whose spelling
differs (``const``, ``exclusiveMinimum``, ``$id``); the constraints are the same.
"""

from __future__ import annotations

import json
from typing import Any

from aws_cdk import aws_eventschemas as eventschemas
from constructs import Construct

from rebound.domain.events import json_schemas

DRAFT4 = "http://json-schema.org/draft-04/schema#"


def draft4(schema: Any) -> Any:
    """``schema`` (draft 2020-12) as draft 4 says the same."""
    if isinstance(schema, list):
        return [draft4(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "$schema":
            out[key] = DRAFT4
        elif key == "$id":
            out["id"] = value
        elif key == "const":
            out["enum"] = [value]
        elif key == "exclusiveMinimum" and not isinstance(value, bool):
            out["minimum"], out["exclusiveMinimum"] = value, True
        elif key == "exclusiveMaximum" and not isinstance(value, bool):
            out["maximum"], out["exclusiveMaximum"] = value, True
        elif key == "properties":  # property names are names, not keywords
            out[key] = {name: draft4(sub) for name, sub in value.items()}
        else:
            out[key] = draft4(value)
    return out


class SchemaRegistry(Construct):
    def __init__(self, scope: Construct, id: str, *, environment: str, source: str) -> None:
        super().__init__(scope, id)
        self.registry = eventschemas.CfnRegistry(
            self,
            "Registry",
            registry_name=f"rebound-{environment}",
            description=f"The events Rebound's {environment} environment publishes (source {source})",
        )
        self.schemas: dict[str, eventschemas.CfnSchema] = {}
        for n, (detail_type, schema) in enumerate(sorted(json_schemas().items())):
            cfn = eventschemas.CfnSchema(
                self,
                f"Schema{n}",
                registry_name=self.registry.attr_registry_name,
                schema_name=f"{source}@{detail_type}",
                type="JSONSchemaDraft4",
                content=json.dumps(draft4(schema), sort_keys=True),
                description=str(schema.get("description") or detail_type)[:256],
            )
            self.schemas[detail_type] = cfn
