"""The SSE benchmark's toolstream server with the standard library's JSON encoder
(``TOOLSTREAM_JSON=stdlib``), to measure what orjson buys: same arguments as
``benchmarks.sse_server``."""

from __future__ import annotations

import os
import runpy

if __name__ == "__main__":
    os.environ["TOOLSTREAM_JSON"] = "stdlib"
    runpy.run_module("benchmarks.sse_server", run_name="__main__")
