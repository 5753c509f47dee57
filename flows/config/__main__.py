"""`python -m flows.config --markdown | --json-schema`: the declared settings."""

from __future__ import annotations

import argparse
import json

from flows.config.docs import json_schema, markdown


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m flows.config", description=__doc__)
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--markdown", action="store_true", help="a table of settings per group")
    what.add_argument("--json-schema", action="store_true", help="schema of an ES_SINK_CONFIG file")
    args = parser.parse_args()
    print(markdown() if args.markdown else json.dumps(json_schema(), indent=2))


if __name__ == "__main__":
    main()
