"""The model as traindoc sees it on sampled steps: names of modules and parameters, each
parameter's update statistics around an optimizer step, and the forward outputs (NaN flags,
ReLU activity, the output's spread). The session owns the step bookkeeping and calls this on
sampled steps only; everything measured stays on its device until the session's one batched
read-back (``session.defer``)."""

from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING, Any, Iterable, overload

import torch

from traindoc.events import LOSS_INPUT, Activation, Event, NormInput, Optimizer, ParamGroup, ParamStats
from traindoc.live import measure
from traindoc.live.definitions import Definitions
from traindoc.live.objects import ObjectMap, frame_modules, largest_container, user_site
from traindoc.live.ranks import is_shard  # traindoc-ranks
from traindoc.live.stray import StrayGrads

if TYPE_CHECKING:
    from traindoc.live.session import Session

# A dead-ReLU window: at least this many sampled batches, and rows (samples, tokens, pixels)
# among them. Rows, because a window of 8 single observations (a policy stepping through one
# episode, dropout zeroing 60% of the units at each) leaves a live unit silent by chance.
RELU_WINDOW = 8
RELU_ROWS = 256
# A model run on one row a call (a policy stepping through an episode) has no spread within a
# call: its output's rows are gathered over the step's measured calls, when they are this small.
ROW_NUMEL = 1024
MIN_ROWS = 4
# A normalization layer is measured when its eps is above this (PyTorch's default is 1e-5,
# Keras's 1e-3): the detector judges the ones at 0.01 and more; others pay one comparison.
NORM_EPS = 1e-3
_UNIT_LAYERS = (torch.nn.Linear, torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)


@overload
def cut(t: torch.Tensor, at: int | None, n: int) -> torch.Tensor: ...
@overload
def cut(t: None, at: int | None, n: int) -> None: ...
def cut(t: torch.Tensor | None, at: int | None, n: int) -> torch.Tensor | None:
    """``n`` elements of flat ``t`` from ``at`` (a piece of a flat partition), or ``t``."""
    return t if t is None or at is None else t.detach().reshape(-1).narrow(0, at, n)


class ModelWatch:
    def __init__(self, session: "Session") -> None:
        self.s = session
        # Weak maps: traindoc must not keep the user's objects alive.
        self._announced = ObjectMap()  # optimizers whose Optimizer event went out
        self._pnames = ObjectMap()  # parameter -> name
        self._init = ObjectMap()  # parameter -> its pieces' sampled elements when first seen
        self._snap = ObjectMap()  # parameter -> its pieces' StepSnapshots before this step
        # A flat partition a framework's optimizer steps -> the parameters it holds (live/zero.py)
        self._pieces = ObjectMap()
        # An optimizer a framework steps a group at a time -> its whole groups (live/zero.py)
        self._groups = ObjectMap()
        self._roots = ObjectMap()  # model -> the step of its latest training forward
        self._mnames = ObjectMap()  # module -> name
        self._built_at = ObjectMap()  # normalization layer with a large eps -> where it was built
        # ReLU module, or a layer whose input is judged -> (name, type, ever-active units,
        # batches, ever-negative flag or None, rows)
        self._relu = ObjectMap()
        self._relu_outputs: set[int] = set()  # ids of nn.ReLU outputs in this forward
        # one-row outputs of this step (and of earlier sampled steps, while fewer than MIN_ROWS)
        self._rows: dict[tuple[str, str], list[torch.Tensor]] = {}
        self.nan_flags: list[tuple[str, str, torch.Tensor, bool]] = []  # name, type, NaN, empty input
        self.strays = StrayGrads(session)  # gradients no optimizer steps
        self._copies = ObjectMap()  # module -> has the parameter shapes of a trained model
        # Ids of the held parameters the backward passes of this sampled round gave a gradient;
        # open until a step measures them (a later backward of the round starts a new set: a
        # GAN's generator after its discriminator), emptied when the round ends.
        self._reached: set[int] = set()
        self._reached_open = False

    def models(self) -> list[Any]:
        return [m for m, _ in self._roots.items()]

    def step_roots(self, step: int) -> list[Any]:
        """The models whose latest training forward ran in ``step``."""
        return [m for m, at in self._roots.items() if at == step]

    def is_trained(self, module: Any) -> bool:
        """Is ``module`` a model that trains, or a copy of one (its parameter shapes: a target
        network, an EMA)? Decided once per copy, after a model has trained."""
        if module in self._roots:
            return True
        known = self._copies.get(module)
        if known is None:
            roots = self.models()
            if not roots:
                return False
            shapes = [p.shape for p in module.parameters()]
            known = any([p.shape for p in m.parameters()] == shapes for m in roots)
            self._copies[module] = known
        return bool(known)

    def is_copy(self, module: Any) -> bool:
        """Is ``module`` a copy of a model that trains (a target network, an EMA), not one?"""
        return module not in self._roots and self.is_trained(module)

    def held_bytes(self) -> int:
        """Bytes of tensors kept between steps: sampled elements at init, step snapshots,
        ReLU activity (what the overhead benchmark reports)."""
        tensors = [t for ts in self._init.values() for t in ts]
        tensors += [s.before for snaps in self._snap.values() for s in snaps]
        tensors += [r[2] for r in self._relu.values()]
        return sum(t.numel() * t.element_size() for t in tensors)

    def definitions(self) -> Definitions:
        """Where the named parameters and modules are defined, for the findings at the end."""
        modules = self._mnames.items()
        return Definitions([*self._pnames.items(), *modules], [m for m, _ in modules])

    def module_name(self, module: Any) -> str:
        name: str = self._mnames.get(module, type(module).__name__)
        return name

    def snapshot(self, opt: Any) -> None:
        index = self.s.optimizer_index(opt)
        if opt not in self._announced:
            self._announced[opt] = True
            self._name_params(opt)
            self.s.emit(self.optimizer_event(opt, index))
        with torch.no_grad():
            # traindoc-ranks: a shard (FSDP2 DTensor) is one rank's part, not measured as a tensor;
            # nor a parameter this rank holds no element of (FSDP1 with use_orig_params=True
            # leaves it empty here: it trains on the ranks that hold it, and gets no gradient here)
            params = [p for g in opt.param_groups for p in g["params"] if p.numel() and not is_shard(p)]
            for p in params:
                pieces = [(cut(p, at, n), cut(p.grad, at, n)) for _, at, n in self._layout(p)]
                if p not in self._init:
                    self._init[p] = [measure.strided(t).clone() for t, _ in pieces]
                self._snap[p] = [measure.StepSnapshot(t, g) for t, g in pieces]

    def note_reached(self, loss: Any) -> None:
        """After a backward of a sampled step: which held parameters have a gradient now. One
        that has none at the step was cleared by the script in between (``cleared``)."""
        if not self._reached_open:
            self._reached_open = True
            self._reached.clear()
        self._reached.update(id(p) for opt in self.s.optimizers() for g in opt.param_groups
                             for p in g["params"] if p.grad is not None)

    def end_round(self) -> None:
        self._reached.clear()
        self._reached_open = False

    def measure_step(self, opt: Any) -> None:
        index = self.s.optimizer_index(opt)
        step = self.s.clock.step
        reached, self._reached_open = self._reached, False
        rows: list[tuple[str, str, int, bool, bool, bool, int, float, bool]] = []
        tracked: list[torch.Tensor] = []
        grads: list[torch.Tensor] = []
        stats: list[torch.Tensor] = []
        pre = getattr(opt, "grad_norms", None)
        with torch.no_grad():
            whole = self._groups.get(opt)
            for gi, group in enumerate(opt.param_groups):
                lr = float(group.get("lr", 0.0))
                if whole is not None:  # the group in view is one of its whole groups
                    gi = next((i for i, (g, _) in enumerate(whole) if g is group), gi)
                for p in group["params"]:
                    snaps = self._snap.pop(p, None)
                    if snaps is None:
                        continue
                    drive, adam = measure.drive(opt, p), measure.is_adam_family(opt, p)
                    for (name, at, n), snap, init in zip(self._layout(p), snaps, self._init.get(p), strict=True):
                        if pre is not None:  # a hand-written update: gradients as they were before it
                            has_grad = id(p) in pre
                            if has_grad:
                                grads.append(pre[id(p)])
                        else:
                            has_grad = p.grad is not None
                            if has_grad:  # traindoc-ranks: a replicated DTensor's local part
                                grads.append(measure.local(cut(p.grad, at, n)))
                        piece = cut(p, at, n)
                        stats.append(snap.after(piece, init, cut(drive, at, n)))
                        tracked.append(measure.local(piece).detach())
                        cleared = not has_grad and id(p) in reached
                        rows.append((name, str(p.dtype), n, p.requires_grad, has_grad, cleared, gi, lr, adam))
            if not rows:
                return
            norms = measure.grad_norms(tracked)
            gnorms = measure.grad_norms(grads)
            dev = norms.device
            packed = torch.cat([norms.to(dev), gnorms.to(dev), torch.stack(stats).reshape(-1).to(dev)])
        dtypes = [p.dtype for p in tracked]

        def decode(vals: list[float]) -> Iterable[Event]:
            n = len(rows)
            pn, gn, st = vals[:n], vals[n:n + len(grads)], vals[n + len(grads):]
            gi_ = 0
            for i, (name, dtype, numel, req, has_grad, cleared, group, lr, adam) in enumerate(rows):
                rel, unchanged, moved, typical, push = st[5 * i:5 * i + 5]
                g = gn[gi_] if has_grad else None
                gi_ += has_grad
                if g is not None:
                    self.s.stream.grad_sq[step] = self.s.stream.grad_sq.get(step, 0.0) + g * g
                low = dtypes[i] in measure.LOW_PRECISION
                intended = lr if adam else (lr * push if math.isfinite(push) else None)
                yield ParamStats(
                    step=step, name=name, dtype=dtype, numel=numel, requires_grad=req,
                    norm=pn[i], grad=g, has_grad=has_grad, cleared=cleared, update=rel,
                    unchanged=None if math.isnan(unchanged) else unchanged, moved=moved,
                    spacing=measure.spacing(dtypes[i], typical) if low else None,
                    intended=intended, lr=lr, optimizer=index, group=group,
                )

        self.s.defer(packed, decode)
        # Only models trained in this step: a model of an earlier phase keeps stale gradients.
        self.strays.at_step(step, self.step_roots(step), self._pnames)

    def optimizer_event(self, opt: Any, index: int, reevaluates: bool = False) -> Optimizer:
        groups = []
        whole = self._groups.get(opt)
        for gi, (g, ps) in enumerate(whole or [(g, g["params"]) for g in opt.param_groups]):
            beta = g.get("betas", (g.get("momentum", 0.0),))[0]
            layout = [(piece, p) for p in ps for piece in self._layout(p)]
            groups.append(ParamGroup(
                index=gi, lr=float(g.get("lr", 0.0)), names=tuple(name for (name, _, _), _ in layout),
                dtypes=tuple(str(p.dtype) for _, p in layout), numel=sum(n for (_, _, n), _ in layout),
                weight_decay=float(g.get("weight_decay", 0.0)), momentum=float(beta or 0.0),
            ))
        return Optimizer(step=self.s.clock.step, index=index, cls=type(opt).__name__, groups=tuple(groups),
                         reevaluates=reevaluates)

    def name_tensors(self, names: list[tuple[Any, str]]) -> None:
        """Name parameters no module holds (raw tensors trained by hand) as the script calls
        them; a module's name wins."""
        for p, name in names:
            if p not in self._pnames:
                self._pnames[p] = name

    def name_pieces(self, flat: torch.Tensor, pieces: tuple[tuple[str, int, int], ...]) -> None:
        """``flat``, a flat tensor a framework's optimizer steps (DeepSpeed ZeRO's partition),
        holds these parameters: (name, offset, elements) each, measured and named as such."""
        if pieces:
            self._pieces[flat] = pieces

    def name_groups(self, opt: Any, groups: list[tuple[Any, list[torch.Tensor]]]) -> None:
        """``opt`` is stepped a parameter group at a time by a framework (ZeRO), with only that
        group in view: its whole groups, as (the group's dict, its parameters) each."""
        if groups:
            self._groups[opt] = groups

    def param_name(self, p: Any) -> str:
        return self._pnames.get(p) or f"param{tuple(p.shape)}"

    def _layout(self, p: torch.Tensor) -> tuple[tuple[str, int | None, int], ...]:
        """What is measured of ``p``: (name, offset, elements) per piece; the whole of ``p``
        (offset None) unless it is a flat partition of several parameters."""
        pieces: tuple[tuple[str, int | None, int], ...] | None = self._pieces.get(p)
        return pieces or ((self.param_name(p), None, p.numel()),)

    def _name_params(self, opt: Any) -> None:
        """Name the optimizer's parameters after the module (forward roots seen so far, or an
        nn.Module in the user's frames) that holds the most of them."""
        ids = {id(p) for g in opt.param_groups for p in g["params"]}
        candidates = [m for m, _ in self._roots.items()] + frame_modules(sys._getframe(1))
        best = max((m for m in candidates if m is not None),
                   key=lambda m: (sum(id(p) in ids for p in m.parameters()), sum(1 for _ in m.parameters())),
                   default=None)
        if best is not None:
            self._name_from(getattr(best, "_orig_mod", best), override=True)
        for gi, g in enumerate(opt.param_groups):
            for pi, p in enumerate(g["params"]):
                if p not in self._pnames:
                    self._pnames[p] = f"group{gi}.param{pi}{list(p.shape)}"

    def adopt_model(self, module: Any) -> None:
        """A model being trained: name its modules and parameters after the largest model in
        the user's frames that contains it (so ``model.backbone(x)`` called directly still
        gives ``backbone.0.weight``, not ``0.weight``)."""
        if module in self._roots:
            self._roots[module] = self.s.clock.current_step  # the step of its latest training forward
            return
        if len(self._roots) >= 8:
            return
        self._roots[module] = self.s.clock.current_step
        owner = largest_container(module, frame_modules(sys._getframe(1)))
        self._name_from(getattr(owner, "_orig_mod", owner))  # torch.compile's wrapper

    def _name_from(self, model: Any, override: bool = False) -> None:
        for name, m in model.named_modules():
            if override or m not in self._mnames:
                self._mnames[m] = name or type(model).__name__
        named: set[int] = set()
        for name, p in model.named_parameters(remove_duplicate=False):
            # A tied parameter keeps its first name (transformer.wte.weight, not lm_head.weight)
            if id(p) not in named and (override or p not in self._pnames):
                self._pnames[p] = name
            named.add(id(p))

    def on_root_forward(self, module: Any, output: Any, unbatched: bool = False) -> None:
        """A model's forward returned. ``unbatched``: it ran on one vector (``policy(state)``
        with ``state`` of shape (4,)), so its output is one row, not a batch of its features."""
        self.adopt_model(module)
        outs = measure.first_float_tensors(output, limit=1)
        if not outs:
            return
        self.strays.on_root_forward(module, outs[0])
        out = outs[0].reshape(1, -1) if unbatched else outs[0]
        self._defer_output(self._mnames.get(module, type(module).__name__), type(module).__name__,
                           out, nan_alone=True)

    def on_loss_input(self, fn: str, probs: torch.Tensor) -> None:
        """The probabilities a BCE loss sees, judged like a model output (saturated-outputs)."""
        self.s.next_step_begins()
        self._defer_output(fn, LOSS_INPUT, measure.local(probs), nan_alone=False)

    def _defer_output(self, name: str, type_: str, out: torch.Tensor, *, nan_alone: bool) -> None:
        """An output's spread across the batch as an ``Activation(is_output=True)``; a
        one-row batch has no spread: its NaN flag alone goes out when ``nan_alone``, and the
        row is kept for the spread over the step's calls (``pack_activations``)."""
        if out.ndim and out.shape[0] == 1 and out.numel() <= ROW_NUMEL:
            rows = self._rows.setdefault((name, type_), [])
            if not rows or rows[0].shape[1] == out.numel():
                rows.append(out.detach().float().reshape(1, -1).clone())  # the script may reuse it
        spread = measure.output_spread(out)
        step = self.s.clock.current_step

        def decode(vals: list[float]) -> Iterable[Event]:
            nan, sp, scale, lo, hi = vals
            if not math.isnan(sp):
                yield Activation(step=step, module=name, type=type_, nan=bool(nan),
                                 spread=sp, scale=scale, lo=lo, hi=hi, is_output=True)
            elif nan_alone:
                yield Activation(step=step, module=name, type=type_, nan=bool(nan), is_output=True)

        self.s.defer(spread, decode)

    def on_module_output(self, module: Any, output: Any, empty: bool = False) -> None:
        """``empty``: the module's input held no element."""
        outs = measure.first_float_tensors(output, limit=2)
        if not outs:
            return
        name = self._mnames.get(module, type(module).__name__)
        flag = torch.stack([torch.isnan(t).any() for t in outs]).any()
        self.nan_flags.append((name, type(module).__name__, flag, empty))
        if isinstance(module, (torch.nn.ReLU, torch.nn.ReLU6)):
            self._relu_outputs.add(id(output))  # the tensor the next layer gets, not its local part
            self._track_units(module, name, type(module).__name__, outs[0], None)

    def on_module_input(self, module: Any, args: Any) -> None:
        """What a normalization layer built with a large eps divides by (``_norm_input``), and
        the input of a Linear/Conv layer computed inside the model (it requires grad):
        units exactly 0 on every row of every batch of a window are dead, whatever made them
        (``F.relu``, ``torch.relu``, ``x.relu()``, ``relu_``, ``clamp(min=0)``). Only inputs
        that are never negative count (a ReLU-family output); inputs straight from an
        ``nn.ReLU`` module are that module's, judged once."""
        if isinstance(module, measure.NORMS) and args:
            self._norm_input(module, measure.local(args[0]))
            return
        if not isinstance(module, _UNIT_LAYERS) or not args:
            return
        x = args[0]
        if (not isinstance(x, torch.Tensor) or not x.requires_grad or not x.is_floating_point()
                or x.ndim < 2 or id(x) in self._relu_outputs):
            return
        x = measure.local(x)
        units = x if isinstance(module, torch.nn.Linear) else x.movedim(1, -1)
        name = self._mnames.get(module, type(module).__name__)
        self._track_units(module, f"input of {name}", "relu-like", units, (x < 0).any())

    def note_registration(self, module: Any) -> None:
        """A module registers a parameter or buffer while it is built: where a normalization
        layer with a large eps was built (``nn.BatchNorm2d(C, 0.8)``: its eps is set first)."""
        if isinstance(module, measure.NORMS) and _large_eps(module) and module not in self._built_at:
            self._built_at[module] = user_site(2)

    def _norm_input(self, module: Any, x: Any) -> None:
        """Only layers whose eps is above ``NORM_EPS`` are measured: the others cost one check."""
        eps = _large_eps(module)
        if eps is None or not isinstance(x, torch.Tensor) or x.numel() < 2:
            return
        var = measure.norm_divisor(module, x)
        if var is None:
            return
        step, name, cls = self.s.clock.step, self._mnames.get(module, type(module).__name__), type(module).__name__
        where = self._built_at.get(module, "")

        def decode(vals: list[float]) -> Iterable[Event]:
            yield NormInput(step=step, module=name, cls=cls, eps=eps, var=vals[0], where=where)

        self.s.defer(var.reshape(1), decode)

    def _track_units(self, key: Any, name: str, type_: str, out: torch.Tensor,
                     negative: torch.Tensor | None) -> None:
        active = measure.unit_activity(out) if negative is None else (out != 0).reshape(-1, out.shape[-1]).any(0)
        if active is None:
            return
        rows = out.numel() // max(active.numel(), 1)
        prev = self._relu.get(key)
        if prev is not None and prev[2].shape == active.shape:
            active = active | prev[2]
            batches, rows = prev[3] + 1, prev[5] + rows
            if negative is not None and prev[4] is not None:
                negative = negative | prev[4]
        else:
            batches = 1
        self._relu[key] = (name, type_, active, batches, negative, rows)

    def on_sampled_loss(self, loss: torch.Tensor) -> None:
        """A sampled step's loss: where a mean near its top had no element to average (a loss
        over an empty selection), whether the loss came out NaN, read at the flush."""
        op = measure.empty_mean(loss.grad_fn)
        if op is None:
            return
        step = self.s.clock.step

        def decode(vals: list[float]) -> Iterable[Event]:
            if vals[0]:
                yield Activation(step=step, module=op, type="function", nan=True, empty=True)

        self.s.defer(torch.isnan(measure.local(loss).detach()).reshape(1).float(), decode)

    def pack_activations(self) -> None:
        """Turn this step's forward flags into one pending entry (at backward, sampled steps)."""
        flags, self.nan_flags = self.nan_flags, []
        self._relu_outputs.clear()
        if self._rows:
            rows, self._rows = self._rows, {}
            for (name, type_), xs in rows.items():
                if len(xs) >= MIN_ROWS:
                    self._defer_output(name, type_, torch.cat(xs), nan_alone=False)
                else:  # a step of one call (a TD update per environment step): pooled with the
                    self._rows[(name, type_)] = xs  # next sampled steps' rows until there are enough
        # A ReLU unit is judged over windows of RELU_WINDOW sampled batches and RELU_ROWS rows:
        # "ever active since the start" would count units that died later as alive.
        full = [m for m, r in self._relu.items() if r[3] >= RELU_WINDOW and r[5] >= RELU_ROWS]
        relus = [self._relu.pop(m) for m in full]
        if not flags and not relus:
            return
        step = self.s.clock.step
        with torch.no_grad():
            parts = [torch.stack([f for _, _, f, _ in flags]).float()] if flags else []
            for _, _, active, _, negative, _ in relus:  # [dead share, ever negative]
                neg = negative.float().reshape(1) if negative is not None else torch.zeros(1)
                parts += [1.0 - active.float().mean().reshape(1), neg.to(active.device)]
            dev = parts[0].device
            packed = torch.cat([t.to(dev).reshape(-1) for t in parts])

        def decode(vals: list[float]) -> Iterable[Event]:
            nflags = len(flags)
            for (name, type_, _, empty), v in zip(flags, vals[:nflags]):
                if v:
                    yield Activation(step=step, module=name, type=type_, nan=True, empty=empty)
                    break
            rest = vals[nflags:]
            for (name, type_, active, batches, _, rows), dead, neg in zip(relus, rest[::2], rest[1::2]):
                if not neg:  # a negative value: not a ReLU-family output, nothing to judge
                    yield Activation(step=step, module=name, type=type_, dead=dead,
                                     units=active.numel(), batches=batches, rows=rows)

        self.s.defer(packed, decode)


def _large_eps(module: Any) -> float | None:
    """A normalization layer's eps when it is above ``NORM_EPS`` (an int where a size was passed
    as eps; RMSNorm's may be None, the dtype's own epsilon)."""
    eps = getattr(module, "eps", None)
    return float(eps) if isinstance(eps, (int, float)) and eps > NORM_EPS else None
