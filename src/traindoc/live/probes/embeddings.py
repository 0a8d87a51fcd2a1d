"""The embeddings a training loss compares by direction (``representation-collapse``).

Self-supervised losses compare the embeddings of two views by their direction: SimSiam's
negative cosine similarity (``F.cosine_similarity``, ``nn.CosineSimilarity``), BYOL's and
SimCLR's or MoCo's normalized embeddings (``F.normalize``, then a dot product or a matmul). A
model that maps every input to one direction is the trivial minimum of a loss that only pulls
two views together (SimSiam's reaches -1) and learns nothing.

On sampled training steps (grad enabled) the op-level mode (probes/_ops.py) hands this probe
each such call on a ``[N, D]`` batch, along its last dimension, with N >= 8 and D >= 2. For
the step's first ``_CALLS`` calls, the spread of the rows' directions, sqrt(1 - |mean unit
row|^2), is computed on the device. It is read in the step's batched transfer. At the
round's end the step's largest spread becomes one ``Embeddings`` event with that call's
file:line: the least collapsed embeddings compared. A parameter (a cosine classifier's
normalized weight) and rows broadcast from one vector are no batch of embeddings and are
left out.
"""

from __future__ import annotations

from typing import Any, Iterable

import torch
import torch.nn.functional as F

from traindoc.events import Embeddings, Event
from traindoc.live.objects import user_site
from traindoc.live.probes._ops import torch_function
from traindoc.live.probes._patch import Patcher
from traindoc.live.probes.base import Probe
from traindoc.live.session import Session

_MIN_ROWS = 8
_CALLS = 16  # calls measured per step (a loss over many crops makes more)
_NORMALIZE = torch_function(F.normalize)


class EmbeddingsProbe(Probe):
    name = "embeddings"
    signals = ("embeddings",)

    def __init__(self, session: Session, patcher: Patcher) -> None:
        super().__init__(session, patcher)
        self._on = False  # a sampled step of a level that measures activations
        # step -> its calls' (spread, N, D, where): a round closes when the next step has begun
        self._calls: dict[int, list[tuple[torch.Tensor, int, int, str]]] = {}

    def install(self) -> None:
        self._ops.listen(self.name, [_NORMALIZE, torch_function(F.cosine_similarity)], self._seen)
        self._on = self.s.level.activations and self.clock.sampled

    def uninstall(self) -> None:
        """The run's last round, which no next step closes, is read with the session's last flush."""
        if self._calls:
            self.on_sampled_round_end(max(self._calls))

    def on_sampling(self, on: bool) -> None:
        self._on = on

    def _seen(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        if not self._on or not torch.is_grad_enabled():
            return
        step = self.clock.current_step
        calls = self._calls.setdefault(step, [])
        if len(calls) >= _CALLS:
            return
        # normalize(input, p, dim), cosine_similarity(x1, x2, dim): dim is the third either way
        names = ("input",) if func is _NORMALIZE else ("x1", "x2")
        tensors = list(args[:len(names)]) or [kwargs.get(n) for n in names]
        dim = args[2] if len(args) > 2 else kwargs.get("dim", 1)
        batches = [t for t in tensors if _batch(t, dim)]
        if not batches:
            return
        where = user_site()  # the loss's line, not nn.CosineSimilarity's inside torch
        with torch.no_grad():
            for t in batches:
                calls.append((_spread(t.detach()), int(t.shape[0]), int(t.shape[1]), where))

    def on_sampled_round_end(self, step: int) -> None:
        for at in sorted(k for k in self._calls if k <= step):
            calls = self._calls.pop(at)
            if calls:
                self._guard(self.name, self._publish, at, calls)

    def _publish(self, step: int, calls: list[tuple[torch.Tensor, int, int, str]]) -> None:
        dev = calls[0][0].device
        packed = torch.stack([c[0].to(dev) for c in calls])

        def decode(vals: list[float]) -> Iterable[Event]:
            i = max(range(len(vals)), key=lambda k: (vals[k] == vals[k], vals[k]))  # a finite one first
            _, rows, dim, where = calls[i]
            yield Embeddings(step=step, spread=vals[i], rows=rows, dim=dim, where=where)

        self.s.defer(packed, decode)


def _batch(t: Any, dim: Any) -> bool:
    """A batch of embeddings: ``[N, D]`` floats along the last dimension, N >= 8, D >= 2, not a
    parameter and not one row broadcast over the batch."""
    return (isinstance(t, torch.Tensor) and not isinstance(t, torch.nn.Parameter) and t.ndim == 2
            and dim in (1, -1) and t.is_floating_point() and t.shape[0] >= _MIN_ROWS and t.shape[1] >= 2
            and t.stride(0) != 0)


def _spread(x: torch.Tensor) -> torch.Tensor:
    """sqrt(1 - |mean unit row|^2), on the device (no sync): the rows' directions, 1 spread
    evenly, 0 all one. NaN/Inf rows count as they are (the step's other probes report them)."""
    x = x.float()
    unit = x / x.norm(dim=1, keepdim=True).clamp_min(1e-12)
    mean = unit.mean(0)
    return (1.0 - (mean * mean).sum()).clamp_min(0.0).sqrt()
