"""The wire's JSON encoder: orjson when installed, the standard library otherwise, with
the same JSON values either way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from toolstream._core import jsonenc

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=30,
)


def stdlib(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_same_json_values_as_the_standard_library(value: Any) -> None:
    text = jsonenc.dumps(value)
    assert json.loads(text) == json.loads(stdlib(value))
    assert "\n" not in text and "\r" not in text, "one line, whatever the strings hold"


def test_what_orjson_refuses_falls_back() -> None:
    for value in ({"n": 2**70}, [1, {"k": 10**30}]):
        assert jsonenc.dumps(value) == stdlib(value)


def test_text_that_cannot_be_encoded_becomes_safe() -> None:
    # A lone surrogate (os.fsdecode of an undecodable file name) would make the wire's
    # bytes impossible to write: it becomes U+FFFD, in dumps and dumpb alike.
    value = {"file": "report-\udcff.txt", "k\ud800": ["\ud83d\ude00"]}
    text = jsonenc.dumps(value)
    assert json.loads(text) == {"file": "report-\ufffd.txt", "k\ufffd": ["\ufffd\ufffd"]}
    assert jsonenc.dumpb(value) == text.encode("utf-8")
    assert jsonenc.safe_text("plain") == "plain"
    assert not jsonenc.is_utf8("\udcff") and jsonenc.is_utf8("café")


def test_non_ascii_is_kept() -> None:
    assert jsonenc.dumps({"q": "café 😀"}) == '{"q":"café 😀"}'


def test_the_environment_can_force_the_standard_library() -> None:
    code = "from toolstream._core import jsonenc; print(jsonenc.ENCODER)"
    env = {**os.environ, "TOOLSTREAM_JSON": "stdlib"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "json", out.stderr
    env.pop("TOOLSTREAM_JSON")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "orjson", "the test environment installs the fast extra"
