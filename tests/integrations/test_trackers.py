"""The tracker export's own rules, without a training run: which objects are trackers, names
that are not, and a tracker that raises is dropped with one line, never reaching the training."""

from __future__ import annotations

import pytest

from traindoc.findings import Finding
from traindoc.integrations import trackers

FOUND = Finding(id="tiny-updates", severity="warning", title="t", message="m 1e-6", cause="c", fix="f", step=3)


class Writer:
    def __init__(self) -> None:
        self.texts: list[tuple[str, str, int]] = []

    def add_text(self, tag: str, text: str, global_step: int = 0) -> None:
        self.texts.append((tag, text, global_step))

    def flush(self) -> None:
        pass


class BrokenWriter(Writer):
    def add_text(self, tag: str, text: str, global_step: int = 0) -> None:
        raise OSError("disk full")


def test_objects_are_wrapped_by_what_they_can_do() -> None:
    assert [t.name for t in trackers.resolve([Writer()], [])] == ["tensorboard"]
    assert trackers.resolve(False, [Writer()]) == []
    assert [t.name for t in trackers.resolve(True, [Writer()])] == ["tensorboard"]


def test_unknown_names_and_objects_are_user_errors() -> None:
    with pytest.raises(ValueError, match="unknown tracker 'neptune'"):
        trackers.resolve(["neptune"], [])
    with pytest.raises(ValueError, match="int is not a W&B run"):
        trackers.resolve([3], [])


def test_a_named_tracker_prefers_the_frameworks_own() -> None:
    writer = Writer()
    [tb] = trackers.resolve(["tensorboard"], [writer], tensorboard_dir=None)
    trackers.send_finding([tb], FOUND, [FOUND])
    assert writer.texts == [("traindoc/findings", "**warning** `tiny-updates`: m 1e-6\n\nFix: f", 3)]


def test_a_tracker_that_raises_is_dropped_once(capsys: pytest.CaptureFixture[str]) -> None:
    good, bad = trackers.TensorBoard(Writer()), trackers.TensorBoard(BrokenWriter())
    active: list[trackers.Tracker] = [bad, good]
    trackers.send_finding(active, FOUND, [FOUND])
    trackers.send_finding(active, FOUND, [FOUND])
    assert active == [good] and len(good.writer.texts) == 2
    assert capsys.readouterr().err.count("could not send a finding to tensorboard") == 1

