"""The terms of a multi-term loss and each term's share of the gradient (``loss-term-imbalance``).

Just before the user's ``backward()`` on a measured step, the loss's autograd graph is read
from the top: sums (``AddBackward0``/``SubBackward0``, with their ``alpha``), scalings by a
constant (``MulBackward0``/``DivBackward0`` with one side that needs no gradient, ``Neg``) and
dtype copies are followed; the first node that is anything else is a *term*, and the product of
the constants on the way is its *weight*. So ``loss = 100 * l_delta + l_dag`` has the terms
``l_delta`` (weight 100) and ``l_dag`` (weight 1). Terms are named after the user's local
variables holding them (``loss_delta``), or ``traindoc.loss_terms(delta=..., dag=...)``, or the
op (``mse_loss``). A scaling of the whole loss (``loss / accum_steps``, a GradScaler's scale) is
common to every term and left out of the weights.

Each term's gradient is measured with ``torch.autograd.grad`` from the term's node in the graph
(``GradientEdge``), ``retain_graph=True``, with respect to the parameters the loss reaches,
BEFORE the user's backward runs: ``.grad`` is never touched, the user's backward then runs on the
same graph and computes exactly what it would have, so training stays bit-identical. It costs
one extra backward pass per term, so it runs only on the first 3 sampled steps that have a
multi-term loss and then every ``4 * every``-th step of the level (standard: every 100 steps),
on the first micro-batch of a step, for at most ``MAX_TERMS`` terms. It is skipped where an extra
backward pass could have side effects: activation checkpointing (it recomputes the forward),
module backward hooks, torch.compile'd graphs and torch.distributed runs.
"""

from __future__ import annotations

import functools
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Iterable

import torch
from torch.autograd.graph import GradientEdge

from traindoc import metrics as api
from traindoc.events import Event, LossTerm
from traindoc.live.measure import graph
from traindoc.live.objects import user_site
from traindoc.live.probes._patch import Patcher, is_traced
from traindoc.live.probes.base import Probe
from traindoc.live.session import Session

MAX_TERMS = 8
FIRST = 3  # measured steps at the start
_PASS = {"ToCopyBackward0", "CloneBackward0", "AliasBackward0", "ViewBackward0", "SqueezeBackward0",
         "SqueezeBackward1", "SqueezeBackward4", "UnsqueezeBackward0", "ReshapeAliasBackward0",
         "AddBackward1", "SubBackward1"}
# An extra backward pass through these could have side effects or is not supported.
_UNSAFE = ("CheckpointFunction", "BackwardHook", "CompiledFunction")


@dataclass
class _Term:
    node: Any
    nr: int
    scale: float  # weight between the (inner) loss and the term, without tensor factors
    factors: list[torch.Tensor] = field(default_factory=list)  # device constants of the weight
    name: str = ""
    named: str = "op"
    inner: float = 1.0  # a constant inside a named weighted term (loss_terms(delta=100 * l))
    tensor: torch.Tensor | None = None


class LossTermsProbe(Probe):
    name = "loss_terms"
    signals = ("loss_terms",)

    def __init__(self, session: Session, patcher: Patcher) -> None:
        super().__init__(session, patcher)
        self._named: list[tuple[str, Any]] = []  # the terms the script named, this step's only
        self._named_step = -1
        self._last_step = -1
        self._measured = 0
        self._off = ""  # why measuring stopped for this run

    def install(self) -> None:
        self._patcher.on_backward(self.name, before=self._on_backward, sampled_only=True)
        import torch.utils.checkpoint as ckpt

        for name in ("checkpoint", "checkpoint_sequential"):
            if hasattr(ckpt, name):
                self._patch(ckpt, name, self._wrap_checkpoint)
        api.term_sinks.append(self._on_terms)

    def uninstall(self) -> None:
        if self._on_terms in api.term_sinks:
            api.term_sinks.remove(self._on_terms)

    # ---- wrappers ------------------------------------------------------------------------------
    def _on_backward(self, loss: Any) -> None:
        if self.s.clock.measuring and not self._off and loss is not None:
            self._before_backward(loss)

    def _wrap_checkpoint(self, orig: Any) -> Any:
        probe = self

        @functools.wraps(orig)
        def checkpoint(*args: Any, **kwargs: Any) -> Any:
            if not is_traced():
                probe._off = "activation checkpointing recomputes the forward in backward"
            return orig(*args, **kwargs)

        return checkpoint

    def _on_terms(self, named: list[tuple[str, Any]]) -> None:
        if self.s.clock.measuring and not self._off:
            self._named = [(n, t) for n, t in named if isinstance(t, torch.Tensor) and t.grad_fn is not None]
            self._named_step = self.s.clock.current_step

    # ---- measuring -----------------------------------------------------------------------------
    def _before_backward(self, loss: torch.Tensor) -> None:
        named, self._named = self._named, []
        step = self.s.clock.current_step
        if self._named_step != step:  # named on an earlier step whose backward never came
            named = []
        first, self._last_step = step != self._last_step, step
        if (not first or self._off or not self.s.clock.measuring or loss.grad_fn is None
                or loss.numel() != 1 or not torch.is_grad_enabled()):
            return
        if self._measured >= FIRST and step % (4 * self.s.level.every) != 0:
            return
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            self._off = "torch.distributed: an extra backward pass would need the collectives"
            return
        explicit = {t.grad_fn: (n, t) for n, t in named}
        root, nr = _peel(loss.grad_fn, 0)
        terms = _split(root, nr, explicit, {})
        if len(terms) < 2 and not explicit:
            return
        variables = _local_names(sys._getframe(1), exclude={loss.grad_fn, root})
        terms = _split(root, nr, explicit, variables)
        if explicit and not any(t.named == "user" for t in terms):
            # The named tensors are not a sum in the loss (stacked, say): measure them as given.
            terms = [_Term(t.grad_fn, 0, 1.0, name=n, named="user", tensor=t) for n, t in named]
        if not 2 <= len(terms) <= MAX_TERMS:
            return
        leaves, unsafe = _scan(root)
        if unsafe:
            self._off = f"the loss's graph holds {unsafe} (an extra backward pass could have side effects)"
            return
        if not leaves or any(type(t.node).__name__ == "AccumulateGrad" for t in terms):
            return  # a parameter added to the loss as is is not a term we can measure
        self._measured += 1
        self._measure(terms, leaves, step, user_site(2))

    def _measure(self, terms: list[_Term], leaves: list[torch.Tensor], step: int, where: str) -> None:
        rows = []
        with torch.no_grad():
            dev = leaves[0].device
            for t in terms:
                meta = t.node._input_metadata[t.nr]
                go = torch.full(tuple(meta.shape), t.scale, dtype=meta.dtype, device=meta.device)
                for f in t.factors:
                    go = go * f.to(go.device, go.dtype)
                try:
                    with torch.enable_grad():
                        grads = torch.autograd.grad([GradientEdge(t.node, t.nr)], leaves, grad_outputs=[go],
                                                    retain_graph=True, allow_unused=True)
                except RuntimeError as exc:  # an op without a second backward: stop measuring
                    self._off = f"torch.autograd.grad failed on the loss's graph: {exc}"
                    return
                norms = torch.zeros(len(leaves), device=dev)
                present = [i for i, g in enumerate(grads) if g is not None]
                if present:
                    got = torch._foreach_norm([grads[i] for i in present])
                    norms[present] = torch.stack([n.to(dev, torch.float32) for n in got])
                value = torch.full((), float("nan"), device=dev)
                if t.tensor is not None:  # the weighted value, as it enters the loss
                    value = (t.tensor.detach().reshape(()).float() * go.reshape(-1)[0].float()).to(dev)
                rows.append((norms, value))
            norms = torch.stack([n for n, _ in rows])  # [T, P]
            reach = (norms > 0).sum(0)
            shared = (reach >= 2).float()
            grad_shared = (norms.square() * shared).sum(1).sqrt()
            grad_all = norms.square().sum(1).sqrt()
            weight = torch.stack([_weight(t, dev) for t in terms])
            packed = torch.cat([grad_shared, grad_all, torch.stack([v for _, v in rows]).reshape(-1),
                                weight, shared.sum().reshape(1)])
        names = _unique([t.name for t in terms])
        kinds = [t.named for t in terms]
        exact = [None if t.factors else t.scale * t.inner for t in terms]  # no float32 round trip
        n, p = len(terms), len(leaves)

        def decode(vals: list[float]) -> Iterable[Event]:
            gs, ga, vs, ws, ns = vals[:n], vals[n:2 * n], vals[2 * n:3 * n], vals[3 * n:4 * n], int(vals[4 * n])
            for i in range(n):
                w = exact[i]
                yield LossTerm(step=step, name=names[i], weight=ws[i] if w is None else w, grad=gs[i] if ns else None,
                               grad_all=ga[i], value=None if vs[i] != vs[i] else vs[i], terms=n,
                               shared=ns, params=p, named=kinds[i], where=where)

        self.s.defer(packed, decode)  # read in the step's one batched transfer


def _weight(t: _Term, dev: torch.device) -> torch.Tensor:
    w = torch.full((), t.scale * t.inner, dtype=torch.float32, device=dev)
    for f in t.factors:
        w = w * f.to(dev, torch.float32).reshape(())
    return w


def _unique(names: list[str]) -> list[str]:
    out: list[str] = []
    seen: dict[str, int] = {}
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        out.append(n if seen[n] == 1 else f"{n}#{seen[n]}")
    return out


# ---- reading the graph ----------------------------------------------------------------------------
def _const(node: Any, attr: str) -> tuple[float, torch.Tensor | None] | None:
    """A saved constant operand: (value, None) on the CPU, (1.0, tensor) on a device (read in
    the batched transfer, never here), None when it is not a one-element tensor."""
    c = getattr(node, attr, None)
    if isinstance(c, (int, float)) and not isinstance(c, bool):
        return float(c), None
    if not isinstance(c, torch.Tensor) or c.numel() != 1 or c.is_complex():
        return None
    if c.device.type == "cpu":
        return float(c.item()), None
    return 1.0, c.detach()


def _children(node: Any) -> list[tuple[Any, int, float, torch.Tensor | None, bool]] | None:
    """How a pass-through node feeds its inputs: [(node, nr, factor, device factor, divide)];
    None when ``node`` is a term."""
    kind = type(node).__name__
    nxt = node.next_functions
    if kind in ("AddBackward0", "SubBackward0") and len(nxt) == 2:
        alpha = getattr(node, "_saved_alpha", 1)
        if not isinstance(alpha, (int, float)):
            return None
        sign = -1.0 if kind == "SubBackward0" else 1.0
        return [(n, nr, f, None, False) for (n, nr), f in zip(nxt, (1.0, sign * alpha)) if n is not None]
    if kind == "RsubBackward1" and len(nxt) == 1:
        alpha = getattr(node, "_saved_alpha", 1)
        return [(nxt[0][0], nxt[0][1], -float(alpha), None, False)] if nxt[0][0] is not None else []
    if kind == "NegBackward0":
        return [(n, nr, -1.0, None, False) for n, nr in nxt if n is not None]
    if kind in _PASS:
        live = [(n, nr) for n, nr in nxt if n is not None]
        return [(n, nr, 1.0, None, False) for n, nr in live] if len(live) == 1 else None
    if kind in ("MulBackward0", "DivBackward0") and len(nxt) == 2:
        (a, anr), (b, bnr) = nxt
        if a is not None and b is None:
            c = _const(node, "_saved_other")
            if c is None:
                return None
            return [(a, anr, c[0], c[1], kind == "DivBackward0")]
        if kind == "MulBackward0" and a is None and b is not None:
            c = _const(node, "_saved_self")
            return None if c is None else [(b, bnr, c[0], c[1], False)]
        return None
    if kind in ("MulBackward1", "DivBackward1") and len(nxt) == 1 and nxt[0][0] is not None:
        c = _const(node, "_saved_other")
        if c is None or c[1] is not None:
            return None
        return [(nxt[0][0], nxt[0][1], c[0], None, kind == "DivBackward1")]
    return None


def _scaled(factor: float, dev: torch.Tensor | None, divide: bool) -> tuple[float, torch.Tensor | None]:
    if divide:
        return (1.0 / factor if factor else float("inf")), (None if dev is None else 1.0 / dev)
    return factor, dev


def _peel(node: Any, nr: int) -> tuple[Any, int]:
    """Skip the single-input scalings of the whole loss (``/ accum``, a GradScaler's scale)."""
    for _ in range(16):
        kids = _children(node)
        if kids is None or len(kids) != 1:
            break
        node, nr = kids[0][0], kids[0][1]
    return node, nr


def _inner(node: Any) -> float:
    """The CPU constant inside a named weighted term (``100 * l_delta``), for its weight."""
    w = 1.0
    for _ in range(8):
        kids = _children(node)
        if kids is None or len(kids) != 1 or kids[0][3] is not None:
            break
        f, _ = _scaled(kids[0][2], None, kids[0][4])
        w *= f
        node = kids[0][0]
    return w


Named = dict[Any, tuple[str, torch.Tensor]]


def _split(root: Any, nr: int, explicit: Named, variables: Named) -> list[_Term]:
    """The terms of the loss below ``root``: a named node (explicit, or a variable holding
    unnamed parts) or the first node that is not a sum or a scaling."""
    terms: list[_Term] = []

    def walk(node: Any, nr: int, scale: float, factors: list[torch.Tensor], depth: int, top: bool) -> list[_Term]:
        if not top and node in explicit:
            name, tensor = explicit[node]
            return [_Term(node, nr, scale, factors, name, "user", _inner(node), tensor)]
        kids = _children(node) if depth < 32 else None
        if kids is None:
            if node in variables:
                name, tensor = variables[node]
                return [_Term(node, nr, scale, factors, name, "variable", 1.0, tensor)]
            return [_Term(node, nr, scale, factors, _op_name(node), "op")]
        found: list[_Term] = []
        for child, cnr, f, dev, divide in kids:
            f, dev = _scaled(f, dev, divide)
            found += walk(child, cnr, scale * f, factors + ([dev] if dev is not None else []), depth + 1, False)
            if len(found) > 4 * MAX_TERMS:
                break
        if not top and node in variables and all(t.named == "op" for t in found):
            # A variable holding a sum of unnamed parts (an L2 penalty over parameters): one term.
            name, tensor = variables[node]
            return [_Term(node, nr, scale, factors, name, "variable", 1.0, tensor)]
        return found

    for t in walk(root, nr, 1.0, [], 0, True):
        if t.scale == 0 and not t.factors:
            continue  # a term switched off (lambda_aux = 0): not part of the balance
        same = next((u for u in terms if u.node is t.node and u.nr == t.nr and not u.factors and not t.factors), None)
        if same is not None:
            same.scale += t.scale
        else:
            terms.append(t)
    return terms


def _op_name(node: Any) -> str:
    base = re.sub(r"Backward\d*$", "", type(node).__name__)
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", base).lower() or "term"


def _local_names(frame: Any, exclude: set[Any]) -> Named:
    """grad_fn -> (variable name, tensor), for the one-element tensors with history in the
    user's frames (innermost first; a dict of losses is looked into one level)."""
    found: Named = {}
    seen = 0
    while frame is not None and seen < 3:
        module = frame.f_globals.get("__name__", "")
        if not (module.startswith("torch") or module.startswith("traindoc.")) or module.startswith("traindoc.zoo"):
            seen += 1
            for var, value in list(frame.f_locals.items()):
                if var.startswith("__"):
                    continue
                if isinstance(value, dict) and len(value) <= 32:
                    items = [(f"{var}[{k!r}]", v) for k, v in value.items()]
                else:
                    items = [(var, value)]
                for name, v in items:
                    if isinstance(v, torch.Tensor) and v.grad_fn is not None and v.numel() == 1:
                        if v.grad_fn not in exclude and v.grad_fn not in found:
                            found[v.grad_fn] = (name, v)
        frame = frame.f_back
    return found


def _scan(root: Any, limit: int = 100_000) -> tuple[list[torch.Tensor], str]:
    """The leaf tensors the loss reaches, and the first node that makes an extra backward unsafe."""
    leaves: list[torch.Tensor] = []
    for n, node in enumerate(graph([root], limit + 1)):
        kind = type(node).__name__
        if n == limit:
            return leaves, "a graph too large to scan"
        if kind == "AccumulateGrad":
            leaves.append(node.variable)
        elif any(u in kind for u in _UNSAFE):
            return leaves, kind
    return leaves, ""
