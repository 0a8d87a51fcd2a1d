"""A detector's history across a resume, as plain data (``Detector.carry``; ``Engine.state_dict``).

Each detector names the attributes that stay true in a new process (values measured in the
run, counts towards a threshold, bounded windows of them) in its ``carry``, which
``Detector.state_dict``/``load_state_dict`` save and load with these functions. Nothing
else carries over: object ids, iterator counts and timestamps belong to the old process (a
generic "save every attribute" made a resumed run report a repeated batch).

The helpers of ``_maths`` (``Thinned``, ``Head``, ``Ema``, ``Rollouts``), deques (with their ``maxlen``),
sets, Counters and events are written as small tagged dicts of plain data, so a checkpoint
holding them loads with ``torch.load(weights_only=True)`` and the detector gets its own
types back.
"""

from __future__ import annotations

from collections import Counter, deque
from typing import Any, Iterable, Mapping, cast

from traindoc.detectors._maths import Ema, Head, Rollouts, Thinned
from traindoc.events import EVENT_TYPES, Event, from_dict, to_dict

_TAG = "__carry__"


def save(det: object, names: Iterable[str]) -> dict[str, object]:
    """``det``'s attributes ``names`` (those it has: ``_phase`` exists from a second training
    phase on), as plain data."""
    return {name: encode(getattr(det, name)) for name in names if hasattr(det, name)}


def load(det: object, state: Mapping[str, object], names: Iterable[str], classes: Iterable[type] = ()) -> None:
    """Set ``det``'s attributes from ``save``'s data; ``classes``: the detector's own small
    classes the state may hold. A name not in ``names`` (a state of another traindoc
    version) raises: the engine then leaves the detector fresh."""
    allowed = set(names)
    for name, value in state.items():
        if name not in allowed:
            raise KeyError(f"{type(det).__name__} does not carry {name!r}")
        setattr(det, name, decode(value, classes))


def encode(x: object) -> object:
    """``x`` as plain data (what ``save`` writes for one attribute)."""
    if x is None or type(x) in (bool, int, float, str):
        return x
    if isinstance(x, Thinned):
        return {_TAG: "thinned", "v": [x.cap, x.stride, x.count, list(x.values)]}
    if isinstance(x, Head):
        return {_TAG: "head", "v": [x.keep, x.count, encode(list(x.items))]}
    if isinstance(x, Ema):
        return {_TAG: "ema", "v": [x.alpha, x.state_dict()]}
    if isinstance(x, Rollouts):
        return {_TAG: "rollouts", "v": x.state_dict()}
    if isinstance(x, deque):
        return {_TAG: "deque", "v": [x.maxlen, encode(list(x))]}
    if isinstance(x, Counter):
        return {_TAG: "counter", "v": encode(dict(x))}
    if isinstance(x, (set, frozenset)):
        return {_TAG: "set", "v": encode(sorted(x, key=repr))}
    if type(x) in EVENT_TYPES.values():
        return {_TAG: "event", "v": encode(to_dict(cast("Event", x)))}
    if isinstance(x, tuple):
        return tuple(encode(v) for v in x)
    if isinstance(x, list):
        return [encode(v) for v in x]
    if isinstance(x, dict):
        return {encode(k): encode(v) for k, v in x.items()}
    item = getattr(x, "item", None)  # a numpy scalar: its Python number
    if callable(item) and type(x).__module__ == "numpy":
        return encode(item())
    if type(x).__module__.startswith("traindoc.detectors.") and hasattr(x, "__dict__"):
        # a detector's own small class (a track, a streak): its fields, by class name
        return {_TAG: "object", "class": type(x).__name__, "v": encode(vars(x))}
    raise TypeError(f"cannot carry a {type(x).__name__} across a resume")


def decode(x: Any, classes: Iterable[type] = ()) -> Any:
    """What ``encode`` wrote, with its own types back; ``classes``: as for ``load``."""
    classes = tuple(classes)
    if isinstance(x, tuple):
        return tuple(decode(v, classes) for v in x)
    if isinstance(x, list):
        return [decode(v, classes) for v in x]
    if not isinstance(x, dict):
        return x
    tag = x.get(_TAG)
    if tag is None:
        return {decode(k, classes): decode(v, classes) for k, v in x.items()}
    v = x["v"]
    if tag == "object":  # only a class the detector names: a state never picks the code to run
        cls = next((c for c in classes if c.__name__ == x["class"]), None)
        if cls is None:
            raise ValueError(f"unexpected carried object {x['class']!r}")
        obj: Any = object.__new__(cls)
        vars(obj).update(decode(v, classes))
        return obj
    if tag == "thinned":
        t = Thinned(int(v[0]))
        t.stride, t.count, t.values = int(v[1]), int(v[2]), list(v[3])  # steps stay ints
        return t
    if tag == "head":
        h: Head[Any] = Head(int(v[0]))
        h.count, h.items = int(v[1]), decode(v[2], classes)
        return h
    if tag == "ema":
        e = Ema(1)
        e.alpha = float(v[0])
        e.load_state_dict(v[1])
        return e
    if tag == "rollouts":
        r = Rollouts()
        r.load_state_dict(v)
        return r
    if tag == "deque":
        return deque(decode(v[1], classes), maxlen=v[0])
    if tag == "counter":
        return Counter(decode(v, classes))
    if tag == "set":
        return set(decode(v, classes))
    if tag == "event":  # from_dict reads a JSON record: its sequences as lists
        record = decode(v, classes)
        return from_dict({k: list(y) if isinstance(y, tuple) else y for k, y in record.items()})
    raise ValueError(f"unknown carried value {tag!r}")
