"""``python -m toolstream.schema``: print the JSON Schema of the native format."""

from __future__ import annotations

import json

from ._core.codec import json_schema


def render() -> str:
    """The schema as the text committed in ``docs/schema/native-v1.json``."""
    return json.dumps(json_schema(), indent=2, sort_keys=False) + "\n"


if __name__ == "__main__":
    print(render(), end="")
