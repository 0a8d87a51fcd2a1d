"""The explicit registry: every detector class, in one tuple.

A test checks that the modules on disk and this tuple agree. There is no plugin system and no
import side effect: ``build`` makes fresh instances for one run.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from traindoc.detectors.loss_spike import LossSpike

DETECTORS: tuple[type, ...] = (
    LossSpike,
)


def build(
    *,
    select: Iterable[str] | None = None,
    ignore: Iterable[str] = (),
    config: Mapping[str, Mapping[str, object]] | None = None,
) -> list[object]:
    """Fresh detector instances. ``config`` maps an id to overrides of its Config fields."""
    config = config or {}
    chosen = set(select) if select is not None else None
    muted = set(ignore)
    out = []
    for cls in DETECTORS:
        id_ = cls.id  # type: ignore[attr-defined]
        if id_ in muted or (chosen is not None and id_ not in chosen):
            continue
        overrides = dict(config.get(id_, {}))
        out.append(cls(cls.Config(**overrides)))  # type: ignore[attr-defined]
    return out


def by_id() -> dict[str, type]:
    return {cls.id: cls for cls in DETECTORS}  # type: ignore[attr-defined]
