"""Input handling: one key applied to the state. Keyboard only, so it works over SSH."""

from __future__ import annotations

from exporter.oncall.top.rows import SORTS, sort_rows
from exporter.oncall.top.state import State


def handle_key(st: State, key: str) -> bool:
    """Apply one key; False to quit."""
    if st.typing is not None:
        if key in ("\n", "\r", "KEY_ENTER"):
            st.filt, st.typing, st.selected = st.typing, None, 0
        elif key == "\x1b":
            st.typing, st.filt = None, ""
        elif key in ("KEY_BACKSPACE", "\x7f", "\b"):
            st.typing = st.typing[:-1]
        elif len(key) == 1 and key.isprintable():
            st.typing += key
        return True
    if key == "q":
        return False
    if st.detail is not None:
        if key in ("\x1b", "KEY_BACKSPACE", "\x7f", "\b", "KEY_LEFT", "h"):
            st.detail = None
        return True
    if key in SORTS:
        st.sort, st.selected = key, 0
    elif key == "/":
        st.typing = st.filt
    elif key == "\x1b":
        st.filt = ""
    elif key in ("KEY_DOWN", "j"):
        st.selected += 1
    elif key in ("KEY_UP", "k"):
        st.selected = max(0, st.selected - 1)
    elif key in ("\n", "\r", "KEY_ENTER", "KEY_RIGHT", "l"):
        rs = sort_rows(st.rows, st.sort, st.filt)
        if rs:
            st.detail = rs[min(st.selected, len(rs) - 1)].key
    return True

