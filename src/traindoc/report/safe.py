"""User bytes made safe for each output: the one place every renderer and CLI message escapes.

Names in a report come from files traindoc did not write: a checkpoint's state_dict keys, a
log's column names, file paths. One such name holding ``\\x1b[2J`` would clear the user's
terminal, ``<script>`` would run in the HTML report, and a file name that is not UTF-8
(``b"run_\\xff.csv"``, decoded by Python as the lone surrogate ``\\udcff``) cannot be encoded
at all, so the HTML, JSON or SARIF write would fail. Each output calls its function here on
every string it did not write itself:

- ``terminal``: control, format (bidi overrides) and other unprintable characters written as
  Python escapes (``\\x1b``, ``\\u202e``); a byte that was not UTF-8 as ``\\xff``.
- ``html``: the same, keeping newlines and tabs, then ``& < > " '`` as entities.
- ``json_text`` / ``json_safe``: only the undecodable bytes, as ``\\xff`` (JSON escapes control
  characters itself), so the document is valid UTF-8 with no lone surrogate.

Imports nothing: the CLI, the readers and lint use it without loading a renderer.
"""

from __future__ import annotations

from html import escape as _html_escape
from typing import Any

_SURROGATES = range(0xD800, 0xE000)
_ESCAPED_BYTES = range(0xDC80, 0xDD00)  # os.fsdecode / surrogateescape: byte b -> U+DC00 + b


def _escape_char(c: str) -> str:
    code = ord(c)
    if code in _ESCAPED_BYTES:
        return f"\\x{code - 0xDC00:02x}"
    return repr(c)[1:-1]  # '\x1b', '\n', '\u202e', '\U000e0001'


def terminal(text: str, keep: str = "") -> str:
    """``text`` with every unprintable character (``str.isprintable``) escaped, except those
    in ``keep``: one line that cannot move the cursor, recolor or retitle the terminal."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c in keep else _escape_char(c) for c in text)


def html(text: object) -> str:
    """Text for an HTML element or a quoted attribute: markup escaped, unprintable characters
    written visibly (newlines and tabs kept, for ``<pre>``)."""
    return _html_escape(terminal(str(text), keep="\n\t"), quote=True)


def json_text(text: str) -> str:
    """``text`` with no lone surrogate: an undecodable byte as ``\\xff``, any other as U+FFFD."""
    if text.isascii():
        return text
    if not any(ord(c) in _SURROGATES for c in text):
        return text
    return "".join(_escape_char(c) if ord(c) in _ESCAPED_BYTES else "\ufffd" if ord(c) in _SURROGATES else c
                   for c in text)


def json_safe(value: Any) -> Any:
    """``value`` (dicts, lists, tuples, strings, numbers) with every string and key passed
    through ``json_text``."""
    if isinstance(value, str):
        return json_text(value)
    if isinstance(value, dict):
        return {json_text(k) if isinstance(k, str) else k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
