"""Write docs/openapi.json: the operations API's OpenAPI document, generated from its routes.

``tests/integration/test_ops_api.py`` fails when the committed document drifts from the routes.
"""

from __future__ import annotations

import json
from pathlib import Path

from rebound.api import build_app, openapi_document

OUT = Path(__file__).resolve().parents[1] / "docs" / "openapi.json"


def main() -> None:
    document = openapi_document(build_app(lambda: None))  # type: ignore[arg-type,return-value]
    OUT.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    print(f"{len(document['paths'])} paths -> {OUT.relative_to(OUT.parents[1])}")


if __name__ == "__main__":
    main()
