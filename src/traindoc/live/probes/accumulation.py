"""How gradients are built between two optimizer steps: accumulation and clearing.

Gradients between steps (sampled steps only): before each backward(), whether each optimizer's
gradients are None/zero (cleared) and their norm otherwise; after it, their total norm; and the
constant factor between the loss function's value and the tensor handed to backward(), read from
the autograd graph (``loss / accum`` is a DivBackward node with a constant divisor). On steps that
are not sampled only integer counters move. Gradient norms stay on the device until the session's
one batched transfer (``session.defer``).

An optimizer that stepped with gradients handed over by assignment from a model that ran in the
step (``live.stray.handed_over``: A3C's local copy, a bf16 working copy of fp32 master weights)
is followed through that model: while it runs, its gradients are the ones measured for the
optimizer, since they are what each backward() adds to.
"""

from __future__ import annotations

import functools
import math
import sys
import weakref
from typing import Any

import torch
from torch.utils.data import dataloader as _dl

from traindoc.events import Event, GradAccumulation
from traindoc.live import measure
from traindoc.live.probes._patch import Patcher
from traindoc.live.probes.base import Probe
from traindoc.live.probes.loop import lr0
from traindoc.live.objects import ObjectMap, frame_modules, largest_container, user_site, variable_name
from traindoc.live.session import Session
from traindoc.live.stray import handed_over

_MAX_NORMS = 16  # gradient norms kept per interval (one per backward)


def loss_factor(t: torch.Tensor) -> float:
    """The constant factor between the loss as computed and ``t``: walks ``t``'s autograd graph
    through multiplications and divisions by constants (``loss / 4`` -> 0.25, ``0.5 * loss``
    -> 0.5, none -> 1.0). NaN when a constant lives on an accelerator (reading it would sync)."""
    f = 1.0
    node = t.grad_fn
    for _ in range(6):
        if node is None:
            return f
        name = type(node).__name__
        if name not in ("MulBackward0", "DivBackward0"):
            return f
        nf = node.next_functions
        const = [i for i, (fn, _) in enumerate(nf) if fn is None]
        if len(nf) != 2 or len(const) != 1 or (name == "DivBackward0" and const[0] != 1):
            return f
        i = const[0]
        c = getattr(node, "_saved_other" if i == 1 else "_saved_self", None)
        if not isinstance(c, torch.Tensor) or c.numel() != 1 or c.device.type != "cpu":
            return math.nan
        v = float(c)  # a CPU scalar (a Python number wrapped by autograd): no device sync
        if v == 0:
            return f
        f = f / v if name == "DivBackward0" else f * v
        node = nf[1 - i][0]
    return f


class _Interval:
    """One optimizer's gradients since its previous step (measured backward calls only)."""

    __slots__ = ("backwards", "batches", "unmeasured", "first_stamp", "pre", "none_seen",
                 "first_none", "post", "factors", "where", "sites", "retained", "restarted", "calls",
                 "rollout", "fed_by", "absent")

    def __init__(self, backwards: int, batches: int, unmeasured: int) -> None:
        self.reset(backwards, batches, unmeasured)

    def reset(self, backwards: int, batches: int, unmeasured: int) -> None:
        self.backwards = backwards  # counters at the interval's start
        self.batches = batches
        self.unmeasured = unmeasured
        self.first_stamp: int | None = None
        self.pre: list[torch.Tensor] = []
        self.none_seen = False
        self.first_none: bool | None = None
        self.post: list[torch.Tensor] = []
        self.factors: list[float] = []
        self.where = ""
        self.sites: set[str] = set()  # call sites of the measured backward() calls
        self.retained = False
        self.restarted = False  # gradients None again before a later backward()
        self.calls = -1  # the clock's forward_calls at the last measured backward()
        # Every backward() after the first came with no model forward since the one before it,
        # while forwards came before the first: a rollout's terms backpropagated one by one.
        self.rollout: bool | None = None
        self.fed_by = ""  # the model whose gradients were measured instead (handed over)
        self.absent = False  # the optimizer's own gradients were None after a measured backward()


class AccumulationProbe(Probe):
    name = "accumulation"
    signals = ("accumulation",)

    def __init__(self, session: Session, patcher: Patcher) -> None:
        super().__init__(session, patcher)
        self._post_due = False  # this backward was measured before: measure it after
        # the backward calls are counted by the patcher, at every step
        self._measured = 0  # backward calls measured (sampled steps)
        self._batches = 0
        self._opt_steps = 0
        self._last_bwd_stamp = 0
        self._intervals = ObjectMap()  # optimizer -> _Interval
        # The optimizer of the last step (weak) and its interval: the common case of every step
        # skips both identity-map lookups.
        self._last_opt: Any = lambda: None
        self._last_iv: _Interval | None = None
        self._mark = (0, 0, 0)  # (backwards, batches, unmeasured) at the last step of any optimizer
        self._sites = ObjectMap()  # optimizer -> (step() call site, first backward's call site)
        self._scaled: dict[int, float] = {}
        # optimizer -> (the models feeding it, weak; the user's name for them; their parameters, weak)
        self._feeders = ObjectMap()
        self._looked = ObjectMap()  # optimizers looked at for a hand-over once

    def install(self) -> None:
        patcher = self._patcher
        patcher.on_step("accumulation", post=self._post_step)
        patcher.on_backward("accumulation", before=self._before_backward, after=self._after_backward,
                            sampled_only=True)
        patcher.patch(_dl._BaseDataLoaderIter, "__next__", self._wrap_next)
        scaler = getattr(getattr(torch, "amp", None), "GradScaler", None)
        if scaler is not None:
            patcher.patch(scaler, "scale", self._wrap_scaler_scale)

    def _wrap_scaler_scale(self, orig: Any) -> Any:
        probes = self

        @functools.wraps(orig)
        def scale(scaler: Any, outputs: Any, *args: Any, **kwargs: Any) -> Any:
            out = orig(scaler, outputs, *args, **kwargs)
            if isinstance(outputs, torch.Tensor) and isinstance(out, torch.Tensor) and probes.s.clock.measuring:
                probes._guard("accumulation", probes._note_scaled, outputs, out)
            return out

        return scale

    def _note_scaled(self, loss: torch.Tensor, scaled: torch.Tensor) -> None:
        if len(self._scaled) > 64:
            self._scaled.clear()
        self._scaled[id(scaled)] = loss_factor(loss)  # the factor before the scaler's

    def _post_step(self, opt: Any) -> None:
        if self.s.setup_step:  # not a training step (Session.setup_step)
            return
        self._opt_steps += 1
        if opt is self._last_opt():  # stepped before, its interval made (a stable object)
            iv = self._last_iv
        else:
            iv = self._intervals.get(opt)
        backwards = self.s.clock.backwards
        unmeasured = backwards - self._measured
        if iv is not None and backwards > iv.backwards and unmeasured == iv.unmeasured:
            self._guard("accumulation", self._close_interval, opt, iv)
        self._mark = (backwards, self._batches, unmeasured)
        if iv is None:
            iv = self._intervals[opt] = _Interval(*self._mark)
        elif iv.first_stamp is None:  # nothing measured: only the counters move
            iv.backwards, iv.batches, iv.unmeasured = self._mark
        else:
            iv.reset(*self._mark)
        if iv is not self._last_iv:
            self._last_opt, self._last_iv = weakref.ref(opt), iv
        if self._scaled:
            self._scaled.clear()

    def _wrap_next(self, orig: Any) -> Any:
        probes = self

        @functools.wraps(orig)
        def __next__(it: Any) -> Any:
            out = orig(it)
            if torch.is_grad_enabled():  # an evaluation loop's batches are not micro-batches
                probes._batches += 1
            return out

        return __next__

    def _before_backward(self, loss: Any) -> None:
        self._post_due = self.s.clock.measuring and loss is not None
        if self._post_due:
            self._measured += 1
            self._pre_backward(loss)

    def _after_backward(self, loss: Any) -> None:
        if self._post_due:
            self._post_due = False
            self._post_backward()

    def _optimizers(self) -> list[Any]:
        held = self.s.framework_stepped
        return [opt for opt in self.s.optimizers() if opt not in held] if len(held) else self.s.optimizers()

    def _params(self, opt: Any) -> tuple[list[Any], str]:
        """The parameters whose gradients each backward() adds to for ``opt``, and the name of
        the model they belong to when they are not its own: those of the model that hands its
        gradients over, while it runs in this step."""
        fed = self._feeders.get(opt)
        if fed is not None:
            ran = self.s.model.step_roots(self.s.clock.current_step)
            if any(r() is m for r in fed[0] for m in ran):
                params = [p for p in (ref() for ref in fed[2]) if p is not None]
                if params:
                    return params, fed[1]
        return _held(opt), ""

    def _pre_backward(self, tensor: torch.Tensor) -> None:
        self._last_bwd_stamp = self._opt_steps
        factor = self._scaled.pop(id(tensor), None)
        if factor is None:
            factor = loss_factor(tensor)
        call_site = user_site(2)  # a walk up the stack, on sampled steps only
        retained = self._patcher.retain_graph
        for opt in self._optimizers():
            iv = self._intervals.get(opt)
            if iv is None:
                iv = _Interval(*self._mark)  # its first interval
                self._intervals[opt] = iv
            first = iv.first_stamp is None
            if first:
                iv.first_stamp = self._opt_steps
                site = self._sites.get(opt)
                iv.where = site[1] if site is not None else user_site(3)
            iv.factors.append(factor)
            if len(iv.sites) < 8:
                iv.sites.add(call_site)
            iv.retained |= retained
            calls, iv.calls = iv.calls, self.s.clock.forward_calls
            if first:
                iv.rollout = True if iv.calls else None  # no forward seen (compiled): not known
            elif iv.rollout and calls != iv.calls:
                iv.rollout = False
            params, iv.fed_by = self._params(opt)
            if iv.none_seen:
                if not first and not iv.restarted and not any(p.grad is not None for p in params):
                    iv.restarted = True  # cleared again since the last backward(): it starts over
                continue
            grads = _grads(params)
            if not grads:
                iv.restarted |= not first
                iv.none_seen = True
                if first:
                    iv.first_none = True
                continue
            with torch.no_grad():
                iv.pre.append(_total_norm(grads))
            if first:
                iv.first_none = False

    def _post_backward(self) -> None:
        for opt in self._optimizers():
            iv = self._intervals.get(opt)
            if iv is None or len(iv.post) >= _MAX_NORMS:
                continue
            grads = _grads(self._params(opt)[0] if iv.fed_by else _held(opt))
            iv.absent |= not grads
            with torch.no_grad():
                iv.post.append(_total_norm(grads) if grads else torch.zeros(()))

    def _close_interval(self, opt: Any, iv: _Interval) -> None:
        if iv.first_stamp is None:
            return
        s = self.s
        index = s.optimizer_index(opt)
        step = s.clock.step
        backwards = self.s.clock.backwards - iv.backwards
        batches = self._batches - iv.batches
        interleaved = iv.first_stamp != self._last_bwd_stamp
        factors = iv.factors
        scale = math.nan if any(math.isnan(f) for f in factors) else max(factors, default=1.0)
        nparams = sum(len(g["params"]) for g in opt.param_groups)
        site = self._sites.get(opt)
        if site is None:  # call sites are looked up once per optimizer (a walk up the stack)
            site = (user_site(3), iv.where)
            self._sites[opt] = site
        cls, lr, where, bwhere = type(opt).__name__, lr0(opt), site[0], site[1]
        npre, first_none, none_seen = len(iv.pre), iv.first_none, iv.none_seen
        # Every backward() of the interval measured: their sites say whether it is one loop.
        sites = len(iv.sites) if backwards == len(iv.factors) else 0
        retained, restarted, rollout, fed_by = iv.retained, iv.restarted, bool(iv.rollout), iv.fed_by
        grads = _grads(_held(opt))  # after the step, as the step used them (a script may divide them)
        # A pass over the step's models looks for a hand-over: once per optimizer, then where no
        # backward() filled its gradients (a copy), or while one is followed.
        if grads and (iv.absent or opt not in self._looked) or opt in self._feeders:
            self._looked[opt] = True
            self._find_feeders(opt)

        def event(pre: list[float], post: list[float], stepped: float = math.nan) -> GradAccumulation:
            carried = 0.0 if first_none or not pre else pre[0]
            cleared = none_seen or any(v == 0.0 for v in pre)
            again = restarted or any(v == 0.0 for v in pre[1:])  # zeroed, not set to None
            return GradAccumulation(
                step=step, optimizer=index, cls=cls, lr=lr, backwards=backwards, batches=batches,
                scale=scale, norms=tuple(post), carried=carried, cleared=cleared,
                interleaved=interleaved, params=nparams, backward_where=bwhere, where=where,
                sites=sites, retained=retained, restarted=again, rollout=rollout, stepped=stepped,
                fed_by=fed_by,
            )

        parts = iv.pre + iv.post
        if not parts:
            s.emit(event([], []))
            return
        with torch.no_grad():
            dev = parts[0].device
            packed = torch.stack([t.to(dev) for t in parts] + [_total_norm(grads).to(dev) if grads
                                                                else torch.full((), math.nan, device=dev)])

        def decode(vals: list[float]) -> list[Event]:
            return [event(vals[:npre], vals[npre:-1], vals[-1])]

        s.defer(packed, decode)


    def _find_feeders(self, opt: Any) -> None:
        s = self.s
        found = handed_over(_held(opt), s.model.step_roots(s.clock.step), s.held_ids())
        if not found:
            self._feeders.pop(opt, None)
            return
        roots = [root for root, _ in found]
        known = self._feeders.get(opt)
        if known is not None and [r() for r in known[0]] == roots:
            name = known[1]
        else:  # named once, after the user's model that holds them all (a walk up the stack)
            owner = largest_container(roots[0], frame_modules(sys._getframe(1)))
            mods = list(owner.modules())
            if not all(any(m is r for m in mods) for r in roots):
                owner = roots[0]
            name = variable_name(owner, 2) or s.model.module_name(owner)
        self._feeders[opt] = ([weakref.ref(r) for r in roots], name,
                              [weakref.ref(p) for _, ps in found for p in ps])


def _held(opt: Any) -> list[Any]:
    return [p for g in opt.param_groups for p in g["params"]]


def _grads(params: list[Any]) -> list[torch.Tensor]:
    return [p.grad for p in params if p.grad is not None and p.requires_grad and not p.grad.is_sparse]


def _total_norm(grads: list[torch.Tensor]) -> torch.Tensor:
    norms = measure.grad_norms(grads)
    dev = norms.device
    return torch.linalg.vector_norm(norms.to(dev).float())

