"""batch-collapse: the samples of a batch reach training collapsed into batch dimension 1."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, require
from traindoc.events import BatchShape, Event
from traindoc.findings import Finding


class BatchCollapse(Detector):
    """The sampler draws ``drawn`` >= 4 samples per batch, but every tensor of the collated
    batch has leading dimension 1, on ``confirm`` sampled batches: the collate function (a
    processor, a tokenizer call) treated the list of samples as one sample, so the model trains
    on one sequence per step (often truncated to one sample's length). Not judged: an
    iterator's last batch (may be partial), batches that carry the keys of deliberate packing
    (``position_ids``/``cu_seq_lens``: padding-free collators concatenate on purpose),
    loaders without automatic batching (``batch_size=None``)."""

    id = "batch-collapse"
    needs = frozenset({"batch_shape"})
    examples = (
        Example("zoo/batch_collapse_processor.py", 0),
        Example("zoo/healthy_packed_batches.py", None),
        Example("zoo/healthy_mlp.py", None),
    )

    # Carried over a resume: the collapsed batches in a row so far (at most confirm) and whether it
    # fired.
    carry = ("_run", "_fired")

    @dataclass(frozen=True)
    class Config:
        min_drawn: int = 4  # smaller batches are not judged
        confirm: int = 3  # sampled batches in a row

        def __post_init__(self) -> None:
            require(self, min_drawn=">= 2", confirm=">= 1")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._run: list[BatchShape] = []  # collapsed batches in a row
        self._fired = False

    def observe(self, event: Event) -> Iterator[Finding]:
        assert isinstance(event, BatchShape)
        if self._fired or event.last or event.packed or event.drawn < self.config.min_drawn:
            return
        if not event.dims or any(d != 1 for d in event.dims):
            self._run = []
            return
        self._run.append(event)
        if len(self._run) >= self.config.confirm:
            self._fired = True
            yield self._finding()

    def _finding(self) -> Finding:
        first = self._run[0]
        return finding(
            self.id, step=first.step,
            message=(
                f"The {first.loader} loader's sampler draws {first.drawn} samples per batch, but on "
                f"{len(self._run)} sampled batches in a row from step {first.step} every tensor of "
                f"the collated batch has batch dimension 1 ({', '.join(first.shapes[:3])}): the "
                f"model trains on one sequence per step instead of {first.drawn} samples"
                + (f"; collate_fn: {first.collate}." if first.collate else ".")
            ),
            evidence={"collate": first.collate, "loader": first.loader, "drawn": first.drawn, "shapes": list(first.shapes[:4]),
                      "batches": len(self._run)},
            where=[first.collate] if first.collate else [],
        )
