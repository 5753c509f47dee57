"""`python -m flows.api --openapi`: print the status API's OpenAPI document (docs/openapi.json
is this output; tests/unit/flows/api/test_api.py holds the two together)."""

from __future__ import annotations

import json
import sys

from flows.api.server import openapi_document

if __name__ == "__main__":
    if sys.argv[1:] != ["--openapi"]:
        sys.exit("usage: python -m flows.api --openapi")
    print(json.dumps(openapi_document(), indent=2, sort_keys=True))
