"""repeated-batch on hand-made event streams: the same order every epoch and batches replayed
after a resume, each beside the healthy stream that must stay quiet; and the sampler's order as
the live probe reads it."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from traindoc.detectors.repeated_batch import RepeatedBatch
from traindoc.events import Batch, Checkpoint, Event, StateLoad
from traindoc.live.probes.batches import _order


def _batch(step: int, iterator: int, index: int, fp: str, *, order: str = "shuffled", key: str = "",
           grad: bool = True, length: int = 4, micro: int = 0) -> Batch:
    return Batch(step=step, loader="TensorDataset", iterator=iterator, index=index, fingerprint=fp,
                 loader_len=length, grad=grad, micro=micro, sampler="RandomSampler", order=order,
                 order_key=key if index == 0 else "")


def _epochs(n: int, *, fps: list[list[str]], order: str = "shuffled", keys: list[str] | None = None,
            grad: bool = True) -> list[Event]:
    out: list[Event] = []
    step = 0
    for e in range(n):
        for i, fp in enumerate(fps[e]):
            out.append(_batch(step, e + 1, i, fp, order=order, key=(keys or [""] * n)[e], grad=grad))
            step += 1
    return out


def _fired(events: list[Event]) -> dict[str, object]:
    det = RepeatedBatch()
    found = [f for e in events for f in det.observe(e)] + list(det.finish())
    return {"step": found[0].step, **found[-1].evidence} if found else {}


def test_same_sampler_state_every_epoch_fires() -> None:
    fps = [["a", "b", "c", "d"], ["e", "f", "g", "h"], ["i", "j", "k", "l"]]  # augmented: content differs
    found = _fired(_epochs(3, fps=fps, keys=["k0", "k0", "k0"]))
    assert found["step"] == 4 and found["patterns"] == ["same-order"] and found["same_sampler_state"]


def test_fresh_shuffle_every_epoch_is_quiet() -> None:
    fps = [["a", "b", "c", "d"], ["c", "a", "d", "b"], ["b", "d", "a", "c"]]
    assert _fired(_epochs(3, fps=fps, keys=["k0", "k1", "k2"])) == {}


def test_same_content_of_a_sampler_that_only_says_it_shuffles_fires() -> None:
    fps = [["a", "b", "c", "d"]] * 2
    assert _fired(_epochs(2, fps=fps))["identical_batches"] >= 3


def test_fixed_order_every_epoch_is_a_choice() -> None:
    fps = [["a", "b", "c", "d"]] * 3
    assert _fired(_epochs(3, fps=fps, order="fixed")) == {}
    assert _fired(_epochs(3, fps=fps, order="")) == {}  # a sampler that says nothing of its order


def test_evaluation_passes_are_not_judged() -> None:
    fps = [["a", "b", "c", "d"]] * 3
    assert _fired(_epochs(3, fps=fps, keys=["k"] * 3, grad=False)) == {}


def _resume(skip: int) -> list[Event]:
    """Epoch 0 of 8 batches is preempted after 5 (checkpoint at step 5), then resumed at step 5:
    the new pass skips ``skip`` batches (drawn at the same step, no backward between)."""
    fps = [f"b{i}" for i in range(8)]
    out: list[Event] = [_batch(s, 1, s, fps[s], order="fixed", length=8) for s in range(7)]  # 5, 6 lost
    out.append(Checkpoint(step=5, path="/ckpt.pt", format="torch-dict", training=True))
    step = 5
    for i in range(8):
        out.append(_batch(step, 2, i, fps[i], order="fixed", length=8))
        if i == 0:
            out.append(StateLoad(step=5, target="optimizer", cls="AdamW", before=(1e-3,), after=(1e-3,),
                                 path="/ckpt.pt"))
        if i >= skip:
            step += 1
    return out


def test_a_resume_that_restarts_the_epoch_replays_its_batches() -> None:
    found = _fired(_resume(skip=0))
    assert found["patterns"] == ["replayed"] and found["step"] == 5
    assert found["replayed_positions"] == [0, 1, 2, 3, 4] and found["checkpoint_step"] == 5


def test_a_resume_that_skips_the_consumed_batches_is_quiet() -> None:
    assert _fired(_resume(skip=5)) == {}


def test_sampler_order_keys() -> None:
    data = TensorDataset(torch.arange(16.0))

    def key(loader: DataLoader) -> tuple[str, str, str, int]:
        it = iter(loader)
        next(it)
        return _order(it)

    sampler = DistributedSampler(data, num_replicas=2, rank=0, shuffle=True)
    loader = DataLoader(data, batch_size=2, sampler=sampler)
    first = key(loader)
    assert first[1] == "shuffled" and key(loader) == first  # no set_epoch: the same order
    sampler.set_epoch(1)
    assert key(loader)[2] != first[2]
    assert key(DataLoader(data, batch_size=2))[1] == "fixed"
    torch.manual_seed(0)
    a = key(DataLoader(data, batch_size=2, shuffle=True))
    b = key(DataLoader(data, batch_size=2, shuffle=True))
    torch.manual_seed(0)
    c = key(DataLoader(data, batch_size=2, shuffle=True))
    assert a[1] == "shuffled" and a[2] != b[2] and a[2] == c[2]  # re-seeded: the same order
