"""What a DataLoader batch holds and in which order its loader draws: ``Batch`` events for
``repeated-batch``.

Every batch of a sampled step gets a ``Batch`` event, and so do the first ``HEAD`` batches of
every pass over a loader and its last one, sampled or not: an epoch's start is where a
repeated order shows (``DistributedSampler`` without ``set_epoch``) and where a resume that
restarts the epoch replays batches, and its end says the pass was not interrupted. Per pass
that is a handful of hashes; other batches of unsampled steps pay a comparison and a lookup. A loop that takes one
batch of a fresh iterator every step (``next(iter(loader))``) is fingerprinted at its first
``_SINGLES`` passes only, and on sampled steps.

The fingerprint is a hash of a fixed strided sample of the batch's first tensor (host tensors:
read on the host, no device involved). A batch already on an accelerator gets two sums of that
sample computed on its device and read in the session's one batched transfer (``defer``): no
sync of ours. The sampler's order is read from the sampler itself at the first batch of a pass:
a ``DistributedSampler`` draws from ``seed + epoch``, a random sampler from its generator (or
torch's global one); equal keys mean the very same order.
"""

from __future__ import annotations

import hashlib
import weakref
from typing import Any, Iterable

import torch
from torch.utils.data import DistributedSampler, RandomSampler, SequentialSampler, SubsetRandomSampler
from torch.utils.data import WeightedRandomSampler

from traindoc.events import Batch, Event
from traindoc.live import measure
from traindoc.live.session import Session

HEAD = 4  # batches fingerprinted at the start of every pass, sampled step or not
_SINGLES = 8  # passes of one batch in a row (next(iter(loader)) per step) still fingerprinted
_RANDOM = (RandomSampler, SubsetRandomSampler, WeightedRandomSampler)


class BatchContent:
    """The core probe's helper for batch events (it owns the DataLoader patch)."""

    def __init__(self, session: Session) -> None:
        self.s = session
        self._longest = 1  # the furthest index the current pass reached within its head
        self._singles = 0  # passes in a row that never got a second batch
        # Each live iterator's last index: a pass's last batch says it ended (not interrupted).
        self._ends: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()

    def head(self, it: Any, index: int) -> bool:
        """Is this batch, drawn on an unsampled step, one its pass's start or end? (the check
        every batch pays: a comparison, and a weak-dict lookup past the head)"""
        if index > HEAD:
            return self._ends.get(it) == index
        if index == 0:
            self._singles = self._singles + 1 if self._longest == 0 else 0
            self._longest = 0
            try:
                self._ends[it] = len(it._index_sampler) - 1
            except (AttributeError, TypeError):
                pass
            return self._singles < _SINGLES
        self._longest = index
        return True  # index HEAD too: its draw says whether batch HEAD-1 was trained on

    def emit(self, it: Any, tensors: list[torch.Tensor], index: int, iterator: int) -> None:
        if not tensors:
            return
        clock = self.s.clock
        sampler, order, key, epoch = _order(it) if index == 0 else ("", "", "", -1)
        try:
            length = len(it._index_sampler)
        except (AttributeError, TypeError):
            length = -1
        fields: dict[str, Any] = dict(
            step=clock.current_step, loader=type(getattr(it, "_dataset", it)).__name__,
            iterator=iterator, index=index, loader_len=length, grad=torch.is_grad_enabled(),
            micro=0 if clock.round_done else clock.micro, sampler=sampler, order=order,
            order_key=key, epoch=epoch)
        first = next((t for t in tensors if t.device.type == "cpu"), tensors[0])
        shape = str(tuple(first.shape))
        if first.device.type == "cpu":
            sample = measure.strided(first).contiguous()
            digest = hashlib.blake2b(sample.view(torch.uint8).numpy().tobytes(), digest_size=8)
            digest.update(shape.encode())
            self.s.emit(Batch(fingerprint=digest.hexdigest(), **fields))
            return
        with torch.no_grad():  # on the device: two sums, read back with the step's other values
            sample = measure.strided(first).float()
            weights = torch.arange(1, sample.numel() + 1, device=sample.device, dtype=torch.float32)
            sums = torch.stack([sample.sum(), (sample * weights).sum()])

        def decode(vals: list[float]) -> Iterable[Event]:
            yield Batch(fingerprint=f"{vals[0]!r}/{vals[1]!r}/{shape}", **fields)

        self.s.defer(sums, decode)


def _order(it: Any) -> tuple[str, str, str, int]:
    """(sampler class, "shuffled"/"fixed"/"", order key, DistributedSampler epoch)."""
    batches = getattr(it, "_index_sampler", None)
    sampler = getattr(batches, "sampler", batches)
    name = type(sampler).__name__
    if isinstance(sampler, DistributedSampler):
        epoch = int(sampler.epoch)
        if not sampler.shuffle:
            return name, "fixed", "", epoch
        return name, "shuffled", f"seed {sampler.seed} epoch {epoch}", epoch
    if isinstance(sampler, SequentialSampler):
        return name, "fixed", "", -1
    if isinstance(sampler, _RANDOM):
        gen = getattr(sampler, "generator", None)
        # The generator's state now, before (one worker) or just after (workers, which draw at
        # the iterator's start) the sampler drew its permutation: equal states, equal orders.
        state = gen.get_state() if isinstance(gen, torch.Generator) else torch.random.get_rng_state()
        return name, "shuffled", hashlib.blake2b(state.numpy().tobytes(), digest_size=8).hexdigest(), -1
    shuffle = getattr(sampler, "shuffle", getattr(batches, "shuffle", None))
    return name, "shuffled" if shuffle is True else "fixed" if shuffle is False else "", "", -1


__all__ = ["BatchContent", "HEAD"]
