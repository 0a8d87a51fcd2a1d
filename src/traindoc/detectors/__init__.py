"""The detectors: one class per module, found on disk (``units.scan``), in one tuple.

There is no plugin system and no import side effect: ``build`` makes fresh instances for one
run.
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping, cast

from traindoc import units
from traindoc.detectors._base import Detector
from traindoc.detectors._common import require

__all__ = ["DETECTORS", "Detector", "build", "by_id", "require"]

# Every module here but the _private helpers holds one detector, named after its id (sorted by
# module name). Found on disk, so the modules and the registry cannot disagree; the registry
# test checks that each class subclasses Detector.
DETECTORS: tuple[type[Detector], ...] = tuple(cast("list[type[Detector]]", units.scan(__name__, __path__)))


def build(
    *,
    select: Iterable[str] | None = None,
    ignore: Iterable[str] = (),
    config: Mapping[str, Mapping[str, object]] | None = None,
) -> list[Detector]:
    """Fresh detector instances. ``config`` maps an id to overrides of its Config fields."""
    config = config or {}
    chosen = set(select) if select is not None else None
    muted = set(ignore)
    out: list[Detector] = []
    for cls in DETECTORS:
        id_ = cls.id
        if id_ in muted or (chosen is not None and id_ not in chosen):
            continue
        overrides = dict(config.get(id_, {}))
        # Typed as a callable: the base's Config takes no fields, each cls.Config its own.
        make_config: Callable[..., Detector.Config] = cls.Config
        out.append(cls(make_config(**overrides)))
    return out


def by_id() -> dict[str, type[Detector]]:
    return {cls.id: cls for cls in DETECTORS}
