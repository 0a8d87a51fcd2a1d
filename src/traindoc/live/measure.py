"""Tensor maths of the live probes. Everything here runs under no_grad, reads and never writes
the user's tensors, draws no random numbers, and returns device tensors (no sync): the session
reads them back in one batched transfer per sampled step.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Iterable, Iterator

import torch

# Update statistics are estimated on at most this many evenly strided elements per parameter:
# memory stays bounded (a few KB per parameter) whatever the model size.
SAMPLE = 4096
LOW_PRECISION = (torch.bfloat16, torch.float16)


def local(t: Any) -> Any:
    """This rank's local tensor of a DTensor (a tensor-parallel or FSDP2 shard, a replicated
    parameter, a sequence-parallel activation), ``t`` itself otherwise. Every statistic here is
    computed on it: maths on a DTensor runs the DTensor's own dispatch, which may redistribute
    (a collective the training did not ask for) and warns about the scalars it meets."""
    return t.to_local() if type(t) is not torch.Tensor and hasattr(t, "to_local") else t


def strided(t: torch.Tensor) -> torch.Tensor:
    """A fixed, evenly strided sample of ``t``'s elements (a view when possible). A complex
    tensor is seen as its real and imaginary parts, so every statistic works on real numbers. A
    sparse tensor (an ``nn.Embedding(sparse=True)`` gradient) is seen as the values it holds."""
    flat = local(t).detach()
    if flat.is_sparse:  # coalesce(): a device sync on CUDA (see norm)
        flat = flat.coalesce().values()
    flat = flat.reshape(-1)
    if flat.is_complex():
        flat = torch.view_as_real(flat).reshape(-1)
    stride = max(1, flat.numel() // SAMPLE)
    # Coprime with 2, 3, 5 and 7, of which dimensions are made: a stride of 288 on a [512, 256,
    # 3, 3] conv weight would take only the top-left tap of every kernel, which a 3x3 conv on a
    # 1x1 feature map (ResNet's last stage on 32x32 images) only ever applies to padding, and
    # would call a moving weight frozen.
    while stride > 1 and math.gcd(stride, 210) != 1:
        stride += 1
    return flat[::stride][:SAMPLE]


def grad_norms(grads: list[torch.Tensor]) -> torch.Tensor:
    """Per-tensor L2 norms as float32, whatever the tensors' dtype (fp64, fp32, bf16, fp16,
    complex). Low-precision norms are accumulated in float32 (fp16 would overflow at 65504)."""
    if not grads:
        return torch.zeros(0)
    grads = [local(g) for g in grads]
    same = all(g.dtype == torch.float32 and g.device == grads[0].device for g in grads)
    if same:
        try:
            return torch.stack(torch._foreach_norm(grads))
        except (RuntimeError, AttributeError):
            pass
    dev = grads[0].device
    return torch.stack([norm(g).to(dev) for g in grads])


def norm(t: torch.Tensor) -> torch.Tensor:
    """The L2 norm of ``t`` as a float32 scalar, for any floating or complex dtype."""
    wide = torch.float32 if t.dtype in LOW_PRECISION else None  # fp64/complex keep their own
    t = local(t).detach()
    if t.is_sparse:  # a sparse gradient: the norm of its (summed) values. coalesce() counts the
        t = t.coalesce().values()  # unique rows: a device sync on CUDA, sampled steps of sparse models only
    return torch.linalg.vector_norm(t, dtype=wide).float()


def numel(p: torch.Tensor) -> int:
    """A parameter's elements, also where a framework partitioned them away from it (DeepSpeed's
    ZeRO-3 leaves an empty tensor between steps and keeps the size in ``ds_numel``)."""
    n = p.numel()
    return n if n else int(getattr(p, "ds_numel", 0) or 0)


def spacing(dtype: torch.dtype, magnitude: float) -> float:
    """The distance between adjacent representable numbers of ``dtype`` near ``magnitude``."""
    if magnitude <= 0 or not math.isfinite(magnitude):
        return math.nan
    return torch.finfo(dtype).eps * 2.0 ** math.floor(math.log2(magnitude))


class StepSnapshot:
    """A parameter's sampled elements before an optimizer step, to measure what it changed."""

    __slots__ = ("before", "grad_nonzero")

    def __init__(self, p: torch.Tensor, g: torch.Tensor | None) -> None:
        self.before = strided(p).clone()
        # A sparse gradient's values do not line up with the parameter's sample: not known
        self.grad_nonzero = strided(g) != 0 if g is not None and not g.is_sparse else None

    def after(self, p: torch.Tensor, init: torch.Tensor, drive: torch.Tensor | None) -> torch.Tensor:
        """[relative update, unchanged share, max |w - w_init|, median |w|, median |drive|]
        as float32, where ``drive`` is what an SGD-like step multiplies by the LR."""
        now = strided(p)
        before = self.before
        delta = now.float() - before.float()
        rel = torch.linalg.vector_norm(delta) / torch.linalg.vector_norm(before.float()).clamp_min(1e-30)
        if self.grad_nonzero is not None:
            active = self.grad_nonzero
            same = (now == before) & active
            unchanged = same.sum().float() / active.sum().clamp_min(1).float()
        else:
            unchanged = torch.tensor(float("nan"), device=now.device)
        moved = (now.float() - init.float()).abs().max() if now.numel() else torch.zeros((), device=now.device)
        zero = torch.zeros((), device=rel.device)
        typical = now.float().abs().median() if now.numel() else zero
        push = strided(drive).float().abs().median().to(rel.device) if drive is not None else zero + math.nan
        return torch.stack([rel, unchanged.to(rel.device), moved.to(rel.device), typical.to(rel.device), push])


def drive(optimizer: Any, p: torch.Tensor) -> torch.Tensor | None:
    """What an SGD-family step multiplies by the LR (momentum buffer, else the gradient), so
    the intended update is ``lr * |drive|``. Adam-family steps are about ``lr`` per element
    (m/sqrt(v) ~ 1 for consistent gradients) and need no drive; others are unknown (None)."""
    if type(optimizer).__name__ != "SGD":
        return None
    buf = optimizer.state.get(p, {}).get("momentum_buffer")
    return buf if isinstance(buf, torch.Tensor) else p.grad


def is_adam_family(optimizer: Any, p: torch.Tensor) -> bool:
    return "exp_avg_sq" in optimizer.state.get(p, {})


def first_float_tensors(value: Any, limit: int = 4) -> list[torch.Tensor]:
    """The floating tensors of a module output (a tensor, tuple, list, dict, HF ModelOutput or
    dataclass), breadth first, among the first 8 items of each container (a policy's
    ``(actions, values, log_probs)``: the values, past the integer actions)."""
    out: list[torch.Tensor] = []
    stack = [value]
    while stack and len(out) < limit:
        v = stack.pop(0)
        if isinstance(v, torch.Tensor):
            if v.is_floating_point() and v.numel():
                out.append(local(v))
        elif isinstance(v, (tuple, list)):
            stack.extend(v[:8])
        elif isinstance(v, dict):
            stack.extend(list(v.values())[:8])
        elif dataclasses.is_dataclass(v) and not isinstance(v, type):
            stack.extend(getattr(v, f.name) for f in dataclasses.fields(v)[:8])
    return out


def unit_activity(out: torch.Tensor) -> torch.Tensor | None:
    """For a ReLU output: per unit, was it positive anywhere in this batch? (bool vector)

    Units are features for (N, F) and (N, T, F), channels for (N, C, H, W). A NaN output
    counts as active: after a NaN nothing is known about the unit, and it is not dead.
    """
    alive = (out > 0) | torch.isnan(out)
    if out.ndim == 2:
        return alive.any(dim=0)
    if out.ndim == 3:
        return alive.flatten(0, 1).any(dim=0)
    if out.ndim == 4:
        return alive.transpose(0, 1).flatten(1).any(dim=1)
    return None


def output_spread(out: torch.Tensor) -> torch.Tensor:
    """[has NaN, spread across the batch, overall std, min, max] of a model output (float32).

    The spread is the mean over output features of the standard deviation across the batch
    (dim 0): near 0 when the output barely depends on the input. NaN when the batch has one row.
    """
    x = out.detach().float().reshape(out.shape[0] if out.ndim else 1, -1)
    nan = torch.isnan(x).any().float()
    if x.shape[0] < 2:
        fill = torch.full((), float("nan"), device=x.device)
        return torch.stack([nan, fill, fill, fill, fill])
    return torch.stack([nan, x.std(dim=0).mean(), x.std(), x.min(), x.max()])


# Nodes a constant passes through unchanged in kind: scalings and copies of one input.
# The normalization layers whose eps is compared with what they divide by (norm-eps-too-large).
BATCH_NORMS = (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d, torch.nn.SyncBatchNorm)
INSTANCE_NORMS = (torch.nn.InstanceNorm1d, torch.nn.InstanceNorm2d, torch.nn.InstanceNorm3d)
ROW_NORMS = (torch.nn.LayerNorm, torch.nn.RMSNorm)
NORMS = (*BATCH_NORMS, *INSTANCE_NORMS, *ROW_NORMS, torch.nn.GroupNorm)


def norm_divisor(module: Any, x: torch.Tensor) -> torch.Tensor | None:
    """The median of what a normalization layer divides by before adding its eps, as it computes
    it on input ``x``: the variance per channel over the batch (BatchNorm), per sample and
    channel (InstanceNorm), per sample and group (GroupNorm), per row over the normalized
    dimensions (LayerNorm), the mean square per row (RMSNorm). None for an input it would not
    take, or a layer it does not know."""
    x = x.detach().float()
    if isinstance(module, BATCH_NORMS) and x.ndim >= 2:
        per = x.var([d for d in range(x.ndim) if d != 1], unbiased=False)  # no copy of x
    elif isinstance(module, INSTANCE_NORMS):
        spatial = 1 + next(i for i, c in enumerate(INSTANCE_NORMS) if isinstance(module, c))
        per = x.flatten(-spatial).var(-1, unbiased=False)
    elif isinstance(module, ROW_NORMS):
        k = len(module.normalized_shape)
        rows = x.flatten(-k) if k > 1 else x
        per = rows.pow(2).mean(-1) if isinstance(module, torch.nn.RMSNorm) else rows.var(-1, unbiased=False)
    elif isinstance(module, torch.nn.GroupNorm) and x.ndim >= 2:
        per = x.reshape(x.shape[0], module.num_groups, -1).var(-1, unbiased=False)
    else:
        return None
    return per.reshape(-1).median() if per.numel() else None


_THROUGH = ("MulBackward0", "DivBackward0", "NegBackward0", "ToCopyBackward0", "CloneBackward0",
            "AliasBackward0", "ViewBackward0", "SqueezeBackward0", "UnsqueezeBackward0",
            "ExpandBackward0", "AddBackward1", "SubBackward1")
# The nodes a scalar leaf's graph can start with: a loss whose grad_fn is another is no constant.
SCALAR_PATH = frozenset(_THROUGH) | {"AccumulateGrad"}


def scalar_leaf(t: torch.Tensor) -> torch.Tensor | None:
    """The one-element leaf ``t`` is made of, when ``t`` is that leaf scaled or copied
    (``torch.tensor(3.0, requires_grad=True) / accum_steps``) and reaches nothing else; None
    otherwise (an nn.Parameter leaf, a real graph). A bounded walk of at most 8 nodes, no
    tensor op, no sync."""
    leaf = chain_leaf(t.grad_fn, _THROUGH, 8)
    return leaf if leaf is not None and not isinstance(leaf, torch.nn.Parameter) and leaf.numel() == 1 else None


def chain_leaf(node: Any, through: tuple[str, ...] | frozenset[str], limit: int) -> Any:
    """The variable of the ``AccumulateGrad`` node that ``node`` reaches through a chain of
    single-input nodes named in ``through`` (at most ``limit`` nodes); None otherwise."""
    for _ in range(limit):
        if node is None:
            return None
        name = type(node).__name__
        if name == "AccumulateGrad":
            return getattr(node, "variable", None)
        if name not in through:
            return None
        nexts = [fn for fn, _ in node.next_functions if fn is not None]
        if len(nexts) != 1:
            return None
        node = nexts[0]
    return None


# Nodes between a one-element trainable leaf and the product it scales: CLIP's
# ``logit_scale.exp()``, a temperature clamped or inverted, broadcast or cast.
_SCALE_CHAIN = frozenset(_THROUGH) | {"ExpBackward0", "ReciprocalBackward0", "ClampBackward1",
                                      "ClampMinBackward0", "ClampMaxBackward0", "MulBackward1",
                                      "DivBackward1", "SoftplusBackward0", "AbsBackward0"}


def learnable_scale(t: torch.Tensor, budget: int = 48) -> torch.Tensor | None:
    """The multiplier that a one-element trainable tensor puts on ``t``, when ``t`` is (a
    product of) something multiplied or divided by it: ``logit_scale.exp() * img @ txt.T``
    (CLIP), ``sim / self.temperature``. A 0-dim device tensor (no sync), or None. A bounded
    breadth-first walk of ``budget`` nodes from ``t.grad_fn``, each Mul/Div node's other
    input followed through at most 4 scalar nodes (exp, reciprocal, clamp, casts) to its leaf;
    a one-element parameter reached otherwise (a PReLU's weight) is no scale."""
    start = t.grad_fn
    queue, seen = ([start] if start is not None else []), set()
    while queue and budget > 0:
        node = queue.pop(0)
        budget -= 1
        name = type(node).__name__
        inputs = [fn for fn, _ in node.next_functions]
        if name in ("MulBackward0", "DivBackward0"):
            for i, fn in enumerate(inputs):
                if fn is not None and _scalar_leaf_through(fn):
                    return _saved_multiplier(node, name, i)
        for fn in inputs:
            if fn is not None and id(fn) not in seen:
                seen.add(id(fn))
                queue.append(fn)
    return None


def _scalar_leaf_through(node: Any) -> bool:
    leaf = chain_leaf(node, _SCALE_CHAIN, 5)
    return isinstance(leaf, torch.Tensor) and leaf.numel() == 1 and leaf.requires_grad


def _saved_multiplier(node: Any, name: str, i: int) -> torch.Tensor | None:
    """The factor input ``i`` of a Mul/Div node puts on the product: the saved input itself,
    or its reciprocal for a divisor."""
    try:
        saved = node._saved_other if i == 1 else node._saved_self
    except (AttributeError, RuntimeError):  # not saved (a constant operand) or already freed
        return None
    if not isinstance(saved, torch.Tensor) or saved.numel() != 1:
        return None
    with torch.no_grad():
        x = saved.detach().float().reshape(())
        return 1.0 / x if name == "DivBackward0" else x


_MEANS = re.compile(r"(Mean|Loss|Std|Var)\w*Backward\d*$")  # a reduction that makes NaN of nothing


def graph(roots: Iterable[Any], limit: int = 100_000) -> Iterator[Any]:
    """The autograd nodes reachable from ``roots`` (grad_fns; None ones skipped), each once,
    depth first, at most ``limit`` of them. Their structure outlives the backward."""
    todo = [r for r in roots if r is not None]
    seen: set[int] = set()
    while todo and len(seen) < limit:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        todo.extend(n for n, _ in node.next_functions if n is not None)


def empty_mean(grad_fn: Any, budget: int = 16) -> str | None:
    """The op near the top of a loss's graph (its first ``budget`` autograd nodes) that took a
    mean of an input with no element, a loss over an empty selection, by the op's name
    (``nll_loss``, ``mean``); None when there is none. Reads the nodes' saved sizes: no sync."""
    todo, seen = [grad_fn], 0
    while todo and seen < budget:
        node = todo.pop(0)
        if node is None:
            continue
        seen += 1
        name = type(node).__name__
        if _MEANS.search(name):
            try:
                numel = getattr(node, "_saved_self_sym_numel", None)
                saved = getattr(node, "_saved_self", None) if numel is None else None
            except RuntimeError:  # a saved tensor already freed
                numel = saved = None
            if numel == 0 or (isinstance(saved, torch.Tensor) and saved.numel() == 0):
                return re.sub(r"(?<!^)(?=[A-Z])", "_", re.sub(r"Backward\d*$", "", name)).lower()
        todo.extend(n for n, _ in node.next_functions)
    return None


# The loss's own side of the graph: reductions, arithmetic, shape and dtype changes and the loss
# functions themselves. A layer (a matmul, a convolution, attention) ends the walk, so a
# softmax inside the model (attention over one key) is never reached.
def read_back(tensors: list[torch.Tensor]) -> list[list[float]]:
    """The values of ``tensors``, each as a list of floats, in one transfer per device: the
    session's one sync point (a sampled step, or its pending values piling up)."""
    by_device: dict[Any, list[int]] = {}
    for i, t in enumerate(tensors):
        by_device.setdefault(t.device, []).append(i)
    values: list[list[float]] = [[] for _ in tensors]
    for idxs in by_device.values():
        out = torch.cat([tensors[i].detach().reshape(-1).float() for i in idxs]).tolist()
        pos = 0
        for i in idxs:
            n = tensors[i].numel()
            values[i] = out[pos:pos + n]
            pos += n
    return values


def zero_grads(opt: Any) -> bool:
    """Is every gradient ``opt`` holds None or exactly zero? (a sync per parameter: asked only
    before the run's first backward or step)"""
    with torch.no_grad():
        return all(p.grad is None or not bool(p.grad.any()) for g in opt.param_groups for p in g["params"])
