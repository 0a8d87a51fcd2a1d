"""lr-overridden-by-checkpoint: a resume would restore the checkpoint's LR over the configured one."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator, Sequence

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, fmt, require
from traindoc.events import Checkpoint, Event, StateLoad
from traindoc.findings import Finding


class LrOverriddenByCheckpoint(Detector):
    """The LR stored in a checkpoint's optimizer state is what ``optimizer.load_state_dict``
    restores on resume. Fires when ``expected_lr`` (``--expect-lr``: the LR you configure now) is
    none of the LRs the checkpoint would restore in any group (its ``initial_lr``, OneCycleLR's
    ``max_lr``, the scheduler's ``base_lrs``, or, without a scheduler, ``lr``), or when the
    stored state contradicts itself: the optimizer's current ``lr`` differs from the stored
    scheduler's ``_last_lr``, or its ``initial_lr`` from the scheduler's ``base_lrs`` (the LR was
    overwritten after the scheduler stepped, or the two states come from different runs).
    Without ``expected_lr`` and with a consistent state it stays quiet; the stored LRs are shown
    in the ``ckpt inspect`` summary.

    Live (the ``load`` signal), it compares the LRs just before and after
    ``optimizer.load_state_dict``: the groups' ``initial_lr`` when a scheduler wrote one (so an
    exact resume mid-schedule, whose current ``lr`` is the scheduled value, stays quiet), else
    ``lr``; and a scheduler's ``base_lrs`` before and after its ``load_state_dict``. A load
    counts only when its LRs are what the optimizer steps with: the live probe reports it at
    the optimizer's next ``step()``, and not at all when the script set the param groups' LR
    (or ``initial_lr``) itself in between, as nanoGPT does with ``get_lr(iter_num)`` before
    every step, or as the fix below does after loading."""

    id = "lr-overridden-by-checkpoint"
    needs = frozenset({"optimizer"})
    uses = frozenset({"train_state", "checkpoint", "load"})
    examples = (
        Example("ckpt/golden/lr_overwritten_after_scheduler.jsonl", 120),
        Example("ckpt/golden/complete_training.jsonl", None),
        Example("zoo/ckpt_lr_overridden.py", 30),
        Example("zoo/healthy_ckpt_resume.py", None),
        Example("zoo/healthy_nanogpt_resume.py", None),
        Example("zoo/healthy_linear_decay_resume.py", None),
    )

    @dataclass(frozen=True)
    class Config:
        expected_lr: float | None = None  # the LR the user configures (``--expect-lr``)
        rtol: float = 1e-6  # relative tolerance of LR comparisons

        def __post_init__(self) -> None:
            if self.expected_lr is not None and not (self.expected_lr > 0 and math.isfinite(self.expected_lr)):
                raise ValueError(f"expected_lr must be a positive number, got {self.expected_lr}")
            require(self, rtol="(0, 1)")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._ckpts: list[Checkpoint] = []
        self._live: Finding | None = None  # from a load_state_dict seen live

    def observe(self, event: Event) -> Iterator[Finding]:
        if isinstance(event, StateLoad):
            return self._loaded(event)
        if isinstance(event, Checkpoint) and event.lrs:
            self._ckpts.append(event)
        return iter(())

    def finish(self) -> Iterator[Finding]:
        if self._live is not None:
            yield self._live
            return
        for ck in self._ckpts:
            found = self._expected(ck) or self._inconsistent(ck)
            if found is not None:
                yield found
                return

    def _loaded(self, ev: StateLoad) -> Iterator[Finding]:
        if self._live is not None:
            return iter(())
        if ev.target != "optimizer":
            configured, loaded, what = ev.before, ev.after, "base_lrs"
        elif ev.initial_after:  # a scheduler's base LR (kept by a scheduler built after the load)
            configured, loaded, what = ev.initial_before or ev.before, ev.initial_after, "initial_lr"
        elif ev.initial_before:
            return iter(())  # the scheduler built before the load keeps its own base_lrs
        else:
            configured, loaded, what = ev.before, ev.after, "lr"
        if len(configured) != len(loaded):
            return iter(())
        bad = [i for i, (a, b) in enumerate(zip(configured, loaded))
               if math.isfinite(a) and math.isfinite(b) and not self._close(a, b)]
        if not bad:
            return iter(())
        i = bad[0]
        call = "optimizer.load_state_dict()" if ev.target == "optimizer" else "scheduler.load_state_dict()"
        at = f" at {ev.where}" if ev.where else ""
        src = f" from {ev.path}" if ev.path else " from the checkpoint"
        groups = f"group {i}" + (f" and {len(bad) - 1} more group(s)" if len(bad) > 1 else "")
        self._live = finding(
            self.id, step=ev.step,
            message=(
                f"{call}{at} replaced the configured {what} {fmt(configured[i])} of {ev.cls} with "
                f"{fmt(loaded[i])}{src} ({groups}): the run now trains with the checkpoint's LR, "
                f"not the one it was configured with (configured {_lrs(configured)}, loaded {_lrs(loaded)})."
            ),
            cause=(
                "Optimizer.load_state_dict restores every hyperparameter of each param group (lr, "
                "initial_lr, betas, weight_decay) and LR schedulers restore their base_lrs, so an "
                "LR changed in the config has no effect on a resumed run: a stale checkpoint (an "
                "earlier run's, auto-resumed) steers it."
            ),
            fix=(
                f"Decide explicitly: resume exactly with the checkpoint's settings (lr "
                f"{fmt(loaded[i])}), or start fresh (a new output folder, no auto-resume). To keep the "
                f"weights and moments but train at {fmt(configured[i])}: after "
                f"optimizer.load_state_dict(...), set `for g in optimizer.param_groups: g['lr'] = "
                f"g['initial_lr'] = {fmt(configured[i])}` and build the LR scheduler anew instead of "
                f"loading its state."
            ),
            evidence={"configured": list(configured), "loaded": list(loaded), "what": what,
                      "groups": bad[:20], "optimizer" if ev.target == "optimizer" else "scheduler": ev.cls,
                      "path": ev.path, "where": ev.where, "lr_before": list(ev.before),
                      "lr_after": list(ev.after)},
            where=[w for w in (ev.where, ev.path) if w],
        )
        return iter([self._live])

    def _close(self, a: float, b: float) -> bool:
        return abs(a - b) <= self.config.rtol * max(abs(a), abs(b))

    def _expected(self, ck: Checkpoint) -> Finding | None:
        want = self.config.expected_lr
        if want is None:
            return None
        restored = _restored(ck)
        if any(self._close(want, x) for x in restored):
            return None
        what = ("initial_lr" if ck.initial_lrs else "lr")
        shown = _lrs(ck.initial_lrs or ck.lrs)
        return finding(
            self.id, step=ck.step,
            message=(
                f"{ck.path} stores {what} {shown} in its optimizer state"
                + (f" (current lr {_lrs(ck.lrs)})" if ck.initial_lrs else "")
                + (f" and scheduler base_lrs {_lrs(ck.sched_base_lrs)}" if ck.sched_base_lrs else "")
                + f"; you configure lr {fmt(want)}. Resuming from it with optimizer.load_state_dict()"
                + (" and scheduler.load_state_dict()" if ck.sched_base_lrs else "")
                + f" restores the stored value{'s' if len(restored) > 1 else ''}, not yours."
            ),
            cause=(
                "Optimizer.load_state_dict restores every hyperparameter of each param group (lr, "
                "initial_lr, betas, weight_decay) and LR schedulers restore their base_lrs, so an "
                "LR changed in the config has no effect on a resumed run: the checkpoint steers it."
            ),
            fix=(
                "Either resume exactly with the old settings, or start fresh (a new output folder, "
                "no auto-resume). To keep the weights and moments but apply the new LR: after "
                "optimizer.load_state_dict(...), set `for g in optimizer.param_groups: g['lr'] = "
                f"g['initial_lr'] = {fmt(want)}` and build the scheduler anew instead of loading its state."
            ),
            evidence={"path": ck.path, "configured_lr": want, "stored_lr": list(ck.lrs),
                      "stored_initial_lr": list(ck.initial_lrs),
                      "scheduler_base_lrs": list(ck.sched_base_lrs), "step": ck.step},
            where=[ck.path],
        )

    def _inconsistent(self, ck: Checkpoint) -> Finding | None:
        pairs: list[tuple[str, Sequence[float], str, Sequence[float]]] = []
        if ck.sched_last_lrs and len(ck.sched_last_lrs) == len(ck.lrs):
            pairs.append(("lr", ck.lrs, "_last_lr", ck.sched_last_lrs))
        if ck.sched_base_lrs and len(ck.sched_base_lrs) == len(ck.initial_lrs):
            pairs.append(("initial_lr", ck.initial_lrs, "base_lrs", ck.sched_base_lrs))
        for opt_key, opt_vals, sched_key, sched_vals in pairs:
            bad = [i for i, (a, b) in enumerate(zip(opt_vals, sched_vals))
                   if math.isfinite(a) and math.isfinite(b) and not self._close(a, b)]
            if not bad:
                continue
            i = bad[0]
            return finding(
                self.id, step=ck.step,
                message=(
                    f"{ck.path}: the optimizer's {opt_key} {_lrs(opt_vals)} disagrees with the stored "
                    f"scheduler's {sched_key} {_lrs(sched_vals)} (group {i}: {fmt(opt_vals[i])} vs "
                    f"{fmt(sched_vals[i])}). A resume restores the optimizer's value until the "
                    "scheduler's next step, and then whichever the scheduler computes from."
                ),
                cause=(
                    "The LR was overwritten in param_groups after the scheduler stepped (a manual "
                    "warmup or 'LR reset' next to a scheduler), or the optimizer and scheduler "
                    "states come from different runs or configs (a stale checkpoint)."
                ),
                fix=(
                    "Let one object own the LR: drop manual writes to param_groups['lr'] when a "
                    "scheduler is used (or step the scheduler after them). If the states come from "
                    "different runs, start fresh or rebuild the scheduler after loading the optimizer."
                ),
                evidence={"path": ck.path, f"optimizer_{opt_key}": list(opt_vals),
                          f"scheduler_{sched_key}": list(sched_vals), "groups": bad[:20], "step": ck.step},
                where=[ck.path],
            )
        return None


def _restored(ck: Checkpoint) -> list[float]:
    """The LRs a resume would restore as the run's configured value(s)."""
    if ck.initial_lrs or ck.max_lrs or ck.sched_base_lrs:
        return list(ck.initial_lrs) + list(ck.max_lrs) + list(ck.sched_base_lrs)
    return list(ck.lrs)


def _lrs(values: Sequence[float]) -> str:
    uniq = list(dict.fromkeys(values))
    return fmt(uniq[0]) if len(uniq) == 1 else "[" + ", ".join(fmt(v) for v in values[:8]) + "]"
