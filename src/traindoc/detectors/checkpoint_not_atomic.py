"""checkpoint-not-atomic: a checkpoint written straight over the previous one at its final path."""

from __future__ import annotations

from typing import Iterator

from traindoc.detectors import _carry
from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding
from traindoc.detectors._maths import Head
from traindoc.events import Event, SaveFile
from traindoc.findings import Finding


class CheckpointNotAtomic(Detector):
    """``torch.save`` wrote a checkpoint over the previous one in place: a second save to the same
    path while the first file is still there (not renamed away in between), or a training
    checkpoint written over a file that already existed (from an earlier run) and never moved.
    Saves to paths that change (``ckpt_step_1200.pt``) and saves to a temporary file then moved
    into place with ``os.replace``/``os.rename``/``shutil.move``/``Path.rename`` stay quiet."""

    id = "checkpoint-not-atomic"
    needs = frozenset({"save"})
    examples = (
        Example("zoo/ckpt_not_atomic.py", 20),
        Example("zoo/healthy_ckpt_resume.py", None),
        Example("zoo/ckpt_incomplete.py", None),
    )

    # Carried over a resume: the files saved and not yet moved into place (the latest 64 paths: a
    # later save over one of them is the failure) and the first save in place.
    carry = ("_direct", "_first", "_steps", "_others", "_overwrote_existing")

    def __init__(self, config: Detector.Config | None = None) -> None:
        self.config = config or self.Config()
        self._direct: dict[str, SaveFile] = {}  # saved, not (yet) moved into place
        self._first: SaveFile | None = None  # the first save over its previous one
        self._steps: Head[int] = Head(50)  # the saves at its path: how many, the first 50 steps
        self._others: set[str] = set()  # other paths saved over in place
        self._overwrote_existing = False

    def state_dict(self) -> dict[str, object]:
        """``carry``, a bounded part of it (a long run's history must not grow a checkpoint)."""
        latest = dict(list(self._direct.items())[-64:])
        return {**super().state_dict(), "_direct": _carry.encode(latest)}

    def observe(self, event: Event) -> Iterator[Finding]:
        assert isinstance(event, SaveFile)
        if event.op == "move":
            self._direct.pop(event.source, None)
            return
        previous = self._direct.get(event.path)
        self._direct[event.path] = event
        if previous is None or not event.existed:
            return  # a new file, or the previous one was moved away (a rename traindoc did not see)
        if self._first is None:
            self._first = event
            self._steps.append(previous.step)
            self._steps.append(event.step)
            yield self._finding()
        elif event.path == self._first.path:
            self._steps.append(event.step)
        else:
            self._others.add(event.path)

    def finish(self) -> Iterator[Finding]:
        if self._first is None:
            stale = [e for e in self._direct.values() if e.existed and e.training]
            if stale:
                self._first, self._overwrote_existing = stale[0], True
                self._steps.append(stale[0].step)
        if self._first is not None:
            yield self._finding()

    def _finding(self) -> Finding:
        first = self._first
        assert first is not None
        steps = self._steps.items or [first.step]
        saves = self._steps.count or 1
        at = f" at {first.where}" if first.where else ""
        kind = "training checkpoint" if first.training else "checkpoint"
        if self._overwrote_existing:
            what = (f"torch.save{at} wrote the {kind} {first.path} over the file already there (step "
                    f"{first.step}) and never renamed it into place")
        else:
            what = (f"torch.save{at} wrote the {kind} {first.path} in place {saves} times (steps "
                    f"{', '.join(map(str, steps[:8]))}{' ...' if saves > 8 else ''}), each over the previous one, "
                    "with no rename of a finished file into place")
        others = sorted(self._others)
        also = f"; also {len(others)} other path(s) such as {others[0]}" if others else ""
        return finding(
            self.id, step=first.step,
            message=what + also + ".",
            cause=None if first.training else (
                f"{first.path} holds the model (no optimizer state) and each save writes it in place: "
                "a crash, preemption or full disk during a write leaves a truncated file where the "
                "last good model was, and whatever reads it next (a resume, a sampling or evaluation "
                "script) fails on it."),
            evidence={"path": first.path, "saves_in_place": saves, "steps": list(steps),
                      "training_checkpoint": first.training, "where": first.where,
                      "overwrote_existing_file": self._overwrote_existing, "other_paths": others[:10]},
            where=[w for w in (first.where, first.path) if w],
        )
