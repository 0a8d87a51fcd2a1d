"""Plain data (what ``Engine.state_dict`` holds: dicts with any hashable plain keys, lists,
tuples, str, numbers with NaN and Inf, bool, None) to JSON text and back, exactly: tuples stay
tuples and dict keys keep their types. For frameworks that keep a callback's state as JSON
files (HF Trainer's checkpoint folders). Reading runs no code: only JSON is parsed."""

from __future__ import annotations

import json
from typing import Any

_TUPLE, _DICT = "__tuple__", "__items__"


def dumps(obj: object) -> str:
    return json.dumps(_encode(obj), allow_nan=True, separators=(",", ":"))


def loads(text: str) -> Any:
    return _decode(json.loads(text))


def _encode(x: object) -> object:
    if isinstance(x, tuple):
        return {_TUPLE: [_encode(v) for v in x]}
    if isinstance(x, list):
        return [_encode(v) for v in x]
    if isinstance(x, dict):
        if all(type(k) is str for k in x) and _TUPLE not in x and _DICT not in x:
            return {k: _encode(v) for k, v in x.items()}
        return {_DICT: [[_encode(k), _encode(v)] for k, v in x.items()]}
    if x is None or type(x) in (bool, int, float, str):
        return x
    raise TypeError(f"not plain data: {type(x).__name__}")


def _decode(x: Any) -> Any:
    if isinstance(x, list):
        return [_decode(v) for v in x]
    if isinstance(x, dict):
        if set(x) == {_TUPLE}:
            return tuple(_decode(v) for v in x[_TUPLE])
        if set(x) == {_DICT}:
            return {_decode(k): _decode(v) for k, v in x[_DICT]}
        return {k: _decode(v) for k, v in x.items()}
    return x
