"""The loss's side of the autograd graph, read before a sampled step's backward: from the
loss's top through its own nodes (reductions, arithmetic, shape changes, the loss functions) to
the first layer. A softmax over one class there (``singleton_softmax``), or a softmax's output
under a cross-entropy's log_softmax or an nll_loss (``probabilities_loss``). Node names, saved
dims and shape metadata only: no tensor op, no sync.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import torch

from traindoc.live import measure

_LOSS_SIDE = re.compile(
    r"(Neg|Div|Mul|Add|Sub|Rsub|Sum|Mean|Log|Log1p|Exp|Pow|Abs|Sqrt|Clamp\w*|MaskedFill|Where|Squeeze|"
    r"Unsqueeze|View|Reshape\w*|UnsafeView|Expand|Permute|Transpose|T|Select|Slice|Index|Gather|ToCopy|"
    r"Clone|Alias|Unbind|Stack|Cat|Max|Min|Maximum|Minimum|Sigmoid|\w*Loss\w*|BinaryCrossEntropy\w*|"
    r"KlDiv|Xlogy|SpecialXlogy)Backward\d*$")
_SOFTMAX = ("SoftmaxBackward0", "LogSoftmaxBackward0")
_LAYERS = ("AddmmBackward0", "MmBackward0", "ConvolutionBackward0", "LinearBackward0")
# Shape and dtype changes: what used a tensor is the first node above them.
_SHAPE = ("ViewBackward0", "UnsafeViewBackward0", "ReshapeAliasBackward0", "SqueezeBackward0",
          "SqueezeBackward1", "SqueezeBackward4", "UnsqueezeBackward0", "PermuteBackward0",
          "TransposeBackward0", "ToCopyBackward0", "CloneBackward0")
# Between a layer and the softmax that takes its output: shape changes, a bias, a temperature.
_TO_LAYER = _SHAPE + ("AddBackward0", "DivBackward0", "MulBackward0")


@dataclasses.dataclass(frozen=True)
class SingletonSoftmax:
    """A softmax (or log_softmax) over a dimension of size 1 on the loss's side of the model:
    its output is exactly 1 (log: 0) whatever its input. ``op`` names it, ``shape`` is its
    input's, ``dim`` the dimension, ``taken_by`` the node that used it (``nll_loss``: a
    cross-entropy), ``targets`` what the loss compared it with (``class indices``, ``floats``
    or ""), ``weight`` the layer's weight that made the one-wide input (None: not found);
    ``alone``: no trainable leaf is reached from the loss but through it (no other term)."""

    op: str
    shape: tuple[int, ...]
    dim: int
    taken_by: str
    targets: str
    weight: torch.Tensor | None
    alone: bool = True


def singleton_softmax(grad_fn: Any, budget: int = 48) -> SingletonSoftmax | None:
    """The first softmax over a dimension of size 1 that a loss's graph reaches from its top
    through loss-side nodes only (``_LOSS_SIDE``; breadth first, at most ``budget`` nodes).
    Reads the nodes' names, saved dims and shape metadata: no tensor op, no sync (the targets
    are unpacked only once a softmax over one class was found)."""
    # (node, the nearest node above it that is no shape change: what used its output)
    queue: list[tuple[Any, Any]] = [(grad_fn, None)] if grad_fn is not None else []
    seen: set[int] = set()
    while queue and budget > 0:
        node, user = queue.pop(0)
        budget -= 1
        name = type(node).__name__
        if name in _SOFTMAX:
            found = _singleton(node, name, user)
            if found is not None:
                return dataclasses.replace(found, alone=not _reaches_leaf(grad_fn, node))
            continue  # a softmax over classes: the model is behind it
        if not _LOSS_SIDE.match(name):
            continue
        if name not in _SHAPE:
            user = node
        for fn, _ in node.next_functions:
            if fn is not None and id(fn) not in seen:
                seen.add(id(fn))
                queue.append((fn, user))
    return None


# Between a probability-taking loss node and the softmax that made its input: what mixes,
# selects or reshapes probabilities without a log (a mixture of experts' weighted sum, a gather).
_MIXING = _SHAPE + ("AddBackward0", "MulBackward0", "DivBackward0", "CatBackward0", "StackBackward0",
                    "IndexAddBackward0", "IndexBackward0", "GatherBackward0", "SelectBackward0",
                    "SliceBackward0", "ExpandBackward0", "ClampBackward1", "ClampMinBackward0",
                    "ScatterAddBackward0", "SumBackward1")


@dataclasses.dataclass(frozen=True)
class ProbabilitiesLoss:
    """A class-index loss that takes probabilities: ``cross_entropy`` (an nll_loss of a
    log_softmax) or ``nll_loss`` whose input a softmax over the classes made, through mixing or
    shape changes only. ``classes`` is the softmax's size along ``dim`` of ``shape``;
    ``weight`` the weight of the layer that made the softmax's input (None: not found)."""

    loss: str
    classes: int
    shape: tuple[int, ...]
    dim: int
    weight: torch.Tensor | None


def probabilities_loss(grad_fn: Any, budget: int = 48) -> ProbabilitiesLoss | None:
    """The first nll_loss a loss's graph reaches from its top through loss-side nodes whose
    input is a softmax's output over 2 or more classes: directly (``F.nll_loss(F.softmax(x))``)
    or under the log_softmax of ``cross_entropy`` (``nn.Softmax`` as the model's last layer
    before ``nn.CrossEntropyLoss``). A log in between (``nll_loss(torch.log(p))``) is right and
    ends the search. Node names, saved dims and shape metadata only: no tensor op, no sync."""
    queue: list[Any] = [grad_fn] if grad_fn is not None else []
    seen: set[int] = set()
    while queue and budget > 0:
        node = queue.pop(0)
        budget -= 1
        name = type(node).__name__
        if name.startswith("NllLoss"):
            input_fn = node.next_functions[0][0] if node.next_functions else None
            found = _softmax_below(input_fn)
            if found is not None:
                return found
            continue
        if not _LOSS_SIDE.match(name):
            continue
        for fn, _ in node.next_functions:
            if fn is not None and id(fn) not in seen:
                seen.add(id(fn))
                queue.append(fn)
    return None


def _softmax_below(node: Any, limit: int = 24) -> ProbabilitiesLoss | None:
    """A softmax under an nll_loss's input, through one cross-entropy log_softmax at most and
    mixing nodes (``_MIXING``); None at a log, a layer or anything else."""
    loss = "nll_loss"
    todo, seen = [node], 0
    while todo and seen < limit:
        node = todo.pop(0)
        seen += 1
        name = type(node).__name__ if node is not None else ""
        if name == "LogSoftmaxBackward0" and loss == "nll_loss":
            loss = "cross_entropy"  # the log_softmax of F.cross_entropy (or the user's)
            todo = [fn for fn, _ in node.next_functions[:1] if fn is not None]
            continue
        if name == "SoftmaxBackward0":
            try:
                dim, shape = int(node._saved_dim), tuple(int(n) for n in node._input_metadata[0].shape)
            except (AttributeError, RuntimeError, IndexError):
                return None
            if dim >= 1 << 63:
                dim -= 1 << 64
            if not shape or not -len(shape) <= dim < len(shape) or shape[dim] < 2:
                return None  # one class is single-class-softmax's
            return ProbabilitiesLoss(loss=loss, classes=shape[dim], shape=shape, dim=dim % len(shape),
                                     weight=_layer_weight(node, one_wide=False))
        if name in _MIXING:
            todo.extend(fn for fn, _ in node.next_functions if fn is not None)
    return None


def _reaches_leaf(root: Any, skip: Any, limit: int = 100_000) -> bool:
    """Does the graph from ``root`` reach a trainable leaf other than through ``skip``?"""
    todo, seen = [root], {id(skip)}
    while todo and len(seen) < limit:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if type(node).__name__ == "AccumulateGrad":
            return True
        todo.extend(n for n, _ in node.next_functions if n is not None)
    return False


def _singleton(node: Any, name: str, user: Any) -> SingletonSoftmax | None:
    # The output's shape from the node's metadata: unpacking ``_saved_result`` would run an op
    # (a detach) on it, a DTensor's own dispatch under loss_parallel.
    try:
        dim, shape = int(node._saved_dim), tuple(int(n) for n in node._input_metadata[0].shape)
    except (AttributeError, RuntimeError, IndexError):  # another torch's names, or freed
        return None
    if dim >= 1 << 63:  # an int64 saved as unsigned: -1 reads as 2**64 - 1
        dim -= 1 << 64
    if not shape or not -len(shape) <= dim < len(shape) or shape[dim] != 1 or 0 in shape:
        return None
    return SingletonSoftmax(
        op="log_softmax" if name.startswith("Log") else "softmax", shape=shape, dim=dim % len(shape),
        taken_by=_op_name(user) if user is not None else "", targets=_targets(user),
        weight=_layer_weight(node))


def _op_name(node: Any) -> str:
    """``NllLossBackward0`` -> ``nll_loss``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", re.sub(r"Backward\d*$", "", type(node).__name__)).lower()


def _targets(node: Any) -> str:
    """What a loss node compared the softmax with: class indices (an integer target) or floats."""
    for attr in ("_saved_target", "_saved_other", "_saved_self"):
        try:
            t = getattr(node, attr, None)
        except RuntimeError:
            continue
        if isinstance(t, torch.Tensor) and t.grad_fn is None and not t.requires_grad:
            return "floats" if t.is_floating_point() else "class indices"
    return ""


def _layer_weight(softmax: Any, limit: int = 6, one_wide: bool = True) -> torch.Tensor | None:
    """The weight of the layer whose output the softmax took (``one_wide``: a Linear's
    ``[1, in]``, a convolution's ``[1, in, k, k]``), through shape changes, a bias or a
    temperature."""
    node: Any = next((fn for fn, _ in softmax.next_functions if fn is not None), None)
    for _ in range(limit):
        if node is None:
            return None
        name = type(node).__name__
        if name in _LAYERS:
            for fn, _ in node.next_functions:
                leaf = measure.chain_leaf(fn, ("TBackward0", "ToCopyBackward0", "ViewBackward0"), 3)
                if isinstance(leaf, torch.Tensor) and leaf.ndim >= 2 and (min(leaf.shape[:2]) == 1 or not one_wide):
                    return leaf
            return None
        if name not in _TO_LAYER:
            return None
        node = node.next_functions[0][0] if node.next_functions else None
    return None
