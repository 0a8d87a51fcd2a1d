"""One-line calls a training script can make when zero-code capture does not see enough.

    traindoc.log(val_acc=acc, train_f1=f1)                      # a script that only prints
    loss = traindoc.loss_terms(delta=100 * l_delta, dag=l_dag)  # name the terms of a loss
    traindoc.watch_router(model.moe.gate)                       # a router not recognized

Each call is cheap and does nothing while traindoc is not watching, so the script runs the same
with and without it (``traindoc.loss_terms`` still returns the loss). Nothing here imports
torch: ``import traindoc`` stays instant. The live probes subscribe to the calls while a
session runs (``live/probes/metrics.py``, ``losses.py``, ``routers.py``).
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Mapping

LogSink = Callable[[str, Mapping[str, object]], None]
TermSink = Callable[[list[tuple[str, Any]]], None]
RouterSink = Callable[[Any, "int | None"], None]

# Subscribers, one per running live session (normally zero or one).
log_sinks: list[LogSink] = []
term_sinks: list[TermSink] = []
router_sinks: list[RouterSink] = []
# Routers named by the user, also before a session starts (weak: never keeps a model alive).
routers: "weakref.WeakKeyDictionary[Any, int | None]" = weakref.WeakKeyDictionary()


def log(metrics: Mapping[str, object] | None = None, /, **values: object) -> None:
    """Report metrics the script computes, at the current training step.

    Names are read like log columns (``val_acc``, ``Train_F1``, ``expert_gini``, ``lr`` ...,
    see docs/live-metrics.md); values are numbers or one-element tensors (a tensor on an
    accelerator is read in traindoc's one batched transfer, not here).

        traindoc.log(train_acc=train_acc, val_acc=val_acc)
        traindoc.log({"val/f1": f1})
    """
    if not log_sinks:
        return
    merged: dict[str, object] = dict(metrics or {})
    merged.update(values)
    for sink in list(log_sinks):
        sink("traindoc.log", merged)


def loss_terms(**terms: Any) -> Any:
    """Name the terms of a multi-term loss and return their sum (in the order given).

        loss = traindoc.loss_terms(delta=args.lambda_delta * loss_delta, dag=loss_dag)

    or, keeping your own sum, name the (weighted or unweighted) terms before ``backward()``:

        loss = args.lambda_delta * loss_delta + loss_dag
        traindoc.loss_terms(delta=loss_delta, dag=loss_dag)

    traindoc finds each named tensor in the loss's autograd graph (with the weight between the
    loss and it) and measures its share of the gradient on sampled steps
    (``loss-term-imbalance``). Without traindoc it is ``delta + dag``.
    """
    if not terms:
        raise ValueError("loss_terms() needs at least one named term, e.g. loss_terms(ce=ce, aux=aux)")
    total: Any = None
    for value in terms.values():
        total = value if total is None else total + value
    if term_sinks:
        named = list(terms.items())
        for sink in list(term_sinks):
            sink(named)
    return total


def watch_router(module: Any, *, experts: int | None = None) -> Any:
    """Watch a mixture-of-experts router whose output holds one score per expert (logits or
    probabilities, last dimension = number of experts); returns the module.

        self.gate = traindoc.watch_router(nn.Linear(d_model, n_experts))

    On sampled steps traindoc reads which expert each token's top score picks and reports the
    load's Gini coefficient and entropy (``expert_gini``, ``expert_entropy``). Routers that
    sit next to a ``ModuleList`` of experts are recognized without this call.
    """
    if experts is not None and experts < 2:
        raise ValueError(f"experts must be >= 2, got {experts}")
    routers[module] = experts
    for sink in list(router_sinks):
        sink(module, experts)
    return module


__all__ = ["log", "loss_terms", "watch_router"]
