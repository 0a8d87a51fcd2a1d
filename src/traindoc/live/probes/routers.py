"""Mixture-of-experts routers: expert load Gini and entropy from the router's outputs.

A router is recognized without code changes when it sits next to its experts: a child module
of a block that also holds its E experts in a child whose name contains "expert" (a
``ModuleList``/``ModuleDict`` of E, or one module with a ``num_experts``-like attribute holding
them fused, as transformers' Mixtral, Qwen-MoE, OLMoE, DeepSeek-V3 and GPT-OSS do), and whose
output ends in a dimension of E: an ``nn.Linear(d, E)``, a module with the same expert count
(``MixtralTopKRouter``), or any module named gate/router/gating/routing, checked on its output.
A block with a ``num_experts``-like integer attribute and a gate/router child counts too. A
router that is no module of its own (``x @ self.w_gate``) or a gate that returns top-k indices
(DeepSeek-MoE's ``MoEGate``) is read from the ``topk`` over E scores that a method of the block
takes, seen through the op-level mode on sampled steps. ``traindoc.watch_router(module)``
names any other router.

Nothing is attached to the user's modules (a hook object on a module would travel with
``copy.deepcopy``, ``pickle`` and ``torch.save(model)``): routers are looked at from the core
probe's global forward hook, which is on during sampled steps only. On those steps (training
forwards only) the top-1 expert of every token is read from the
router's output on its device (``argmax`` over the last dimension, ``bincount``); when the round
ends (the run's last one too) the step's counts of every router are read back in one batched
transfer, and the load's Gini coefficient (0 even, (E-1)/E all tokens on one expert) and
entropy (nats) are emitted as ``expert_gini``/``expert_entropy``.
With several routers the most collapsed one (highest Gini) is reported for the step.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Iterable

import torch

from traindoc import metrics as api
from traindoc.events import Event, Scalar
from traindoc.live import measure
from traindoc.live.probes._ops import caller, torch_function
from traindoc.live.probes._patch import Patcher
from traindoc.live.probes.base import Probe
from traindoc.live.probes.publisher import publisher
from traindoc.live.objects import ObjectMap
from traindoc.live.session import Session

_DEPTH = 8  # frames looked through for the block a top-k runs in
ROUTER_WORDS = ("gate", "router", "gating", "routing", "w_gate", "wg")
EXPERT_COUNT_ATTRS = ("num_experts", "n_experts", "num_local_experts", "n_routed_experts", "experts_count")


class RouterProbe(Probe):
    name = "routers"
    signals = ("expert_gini", "expert_entropy")

    def __init__(self, session: Session, patcher: Patcher) -> None:
        super().__init__(session, patcher)
        self.pub = publisher(session)
        self._routers = ObjectMap()  # module -> (name, experts, its block or None)
        self._blocks = ObjectMap()  # an MoE block -> its number of experts
        self._unreadable = ObjectMap()  # routers whose output holds no scores (indices, top-k weights)
        self._scanned = ObjectMap()  # models already searched for routers
        self._listening = False  # to top-k, for routers that are no module of their own
        # step -> router (the block's id, or a watched module's) -> counts, on their device
        self._load: dict[int, dict[int, torch.Tensor]] = {}
        self._by_module: dict[int, set[int]] = {}  # step -> blocks whose router module was read

    def install(self) -> None:
        api.router_sinks.append(self._on_router)
        for module, experts in list(api.routers.items()):
            self._add(module, type(module).__name__, experts, None)

    # ---- finding routers -----------------------------------------------------------------------
    def _on_router(self, module: Any, experts: int | None) -> None:
        self._guard(self.name, self._add, module, type(module).__name__, experts, None)

    def _add(self, module: Any, name: str, experts: int | None, block: Any) -> None:
        if module in self._routers or not isinstance(module, torch.nn.Module):
            return
        self._routers[module] = (name, experts, block)
        self.pub.claim("expert_gini")
        self.pub.claim("expert_entropy")

    def _scan(self, model: Any) -> None:
        for parent_name, parent in model.named_modules():
            children = dict(parent.named_children())
            experts, by_count = _experts(parent, children)
            if experts is None:
                continue
            if not by_count:  # a block holding its experts: its router may be a top-k of its own
                self._blocks[parent] = experts
            for cname, child in children.items():
                if "expert" in cname.lower():
                    continue
                named = cname.lower() in ROUTER_WORDS or any(w in cname.lower() for w in ("router", "gating"))
                linear = isinstance(child, torch.nn.Linear) and child.out_features == experts
                if named or (linear and not by_count) or _count(child) == experts:
                    full = f"{parent_name}.{cname}" if parent_name else cname
                    self._add(child, full, experts, parent)
        if len(self._blocks) and not self._listening:
            self._listening = True
            self._ops.listen(self.name, [torch_function(torch.topk), torch_function(torch.Tensor.topk)],
                             self._on_topk)

    # ---- measuring -----------------------------------------------------------------------------
    def on_module_output(self, module: Any, output: Any) -> None:
        """Every module output on a sampled training forward (from the core probe)."""
        if module in self._routers and self.s.clock.measuring:
            self._guard(self.name, self._on_output, module, output)

    def _on_output(self, module: Any, output: Any) -> None:
        entry = self._routers.get(module)
        if entry is None:
            return
        _, experts, block = entry
        scores = next((t for t in measure.first_float_tensors(output, limit=4)
                       if t.ndim >= 1 and (t.shape[-1] == experts if experts else 2 <= t.shape[-1] <= 4096)), None)
        if scores is None or scores.numel() == 0:
            self._unreadable[module] = True  # a gate that returns top-k indices and weights:
            return  # its own top-k is read
        key = id(module if block is None else block)
        self._by_module.setdefault(self.s.clock.current_step, set()).add(key)
        self._count(key, scores)

    def _on_topk(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        """A top-k in an MoE block's forward (or a method it calls), over E scores: the block's
        router when it is no module of its own (``x @ self.w_gate``, a gate that returns indices)."""
        scores = args[0] if args else kwargs.get("input")
        if not (self.s.clock.measuring and torch.is_grad_enabled() and isinstance(scores, torch.Tensor)
                and scores.is_floating_point() and scores.ndim >= 2 and scores.numel()):
            return  # a training forward's (an evaluation inside a sampled step is not)
        dim = args[2] if len(args) > 2 else kwargs.get("dim", -1)
        if dim not in (-1, scores.ndim - 1):
            return
        block = self._block_calling(int(scores.shape[-1]))
        if block is not None and block.training and id(block) not in self._by_module.get(self.s.clock.current_step, ()):
            self._count(id(block), scores)

    def _block_calling(self, experts: int) -> Any:
        """The innermost MoE block with ``experts`` experts whose method is on the call stack;
        None inside a router module whose output is read (transformers' ``MixtralTopKRouter``
        takes its own top-k)."""
        frame = caller(through_init=False)
        for _ in range(_DEPTH):
            if frame is None:
                return None
            owner = frame.f_locals.get("self") if "self" in frame.f_code.co_varnames else None
            if owner is not None:
                if owner in self._routers and owner not in self._unreadable:
                    return None
                if self._blocks.get(owner) == experts:
                    return owner
            frame = frame.f_back
        return None

    def _count(self, key: int, scores: torch.Tensor) -> None:
        """Each token's top-1 expert, counted on the device (no sync)."""
        e = int(scores.shape[-1])
        with torch.no_grad():
            top = scores.detach().reshape(-1, e).argmax(-1)
            counts = torch.bincount(top, minlength=e).float()
        loads = self._load.setdefault(self.s.clock.current_step, {})
        old = loads.get(key)  # a router called again in the step (micro-batches) adds up
        loads[key] = counts if old is None or old.shape != counts.shape else old + counts

    def uninstall(self) -> None:
        """The run's last round, which no next step closes, is read with the session's last flush."""
        if self._on_router in api.router_sinks:
            api.router_sinks.remove(self._on_router)
        self._routers = ObjectMap()
        self._blocks = ObjectMap()
        if self._load:
            self._guard(self.name, self._publish_until, max(self._load))

    def on_sampled_round_end(self, step: int) -> None:
        self._guard(self.name, self._round, step)  # a sampled round: models adopted, loads read

    def _round(self, step: int) -> None:
        for model in self.s.models():
            if model not in self._scanned:
                self._scanned[model] = True
                self._scan(model)
        self._publish_until(step)

    def _publish_until(self, step: int) -> None:
        """Each step's loads up to ``step``, read in the step's one batched transfer (no sync)."""
        for at in [k for k in self._by_module if k <= step]:
            del self._by_module[at]
        for at in sorted(k for k in self._load if k <= step):
            loads = list(self._load.pop(at).values())
            dev = loads[0].device
            sizes = [len(v) for v in loads]
            self.s.defer(torch.cat([v.to(dev) for v in loads]), functools.partial(_stats, at, sizes))


def _stats(step: int, sizes: list[int], vals: list[float]) -> Iterable[Event]:
    """The step's most collapsed router (highest Gini) as ``expert_gini``/``expert_entropy``."""
    loads, start = [], 0
    for n in sizes:
        loads.append(vals[start:start + n])
        start += n
    stats = [load_stats(v) for v in loads if sum(v) > 0]
    if stats:
        gini, entropy = max(stats)
        yield Scalar(step=step, name="expert_gini", value=gini)
        yield Scalar(step=step, name="expert_entropy", value=entropy)


def _experts(parent: Any, children: dict[str, Any]) -> tuple[int | None, bool]:
    """(E, counted): the number of experts of a block, from a child named after its experts (a
    ``ModuleList``/``ModuleDict`` of E, or one module holding all E with a count attribute, as
    transformers' fused ``MixtralExperts``), else from the block's own count attribute
    (``counted``: a ``Linear(d, E)`` child is then not taken for the router on its width alone).
    A shared expert (Qwen2-MoE's, DeepSeek's) is not the routed ones."""
    for cname, child in children.items():
        name = cname.lower()
        if "expert" not in name or "shared" in name:
            continue
        if isinstance(child, (torch.nn.ModuleList, torch.nn.ModuleDict)) and len(child) >= 2:
            return len(child), False
        if (n := _count(child)) is not None:
            return n, False
    return _count(parent), True


def _count(module: Any) -> int | None:
    """A module's expert count attribute (``num_experts``, ``n_routed_experts``...), >= 2."""
    counts = [getattr(module, a, None) for a in EXPERT_COUNT_ATTRS]
    return next((c for c in counts if isinstance(c, int) and not isinstance(c, bool) and c >= 2), None)


def load_stats(counts: list[float]) -> tuple[float, float]:
    """(Gini coefficient, entropy in nats) of an expert load vector."""
    n, total = len(counts), float(sum(counts))
    xs = sorted(counts)
    gini = (2.0 * sum((i + 1) * x for i, x in enumerate(xs)) / (n * total)) - (n + 1) / n
    entropy = -sum((x / total) * math.log(x / total) for x in xs if x > 0)
    return max(0.0, gini), max(0.0, entropy)  # -0.0 for one expert reads as "-0"
