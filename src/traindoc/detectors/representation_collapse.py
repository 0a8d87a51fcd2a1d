"""representation-collapse: the embeddings a loss compares point the same way for every input."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt, require
from traindoc.detectors._maths import median
from traindoc.events import Embeddings, Event, Scalar
from traindoc.events.metrics import collapse_metric
from traindoc.findings import EvidenceValue, Finding


class RepresentationCollapse(Detector):
    """On the last ``streak`` sampled steps or more, up to the end of the run, the spread of the
    embeddings' directions (``Embeddings.spread``: 1 spread over the sphere, 0 one direction)
    stayed below ``spread``, every embedding batch the loss compared included, and its median
    there is at most ``fall`` of the highest spread the run measured: the training took the
    embeddings there. At 0.2 the batch's mean cosine similarity is 0.96: the model maps its
    inputs to nearly one point. A collapse the run recovers from, an init whose outputs start
    close together and spread as training goes, and embeddings that start in a narrow cone and
    stay there (a pretrained language model's anisotropy: mean-pooled BERT-like embeddings sit
    at a mean cosine of 0.9 and more) stay quiet. The training loss, when measured, is quoted: a
    non-contrastive loss reaches its minimum at the collapse.

    A collapse level the script logs itself (``collapse_level``: 1 - sqrt(D) * the std of the
    l2-normalized outputs, 0 spread, 1 one point; SimSiam's measure, as lightly's tutorials log
    it) is read by any face as 1 - level and judged the same way, each logged name on its own;
    the live measurement, when there is one, is judged first."""

    id = "representation-collapse"
    needs = frozenset({"embeddings"})
    uses = frozenset({"loss"})
    examples = (
        Example("zoo/ssl_simsiam_no_stop_gradient.py", 25),
        Example("zoo/ssl_byol_online_target.py", 14),
        Example("zoo/healthy_ssl_simsiam.py", None),
        Example("zoo/healthy_ssl_byol_ema_target.py", None),
        Example("zoo/healthy_ddp_contrastive_set_epoch.py", None),
        Example("fixtures/logs/meaning/ssl_collapse_level_rises.csv", 3),
        Example("fixtures/logs/meaning/ssl_byol_collapse_level.jsonl", 750),
        Example("fixtures/logs/meaning/healthy_ssl_collapse_level.csv", None),
        Example("fixtures/logs/meaning/healthy_ssl_byol_level.jsonl", None),
    )

    # Carried over a resume: each measure's streak below the threshold, where it started, the loss.
    carry = ("_tracks", "_loss_first", "_loss_last")

    @dataclass(frozen=True)
    class Config:
        spread: float = 0.2
        fall: float = 0.5  # of the highest spread measured
        streak: int = 8  # sampled steps (logged points) in a row, to the end
        min_points: int = 10

        def __post_init__(self) -> None:
            require(self, spread="(0, 1)", fall="(0, 1)", streak=">= 1")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._tracks: dict[str, _Track] = {}  # "" for the live measurement, else the logged metric
        self._loss_first: float | None = None
        self._loss_last: float | None = None

    def reads(self, signal: str) -> bool:
        return collapse_metric(signal)

    def observe(self, event: Event) -> None:
        if isinstance(event, Scalar):
            if event.value != event.value:
                return
            if event.name == "loss":
                if self._loss_first is None:
                    self._loss_first = event.value
                self._loss_last = event.value
            elif collapse_metric(event.name):  # 1 - sqrt(D) * std of the unit rows: 0 spread, 1 one point
                self._track(event.name).add(event.step, min(1.0, max(0.0, 1.0 - event.value)), self.config.spread)
            return
        assert isinstance(event, Embeddings)
        if event.spread == event.spread:  # NaN embeddings: nonfinite's to report
            track = self._track("")
            track.add(event.step, event.spread, self.config.spread)
            track.where, track.rows, track.dim = event.where, event.rows, event.dim

    def _track(self, name: str) -> _Track:
        track = self._tracks.get(name)
        if track is None:
            track = self._tracks[name] = _Track()
        return track

    def finish(self) -> Iterator[Finding]:
        cfg = self.config
        # The live measurement when there is one; else the first logged collapse level that fired.
        for name, track in sorted(self._tracks.items()):
            if track.count >= cfg.min_points and track.run >= cfg.streak \
                    and median(list(track.recent)) <= cfg.fall * track.peak[1]:
                yield self._finding(name, track)
                return

    def _finding(self, name: str, track: _Track) -> Finding:
        since, typical = track.since, median(list(track.recent))
        start = (f"{fmt(track.first[1])} at the first {'measured step' if not name else 'point'}"
                 + (f", {fmt(track.peak[1])} at its highest (step {track.peak[0]})"
                    if track.peak[0] != track.first[0] else ""))
        evidence: dict[str, EvidenceValue] = {
            "spread": typical, "first_spread": track.first[1], "peak_spread": track.peak[1],
            "since_step": since, "points": track.run}
        loss = ""
        if self._loss_first is not None and self._loss_last is not None:
            loss = (f" Meanwhile the training loss went from {fmt(self._loss_first)} to "
                    f"{fmt(self._loss_last)}: one point for every input is the minimum of a loss "
                    "that only pulls two views together, so a falling loss here is no progress.")
            evidence.update(loss_first=self._loss_first, loss_last=self._loss_last)
        if name:  # a logged collapse level, 1 - spread
            message = (f"The logged `{name.removeprefix('metric.')}` stayed above "
                       f"{fmt(1 - self.config.spread)} on its last "
                       f"{track.run} points, from step {since} to the end (median "
                       f"{fmt(1 - typical)}; the spread it leaves, 1 - level, was {start}; 0 means "
                       "the outputs are spread over the sphere, 1 that every input maps to one "
                       f"point).{loss}")
            evidence["metric"] = name
        else:
            cosine = 1.0 - typical * typical  # |mean unit row|^2: the mean cosine over all pairs
            where = f" at {track.where}" if track.where else ""
            message = (f"The embeddings compared{where} (batches of {track.rows} rows of {track.dim}) "
                       f"point the same way for every input: the spread of their directions stayed "
                       f"below {fmt(self.config.spread)} on the last {track.run} sampled steps, from "
                       f"step {since} to the end (median {fmt(typical)}; {start}; 1 means spread "
                       f"over the sphere, 0 one direction), a mean cosine similarity of "
                       f"{cosine:.3f} between them.{loss}")
            evidence.update(mean_cosine=cosine, rows=track.rows, dim=track.dim)
        return finding(self.id, step=since, message=message, evidence=evidence,
                       where=[track.where] if track.where else [])


class _Track:
    """One measure of the spread over the run: the streak below the threshold that lasts to
    now (where it began, its length, its last 64 values), the first and highest values."""

    def __init__(self) -> None:
        self.since = 0
        self.run = 0
        self.recent: deque[float] = deque(maxlen=64)
        self.count = 0
        self.first = (0, 0.0)
        self.peak = (0, -1.0)
        self.where, self.rows, self.dim = "", 0, 0

    def add(self, step: int, spread: float, below: float) -> None:
        if not self.count:
            self.first = (step, spread)
        self.count += 1
        if spread > self.peak[1]:
            self.peak = (step, spread)
        if spread >= below:
            self.run = 0
            return
        if not self.run:
            self.since = step
            self.recent.clear()
        self.run += 1
        self.recent.append(spread)
