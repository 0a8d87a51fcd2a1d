"""representation-collapse: the embeddings a loss compares point the same way for every input."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt, require
from traindoc.detectors._maths import median
from traindoc.events import Embeddings, Event, Scalar
from traindoc.findings import Finding


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
    non-contrastive loss reaches its minimum at the collapse."""

    id = "representation-collapse"
    needs = frozenset({"embeddings"})
    uses = frozenset({"loss"})
    examples = (
        Example("zoo/ssl_simsiam_no_stop_gradient.py", 25),
        Example("zoo/ssl_byol_online_target.py", 14),
        Example("zoo/healthy_ssl_simsiam.py", None),
        Example("zoo/healthy_ssl_byol_ema_target.py", None),
        Example("zoo/healthy_ddp_contrastive_set_epoch.py", None),
    )

    # Carried over a resume: the streak below the threshold, where the spreads started, the loss.
    carry = ("_since", "_run", "_recent", "_count", "_first", "_peak", "_last", "_loss_first", "_loss_last")

    @dataclass(frozen=True)
    class Config:
        spread: float = 0.2
        fall: float = 0.5  # of the highest spread measured
        streak: int = 8  # sampled steps in a row, to the end
        min_points: int = 10

        def __post_init__(self) -> None:
            require(self, spread="(0, 1)", fall="(0, 1)", streak=">= 1")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._since: int | None = None  # where the streak below the threshold began
        self._run = 0  # its sampled steps
        self._recent: deque[float] = deque(maxlen=64)  # its last spreads
        self._count = 0
        self._first: tuple[int, float] | None = None
        self._peak: tuple[int, float] | None = None
        self._last: Embeddings | None = None
        self._loss_first: float | None = None
        self._loss_last: float | None = None

    def observe(self, event: Event) -> None:
        if isinstance(event, Scalar):
            if event.name == "loss" and event.value == event.value:
                if self._loss_first is None:
                    self._loss_first = event.value
                self._loss_last = event.value
            return
        assert isinstance(event, Embeddings)
        if event.spread != event.spread:  # NaN embeddings: nonfinite's to report
            return
        self._count += 1
        point = (event.step, event.spread)
        if self._first is None:
            self._first = point
        if self._peak is None or event.spread > self._peak[1]:
            self._peak = point
        self._last = event
        if event.spread >= self.config.spread:
            self._run = 0
            return
        if self._run == 0:
            self._since = event.step
            self._recent.clear()
        self._run += 1
        self._recent.append(event.spread)

    def finish(self) -> Iterator[Finding]:
        cfg = self.config
        if self._count < cfg.min_points or self._run < cfg.streak or self._last is None or self._peak is None:
            return
        if median(list(self._recent)) <= cfg.fall * self._peak[1]:
            yield self._finding(self._last)

    def _finding(self, last: Embeddings) -> Finding:
        assert self._first is not None and self._peak is not None and self._since is not None
        since = self._since
        typical = median(list(self._recent))
        cosine = 1.0 - typical * typical  # |mean unit row|^2: the mean cosine over all pairs
        where = f" at {last.where}" if last.where else ""
        start = (f"{fmt(self._first[1])} at the first measured step"
                 + (f", {fmt(self._peak[1])} at its highest (step {self._peak[0]})"
                    if self._peak[0] != self._first[0] else ""))
        loss = ""
        if self._loss_first is not None and self._loss_last is not None:
            loss = (f" Meanwhile the training loss went from {fmt(self._loss_first)} to "
                    f"{fmt(self._loss_last)}: one point for every input is the minimum of a loss "
                    "that only pulls two views together, so a falling loss here is no progress.")
        return finding(
            self.id, step=since,
            message=(f"The embeddings compared{where} (batches of {last.rows} rows of {last.dim}) point the same "
                     f"way for every input: the spread of their directions stayed below "
                     f"{fmt(self.config.spread)} on the last {self._run} sampled steps, from "
                     f"step {since} to the end (median {fmt(typical)}; {start}; 1 means spread "
                     f"over the sphere, 0 one direction), a mean cosine similarity of "
                     f"{cosine:.3f} between them.{loss}"),
            evidence={"spread": typical, "mean_cosine": cosine, "first_spread": self._first[1],
                      "peak_spread": self._peak[1], "since_step": since, "sampled_steps": self._run,
                      "rows": last.rows, "dim": last.dim,
                      **({"loss_first": self._loss_first, "loss_last": self._loss_last}
                         if self._loss_first is not None else {})},
            where=[last.where] if last.where else [],
        )
