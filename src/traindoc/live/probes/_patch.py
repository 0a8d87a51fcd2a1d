"""Patching torch safely: remember every original, restore in reverse, never let our code
raise into the user's."""

from __future__ import annotations

from typing import Any, Callable

import torch

from traindoc.live.session import Session

is_compiling = torch.compiler.is_compiling


class Patcher:
    def __init__(self, session: Session) -> None:
        self.session = session
        self._patched: list[tuple[Any, str, Any]] = []

    def patch(self, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        """Replace ``owner.name`` by ``make(original)``; ``restore`` puts the original back."""
        orig = getattr(owner, name)
        self._patched.append((owner, name, orig))
        setattr(owner, name, make(orig))

    def restore(self) -> None:
        for owner, name, orig in reversed(self._patched):
            setattr(owner, name, orig)
        self._patched.clear()

    def guard(self, probe: str, fn: Callable[..., Any], *args: Any) -> None:
        """Run our part of a hook. An exception disables ``probe`` (reported once by the
        session) and never reaches the user's script; inside torch.compile tracing, do nothing."""
        if probe in self.session.failed or is_compiling():
            return
        try:
            fn(*args)
        except Exception as exc:  # never let traindoc break the user's training
            self.session.fail(probe, exc)
