"""repeated-batch: the loop trains on the same data again: one batch over and over, the same
order every epoch, or batches replayed after a resume."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, require
from traindoc.detectors._maths import Head
from traindoc.events import Batch, Checkpoint, Event, StateLoad
from traindoc.findings import EvidenceValue, Finding


_WINDOW = 4096  # fingerprints remembered per iterator
_PASSES = 64  # passes over a loader remembered (besides each loader's first of an era)
_PER_PASS = 4096  # batches remembered per pass (the first HEAD and sampled steps' ones)
_STATE = 32  # saves and loads remembered

ABANDONED, WITHIN, SAME_ORDER, REPLAYED = "abandoned", "within", "same-order", "replayed"


@dataclass
class _Pass:
    """One pass over a loader (one iterator) as its recorded batches show it."""

    iterator: int
    loader: tuple[str, int, str]  # dataset class, batches per pass, sampler class
    first_step: int
    order: str = ""
    order_key: str = ""
    epoch: int = -1
    batches: dict[int, tuple[str, int, int]] = field(default_factory=dict)  # index -> (fp, step, micro)
    trained: set[int] = field(default_factory=set)  # the next draw came after a backward
    skipped: set[int] = field(default_factory=set)  # the next draw came before any backward
    last: int = -1  # the highest index drawn


class RepeatedBatch(Detector):
    """Four patterns, all measured on DataLoader batches (full-batch training without a loader
    never fires); batches drawn with gradients disabled (an evaluation) are not judged, except
    by the first two.

    - A fresh iterator per step that is abandoned after its first batch and yields the same data
      each time (``next(iter(loader))``).
    - An identical batch twice within one pass over the data (workers seeded alike), among its
      last 4,096 batches.
    - The same order every epoch: a *shuffling* sampler (``shuffle=True``, a
      ``DistributedSampler(shuffle=True)``) that draws the very same order in two passes: its
      own state says so (a DistributedSampler's ``seed + epoch``, a random sampler's generator
      state at the pass's start), or, for a sampler that only says it shuffles, at least 3
      batches at the same positions are identical and none differs. A fixed order
      (``shuffle=False``, ``SequentialSampler``) repeating every epoch is the user's choice and
      stays quiet, and so does a sampler that says nothing of its order. Passes are compared
      within one launch: from the run's start or from the latest checkpoint load.
    - Batches replayed after a resume: after an optimizer's state was loaded from a checkpoint
      saved mid-epoch, the training batches at the start of the new pass are those the
      interrupted pass had trained on before the save (same positions, same content or the
      sampler's same order). A resume that skips the consumed batches (``islice``, a
      ``continue`` per consumed batch: drawn, but not trained on), one that starts a fresh
      epoch, and batches drawn after the save (lost with the preempted job) stay quiet.

    Each pass's first batches are fingerprinted whatever the step (its start is where these
    show), the others on sampled steps.
    """

    id = "repeated-batch"
    needs = frozenset({"batch"})
    uses = frozenset({"train_state", "checkpoint", "load"})
    examples = (
        Example("zoo/repeated_batch.py", 0),
        Example("zoo/ddp_contrastive_no_set_epoch.py", 8),
        Example("zoo/recsys_reseeded_each_epoch.py", 12),
        Example("zoo/diffusion_resume_restarts_epoch.py", 25),
        Example("zoo/healthy_mlp.py", None),
        Example("zoo/healthy_ddp_contrastive_set_epoch.py", None),
        Example("zoo/healthy_recsys_seeded_once.py", None),
        Example("zoo/healthy_diffusion_resume_skips.py", None),
    )

    @dataclass(frozen=True)
    class Config:
        repeats: int = 3

        def __post_init__(self) -> None:
            require(self, repeats=">= 1")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._prev: Batch | None = None
        self._abandoned: Head[int] = Head(20)  # steps of each pattern: how many, the first 20
        self._within: Head[int] = Head(20)
        # Fingerprints per iterator (the last 4), each the latest _WINDOW of its pass: workers
        # seeded alike repeat within a few batches, and an endless iterator stays bounded.
        self._seen: dict[int, dict[str, None]] = {}
        self._passes: dict[int, _Pass] = {}  # iterator -> its pass (training draws only)
        self._saves: list[tuple[int, str]] = []  # (step, path) of training checkpoints
        self._loads: list[tuple[int, int | None]] = []  # (step, step of the save it read)
        self._order: dict[str, EvidenceValue] = {}  # SAME_ORDER evidence, once found
        self._replay: dict[str, EvidenceValue] = {}  # REPLAYED evidence, once found
        self._fired: list[str] = []  # the patterns found, in order
        self._first: dict[str, int] = {}  # pattern -> the step of its finding

    def observe(self, event: Event) -> Iterator[Finding]:
        if isinstance(event, Checkpoint):
            if event.step is not None:
                self._saves = (self._saves + [(event.step, event.path)])[-_STATE:]
            return
        if isinstance(event, StateLoad):
            self._on_load(event)
            yield from self._judge_replay()
            return
        assert isinstance(event, Batch)
        yield from self._old_patterns(event)
        if not event.grad:
            return
        self._record(event)
        yield from self._judge_order(event)
        if self._loads:
            yield from self._judge_replay()

    def finish(self) -> Iterator[Finding]:
        if REPLAYED in self._fired:
            self._find_replay()  # the evidence as the whole run shows it
        if self._fired:
            yield self._finding()

    # ---- one batch over and over ----------------------------------------------------------------
    def _old_patterns(self, event: Batch) -> Iterator[Finding]:
        prev, self._prev = self._prev, event
        if (prev is not None and event.index == 0 and prev.index == 0 and event.iterator != prev.iterator
                and event.fingerprint == prev.fingerprint and event.loader_len > 1 and event.grad == prev.grad):
            self._abandoned.append(event.step)
        seen = self._seen.setdefault(event.iterator, {})
        if event.fingerprint in seen:
            self._within.append(event.step)
            del seen[event.fingerprint]  # re-added as the latest
        seen[event.fingerprint] = None
        if len(seen) > _WINDOW:
            del seen[next(iter(seen))]
        if len(self._seen) > 4:
            self._seen.pop(min(self._seen))
        for kind, found in ((ABANDONED, self._abandoned), (WITHIN, self._within)):
            if kind not in self._fired and len(found) >= self.config.repeats:
                steps = found.items
                yield from self._fire(kind, steps[0] - 1 if steps[0] > 0 else 0)

    # ---- passes -----------------------------------------------------------------------------
    def _record(self, e: Batch) -> None:
        p = self._passes.get(e.iterator)
        if p is None:
            p = _Pass(e.iterator, (e.loader, e.loader_len, e.sampler), e.step)
            self._passes[e.iterator] = p
            if len(self._passes) > _PASSES:
                self._forget()
        if e.index == 0:
            p.order, p.order_key, p.epoch = e.order, e.order_key, e.epoch
            p.loader = (e.loader, e.loader_len, e.sampler)
        before = p.batches.get(e.index - 1)
        if before is not None:  # the draw before this one: trained on if a backward came between
            (p.skipped if (before[1], before[2]) == (e.step, e.micro) else p.trained).add(e.index - 1)
        if len(p.batches) < _PER_PASS:
            p.batches[e.index] = (e.fingerprint, e.step, e.micro)
        p.last = max(p.last, e.index)
        if e.loader_len > 0 and e.index == e.loader_len - 1:
            p.trained.add(e.index)  # the pass's last batch: nothing to skip it for

    def _forget(self) -> None:
        """Drop the oldest pass that is nobody's reference."""
        keep = {self._reference(p).iterator for p in self._passes.values()}
        for it in sorted(self._passes):
            if it not in keep:
                del self._passes[it]
                return

    def _era(self, step: int) -> int:
        """Loads at or before ``step``: passes of different eras belong to different launches."""
        return sum(1 for at, _ in self._loads if at <= step)

    def _reference(self, p: _Pass) -> _Pass:
        """The first training pass over ``p``'s loader in ``p``'s era."""
        era = self._era(p.first_step)
        for q in sorted(self._passes.values(), key=lambda q: q.iterator):
            if q.loader == p.loader and q.trained and self._era(q.first_step) == era:
                return q
        return p

    # ---- the same order every epoch ---------------------------------------------------------------
    def _judge_order(self, e: Batch) -> Iterator[Finding]:
        if SAME_ORDER in self._fired:
            return
        p = self._passes.get(e.iterator)
        if p is None or p.order != "shuffled" or not p.trained:
            return
        ref = self._reference(p)
        if ref is p:
            return
        same_key = bool(p.order_key) and p.order_key == ref.order_key
        hits = [i for i, b in p.batches.items() if i in ref.batches and ref.batches[i][0] == b[0]]
        misses = [i for i, b in p.batches.items() if i in ref.batches and ref.batches[i][0] != b[0]]
        if not same_key and not (not p.order_key and len(hits) >= self.config.repeats and not misses):
            return
        self._order = {
            "sampler": p.loader[2], "passes_compared": [ref.iterator, p.iterator],
            "first_pass_step": ref.first_step, "repeat_pass_step": p.first_step,
            "same_sampler_state": same_key, "sampler_epoch": [ref.epoch, p.epoch],
            "identical_batches": len(hits), "different_batches": len(misses),
        }
        yield from self._fire(SAME_ORDER, p.first_step)

    # ---- batches replayed after a resume ------------------------------------------------------------
    def _on_load(self, load: StateLoad) -> None:
        saved = [s for s, path in self._saves if s <= load.step and (not load.path or path == load.path)]
        if not saved:
            saved = [s for s, _ in self._saves if s <= load.step]
        if any(at == load.step for at, _ in self._loads):
            return  # the optimizer's and the scheduler's load of one resume
        self._loads = (self._loads + [(load.step, max(saved) if saved else None)])[-_STATE:]

    def _judge_replay(self) -> Iterator[Finding]:
        if REPLAYED not in self._fired and self._find_replay():
            yield from self._fire(REPLAYED, int(str(self._replay["first_step"])))

    def _find_replay(self) -> bool:
        """Look for a replay after each load; its evidence goes to ``_replay``."""
        for at, saved in self._loads:
            if saved is None:
                continue
            firsts: dict[tuple[str, int, str], _Pass] = {}  # the first pass over each loader since the load
            for p in sorted(self._passes.values(), key=lambda q: q.iterator):
                if p.first_step >= at and self._era(p.first_step) == self._era(at):
                    firsts.setdefault(p.loader, p)
            for new in firsts.values():
                since = max((a for a, _ in self._loads if a < at), default=-1)
                old = self._interrupted(new, saved, since)
                if old is None:
                    continue
                consumed = {i: b for i, b in old.batches.items() if b[1] < saved}
                top = max(consumed)
                same_content = sorted(i for i in new.trained if i in consumed and new.batches[i][0] == consumed[i][0])
                same_order = bool(new.order_key) and new.order_key == old.order_key
                replayed = same_content or (sorted(i for i in new.trained if i <= top) if same_order else [])
                if not replayed:
                    continue
                self._replay = {
                    "load_step": at, "checkpoint_step": saved, "interrupted_pass_step": old.first_step,
                    "consumed_before_save": top + 1, "replayed_positions": replayed[:10],
                    "identical_batches": len(same_content), "same_sampler_state": same_order,
                    "first_step": new.batches[replayed[0]][1],
                }
                return True
        return False

    def _interrupted(self, new: _Pass, saved: int, since: int) -> _Pass | None:
        """The pass over ``new``'s loader that was under way when the checkpoint was saved: the
        latest training pass of that launch (begun after the load at ``since``) begun before the
        save, if it had not reached its last batch by then."""
        begun = [p for p in self._passes.values() if p.loader == new.loader and p is not new
                 and since <= p.first_step < saved and p.trained]
        if not begun:
            return None
        p = max(begun, key=lambda q: q.first_step)
        length = p.loader[1]
        if length > 0:
            done = any(b[1] < saved and i == length - 1 for i, b in p.batches.items())
        else:  # an unknown length: only a pass seen going on after the save was interrupted
            done = not any(b[1] >= saved for b in p.batches.values())
        return None if done else p

    # ---- findings ---------------------------------------------------------------------------------
    def _fire(self, kind: str, step: int) -> Iterator[Finding]:
        self._fired.append(kind)
        self._first[kind] = step
        yield self._finding()

    def _finding(self) -> Finding:
        kind = self._fired[0]
        step = self._first[kind]
        also = [k for k in self._fired[1:]]
        note = f" Also seen: {', '.join(_NAMES[k] for k in also)}." if also else ""
        if kind == SAME_ORDER:
            message, cause, fix, evidence = self._same_order_text()
        elif kind == REPLAYED:
            message, cause, fix, evidence = self._replay_text()
        else:
            message, cause, fix, evidence = self._repeat_text(kind)
        evidence = dict(evidence, patterns=list(self._fired))
        return finding(self.id, step=step, message=message + note, cause=cause, fix=fix, evidence=evidence)

    def _repeat_text(self, kind: str) -> tuple[str, str, str, dict[str, EvidenceValue]]:
        if kind == ABANDONED:
            found, how = self._abandoned, (
                "each step made a new DataLoader iterator, took its first batch and dropped it; "
                "that batch was identical every time")
            cause = ("`next(iter(loader))` inside the loop restarts the loader each step; with "
                     "shuffle=False it always returns the first batch.")
            fix = ("Create the iterator once per epoch (`for x, y in loader:`), or keep one "
                   "`it = iter(loader)` and call `next(it)`, re-creating it on StopIteration.")
        else:
            found, how = self._within, "the same batch came back within one pass over the data"
            cause = ("DataLoader workers produce identical 'random' data: each worker inherits the "
                     "same NumPy/random seed, so random augmentation or sampling repeats.")
            fix = ("Seed per worker with `worker_init_fn` (np.random.seed(torch.initial_seed() % 2**32)) "
                   "or use torch's RNG in the dataset.")
        steps = found.items
        message = f"{how}: {found.count} steps repeated an earlier batch (first at step {steps[0]})."
        return message, cause, fix, {"repeated_steps": found.count, "first_steps": list(steps)}

    def _same_order_text(self) -> tuple[str, str, str, dict[str, EvidenceValue]]:
        ev = self._order
        sampler = str(ev["sampler"])
        epochs = ev["sampler_epoch"]
        assert isinstance(epochs, list)
        epoch = int(epochs[1])
        state = f"its epoch was {epoch} at both" if epoch >= 0 else "its generator was in the same state at both"
        why = f"{state} passes' start" if ev["same_sampler_state"] else ""
        content = f"{ev['identical_batches']} batches at the same positions were identical"
        seen = "; ".join(x for x in (why, content if ev["identical_batches"] else "") if x)
        message = (f"same order every epoch: the shuffling {sampler} drew the pass that began at step "
                   f"{ev['repeat_pass_step']} in the order of the pass that began at step "
                   f"{ev['first_pass_step']} ({seen}). Each epoch trains on the same sequence of batches.")
        if sampler == "DistributedSampler":
            cause = ("`DistributedSampler(shuffle=True)` shuffles with `seed + epoch`; without "
                     "`sampler.set_epoch(epoch)` the epoch stays the same and every epoch repeats "
                     "the first one's order.")
            fix = "Call `train_sampler.set_epoch(epoch)` at the start of every epoch, before iterating the loader."
        else:
            cause = ("The loader's random generator is put back to the same state before each epoch "
                     "(a `torch.manual_seed(...)` or `generator.manual_seed(...)` inside the epoch "
                     "loop, or a DataLoader rebuilt each epoch with a freshly seeded generator).")
            fix = ("Seed once before training and keep one generator for the whole run "
                   "(or seed with `seed + epoch`), so each epoch draws a new permutation.")
        return message, cause, fix, dict(ev)

    def _replay_text(self) -> tuple[str, str, str, dict[str, EvidenceValue]]:
        ev = self._replay
        positions = ev["replayed_positions"]
        assert isinstance(positions, list)
        how = (f"{ev['identical_batches']} of them identical to the batches trained then"
               if ev["identical_batches"] else "the sampler drew the same order again")
        message = (f"batches replayed after a resume: the checkpoint loaded at step {ev['load_step']} was "
                   f"saved at step {ev['checkpoint_step']}, {ev['consumed_before_save']}+ batches into an "
                   f"epoch; the resumed run trained again on that epoch's batches at positions "
                   f"{positions} ({how}), batches whose effect is already in the checkpointed weights.")
        cause = ("The resumed job restarts the interrupted epoch at batch 0 (the loader is iterated "
                 "from the start with the same order) instead of where the checkpoint left it.")
        fix = ("Save the position in the epoch (batches consumed, or the sampler's/DataLoader's "
               "state, e.g. torchdata's StatefulDataLoader) with the checkpoint, and on resume skip "
               "the consumed batches (`itertools.islice(loader, consumed, None)`) or start the sampler "
               "there.")
        return message, cause, fix, dict(ev)


_NAMES = {ABANDONED: "one batch taken from a fresh iterator every step", WITHIN: "a batch repeated within one pass",
          SAME_ORDER: "the same order every epoch", REPLAYED: "batches replayed after a resume"}
