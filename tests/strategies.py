"""Hypothesis strategies the fuzz tests share."""

from __future__ import annotations

from hypothesis import strategies as st


def json_values(*, max_leaves: int = 12, text: int = 8) -> st.SearchStrategy[object]:
    """Any value ``json.loads`` can produce (floats include NaN and infinities: what a
    peer may send), nested a little."""
    return st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=text),
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=text), inner, max_size=4)
        ),
        max_leaves=max_leaves,
    )
