"""The rollback guard (opt-in: ``traindoc run --guard``, ``traindoc.watch(guard=True)``).

The one place where traindoc acts on the training instead of observing it (style.md §8: acting
is policy outside detectors). Seed 003 §11, "Rollback on Loss Spike":

    if loss > 3 * loss_moving_avg:
        model.load_state_dict(last_good_checkpoint)
        for g in optimizer.param_groups: g['lr'] *= 0.5

What it does, after every ``optimizer.step()``:

1. Reads this step's loss now (``Session.flush``: one device sync per step, the guard's price;
   without the guard, traindoc reads device values on sampled steps only).
2. Feeds the event stream to its own instances of the ``loss-spike`` and ``nonfinite``
   detectors (the engine announces an id once; the guard must see every occurrence). It reacts
   to a loss spike and to a non-finite loss or parameter (a non-finite gradient with a finite
   loss is what an AMP GradScaler skips on its own).
3. Keeps the last states in memory: every ``every`` steps a copy of the parameters the
   optimizers hold, the optimizers' state and the models' buffers (on their device, no
   transfer); the two newest copies are kept, the first being the state before the first step.
   ``loss-spike`` reports a spike once the loss is back down (a step or more after the jump),
   so the state restored is the newest one taken at least two steps before the step the
   finding names: its own next loss came before the trouble.
4. On a trigger: restores that state, multiplies the LR by ``factor`` (each group's ``lr``
   and ``initial_lr``/``max_lr``/``min_lr``, and the ``base_lrs`` of LR schedulers on that
   optimizer, so a schedule does not undo it), and reports it as a ``guard-rollback`` finding.
   After ``max_rollbacks`` rollbacks, the next trigger restores the good state once more and
   raises ``GuardStop`` (a BaseException, like KeyboardInterrupt, so a broad ``except
   Exception`` in the loop does not swallow it): training stops with a clear message.

The data loader is not rewound: the batches between the good state and the trigger are not
replayed. Off by default; when off, nothing here is installed.

One process only: in data-parallel training each rank would roll back on its own loss and the
replicas would diverge, so the guard refuses a job of several ranks: before the run when a
launcher says so (``WORLD_SIZE``, ``mp.spawn`` with several processes: ``refuse_ranks``), and
at the first optimizer step when the script joined a process group of two or more ranks.
"""

from __future__ import annotations

import gc
import sys
from dataclasses import dataclass
from typing import Any, Mapping

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from traindoc import detectors
from traindoc.catalog import finding
from traindoc.events import Event, Scalar, Series
from traindoc.findings import Finding, fmt
from traindoc.live.objects import ObjectMap
from traindoc.live.session import Session

TRIGGERS = ("loss-spike", "nonfinite")
KEEP = 2  # states kept in memory
_LR_KEYS = ("lr", "initial_lr", "max_lr", "min_lr")


class GuardStop(BaseException):
    """Raised from ``optimizer.step()`` when the guard gives up after its rollbacks."""


def refusal(ranks: int) -> str:
    return (f"--guard works on one process only, and this job has {ranks} ranks: each rank would roll "
            "back on its own loss and the model replicas would diverge. Run without --guard.")


def refuse_ranks() -> None:
    """UsageError when a launcher started several ranks (torchrun sets WORLD_SIZE)."""
    from traindoc.errors import UsageError
    from traindoc.live.ranks import launched_ranks

    if launched_ranks() > 1:
        raise UsageError(refusal(launched_ranks()))


@dataclass(frozen=True)
class GuardConfig:
    every: int = 10  # steps between snapshots of the state
    factor: float = 0.5  # LR multiplier applied at each rollback
    max_rollbacks: int = 3

    def __post_init__(self) -> None:
        detectors.require(self, every=">= 1", factor="(0, 1]", max_rollbacks=">= 0")


@dataclass
class _Snapshot:
    step: int  # the state after this step's update (-1: before the first step)
    params: ObjectMap  # optimizer -> copies of its parameters
    optim: ObjectMap  # optimizer -> its copied state_dict
    buffers: list[tuple[torch.Tensor, torch.Tensor]]  # (live buffer, copy)


class Guard:
    def __init__(self, session: Session, config: GuardConfig | None = None,
                 detector_config: Mapping[str, Mapping[str, object]] | None = None,
                 announce: bool = True) -> None:
        self.s = session
        self.config = config or GuardConfig()
        self._detector_config = dict(detector_config or {})
        self._dets = detectors.build(select=TRIGGERS, config=self._detector_config)
        self._announce = announce
        self._opts = ObjectMap()  # the optimizers seen stepping
        self._handles: list[Any] = []
        self._snaps: list[_Snapshot] = []  # oldest first, at most KEEP
        self._trigger: Finding | None = None
        self._rollbacks: list[dict[str, Any]] = []
        self._broken = ""
        self._last_step = -1

    def install(self) -> None:
        self._handles.append(register_optimizer_step_pre_hook(self._pre))
        self._handles.append(register_optimizer_step_post_hook(self._post))
        self.s.event_listeners.append(self._on_event)

    def uninstall(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
        if self._on_event in self.s.event_listeners:
            self.s.event_listeners.remove(self._on_event)
        self._snaps = []

    # ---- watching ------------------------------------------------------------------------------
    def _on_event(self, event: Event) -> None:
        if self._broken:
            return
        try:
            # A Scalar as a one-point column: the detectors' one way in for numbers.
            one = {event.name: Series(event.name, [event.step], [event.value])} if isinstance(event, Scalar) else None
            for det in self._dets:
                if event.signal not in det.needs | det.uses:
                    continue
                for f in (det.observe(event) if one is None else det.observe_series(one)) or ():
                    if self._trigger is None and _acts_on(f):
                        self._trigger = f
        except Exception as exc:  # the guard must never break the run it protects
            self._disable(exc)

    def _pre(self, opt: Any, args: Any, kwargs: Any) -> None:
        if self._broken or self._snaps:
            return
        from traindoc.live.ranks import world

        joined = world()
        if joined is not None:  # a process group of several ranks, joined without a launcher
            self._broken = "several ranks"
            raise GuardStop(f"traindoc {refusal(joined[1])}")
        try:
            self._opts[opt] = True
            self._snaps.append(self._take(-1))  # the state before the first update
        except Exception as exc:
            self._disable(exc)

    def _post(self, opt: Any, args: Any, kwargs: Any) -> None:
        if self._broken:
            return
        try:
            if opt not in self._opts:
                self._opts[opt] = True
            self._after_step()
        except GuardStop:
            raise
        except Exception as exc:
            self._disable(exc)

    def _after_step(self) -> None:
        step = self.s.clock.step
        self.s.flush()  # this step's loss, now (the one sync per step the guard costs)
        if self._trigger is not None:
            trigger, self._trigger = self._trigger, None
            self._rollback(trigger, step)
            return
        if step == self._last_step:
            return  # a second optimizer in the same step
        self._last_step = step
        if step - (self._snaps[-1].step if self._snaps else -1) >= self.config.every:
            self._snaps = self._snaps[-(KEEP - 1):] + [self._take(step)]

    # ---- state ---------------------------------------------------------------------------------
    def _optimizers(self) -> list[Any]:
        return [o for o, _ in self._opts.items()]

    def _take(self, step: int) -> _Snapshot:
        params, optim = ObjectMap(), ObjectMap()
        with torch.no_grad():
            for opt in self._optimizers():
                params[opt] = [p.detach().clone() for g in opt.param_groups for p in g["params"]]
                optim[opt] = _clone(opt.state_dict())
            buffers = [(b, b.detach().clone()) for m in self.s.models() for b in m.buffers()]
        return _Snapshot(step, params, optim, buffers)

    def _restore(self, snap: _Snapshot) -> None:
        with torch.no_grad():
            for opt in self._optimizers():
                saved = snap.params.get(opt)
                if saved is None:
                    continue
                live = [p for g in opt.param_groups for p in g["params"]]
                for p, s in zip(live, saved):
                    p.copy_(s)
                opt.load_state_dict(_clone(snap.optim.get(opt)))  # a copy: the snapshot stays intact
            for b, s in snap.buffers:
                if b.shape == s.shape:
                    b.copy_(s)

    def _set_lr(self, opt: Any, groups: list[dict[str, float]], factor: float) -> tuple[float, float]:
        """Put back the LR values the groups had before the restore, times ``factor``; scale the
        schedulers of ``opt`` too, so a schedule computed from its base LRs keeps the change."""
        before = float(groups[0].get("lr", 0.0)) if groups else 0.0
        for group, old in zip(opt.param_groups, groups):
            for key, value in old.items():
                group[key] = value * factor
        if factor != 1.0:
            for sched in _schedulers(opt):
                for attr in ("base_lrs", "max_lrs", "_last_lr"):
                    values = getattr(sched, attr, None)
                    if isinstance(values, list):
                        setattr(sched, attr, [v * factor if isinstance(v, (int, float)) else v for v in values])
        return before, float(opt.param_groups[0].get("lr", 0.0)) if opt.param_groups else 0.0

    # ---- acting --------------------------------------------------------------------------------
    def _rollback(self, trigger: Finding, step: int) -> None:
        if not self._snaps:
            return
        at = _trigger_step(trigger, step)
        older = [snap for snap in self._snaps if snap.step <= at - 2] or self._snaps[:1]
        good = older[-1]
        self._snaps = older  # the newer copies may hold the trouble
        opts = self._optimizers()
        # The LRs now (a schedule may have moved them since the snapshot): the restore puts the
        # snapshot's back, these are what gets lowered.
        lrs = [[{k: float(g[k]) for k in _LR_KEYS if isinstance(g.get(k), (int, float))
                 and not isinstance(g.get(k), bool)} for g in o.param_groups] for o in opts]
        self._restore(good)
        stop = len(self._rollbacks) >= self.config.max_rollbacks
        factor = 1.0 if stop else self.config.factor
        changed = [self._set_lr(o, groups, factor) for o, groups in zip(opts, lrs)]
        self._rollbacks.append({"step": step, "trigger": trigger.id, "restored": good.step,
                                "why": trigger.message, "stopped": stop,
                                "lr_before": [b for b, _ in changed], "lr_after": [a for _, a in changed]})
        if not stop:
            # a fresh nonfinite detector: it reports only the first non-finite step of a run
            self._dets = [d for d in self._dets if d.id != "nonfinite"] + detectors.build(
                select=["nonfinite"], config=self._detector_config)
        self.s.engine.add(self._finding())
        if self._announce:
            sys.stderr.write(f"traindoc guard: {_line(self._rollbacks[-1], self.config)}\n")
            sys.stderr.flush()
        if stop:
            raise GuardStop(
                f"traindoc --guard stopped the training at step {step}: {trigger.id} again after "
                f"{self.config.max_rollbacks} rollback(s) (at steps "
                f"{', '.join(str(r['step']) for r in self._rollbacks[:-1]) or '-'}); the model and "
                f"optimizer hold the last good state ({_state(good.step)}). {trigger.message}")

    def _finding(self) -> Finding:
        rb = self._rollbacks
        n = sum(1 for r in rb if not r["stopped"])
        lines = "; ".join(_line(r, self.config) for r in rb[:5]) + (f"; and {len(rb) - 5} more" if len(rb) > 5 else "")
        stopped = rb[-1]["stopped"]
        return finding(
            "guard-rollback", step=rb[0]["step"],
            message=(f"--guard rolled back {n} time(s){' and stopped the training' if stopped else ''}: "
                     f"{lines}."),
            cause=f"What the guard reacted to: {rb[0]['why']}",
            fix=("The guard treats the symptom: fix the cause named in the "
                 f"{', '.join(sorted({r['trigger'] for r in rb}))} finding. The updates between the "
                 "restored state and the trigger were discarded and the data loader was not rewound; "
                 "the run continued with the lowered LR."),
            evidence={"rollbacks": n, "steps": [r["step"] for r in rb], "restored_steps": [r["restored"] for r in rb],
                      "triggers": [r["trigger"] for r in rb], "lr_before": [r["lr_before"][0] for r in rb if r["lr_before"]],
                      "lr_after": [r["lr_after"][0] for r in rb if r["lr_after"]], "factor": self.config.factor,
                      "stopped": stopped, "max_rollbacks": self.config.max_rollbacks},
        )

    def _disable(self, exc: BaseException) -> None:
        self._broken = f"{type(exc).__name__}: {exc}"
        self.s.failed.setdefault("guard", self._broken)
        sys.stderr.write(f"traindoc: internal error in the guard, disabled it: {exc}\n")


def _trigger_step(f: Finding, now: int) -> int:
    """The step of the trouble this finding reports (loss-spike names its first spike in
    ``step``; the newest is the last of ``spike_steps``)."""
    spikes = f.evidence.get("spike_steps")
    if isinstance(spikes, list) and spikes and isinstance(spikes[-1], int):
        return spikes[-1]
    return f.step if f.step is not None else now


def _acts_on(f: Finding) -> bool:
    if f.id == "loss-spike":
        return True
    if f.id == "nonfinite":  # a NaN gradient alone is what a GradScaler skips by itself
        signals = f.evidence.get("signals")
        return isinstance(signals, list) and bool({"loss", "parameter"} & set(map(str, signals)))
    return False


def _line(r: Mapping[str, Any], config: GuardConfig) -> str:
    at = f"at step {r['step']} ({r['trigger']})"
    state = _state(r["restored"])
    if r["stopped"]:
        return f"{at} restored {state} and stopped (max_rollbacks={config.max_rollbacks})"
    lr = ""
    if r["lr_before"]:
        lr = f" and lowered the LR from {fmt(r['lr_before'][0])} to {fmt(r['lr_after'][0])} (x{fmt(config.factor)})"
    return f"{at} restored {state} (model and optimizer){lr}"


def _state(step: int) -> str:
    return "the state before the first step" if step < 0 else f"the state after step {step}"


def _clone(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, dict):
        return {k: _clone(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_clone(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_clone(v) for v in obj)
    return obj


def _schedulers(opt: Any) -> list[Any]:
    """The LR schedulers driving ``opt`` (found through the garbage collector's referrers, at a
    rollback only, so that no scheduler needs to be registered)."""
    from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau

    kinds = (LRScheduler, ReduceLROnPlateau)
    found: list[Any] = []
    for ref in gc.get_referrers(opt):
        owners = [ref] if isinstance(ref, kinds) else (
            [o for o in gc.get_referrers(ref) if isinstance(o, kinds)] if isinstance(ref, dict) else [])
        for o in owners:
            if getattr(o, "optimizer", None) is opt and all(o is not f for f in found):
                found.append(o)
    return found
