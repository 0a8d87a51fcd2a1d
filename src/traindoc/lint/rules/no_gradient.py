"""no-gradient: a loss term's prediction is detached, so the module that made it never trains."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterator

from traindoc.lint._ast import Module, Scope, dotted, is_detached_value, method
from traindoc.lint.rules._common import Hit, Invalid

# torch.nn.functional losses whose first argument is the prediction (the second is the target)
FUNCTIONAL_LOSSES = frozenset(
    "cross_entropy nll_loss mse_loss l1_loss smooth_l1_loss huber_loss binary_cross_entropy "
    "binary_cross_entropy_with_logits kl_div poisson_nll_loss gaussian_nll_loss "
    "multilabel_soft_margin_loss soft_margin_loss".split()
)


# losses whose two arguments play the same role: a detached first argument may be the target
SYMMETRIC = frozenset({"mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss"})
# Methods that change only a tensor's shape or dtype: a detached value stays detached through them.
_SHAPE_ONLY = ("squeeze", "unsqueeze", "float", "view", "reshape", "flatten")


class DetachedPrediction:
    """A loss term is computed from a prediction that was ``.detach()``ed (``aux =
    model.aux_head(feats).detach()`` then ``F.mse_loss(aux, target)``) and the term is added to
    the loss handed to backward. The term is counted in the loss and logged, but sends no
    gradient: the head that made the prediction never trains. Only the first argument (the
    prediction) counts; a detached *target* (``F.mse_loss(online(x), target_net(x).detach())``)
    is the usual stop-gradient and stays quiet.
    """

    id: ClassVar[str] = "no-gradient"
    invalid: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            """
            import torch.nn.functional as F

            for x, y, d in loader:
                feats = model.backbone(x)
                logits = model.cls_head(feats)
                aux = model.aux_head(feats).detach().squeeze(-1)
                loss_cls = F.cross_entropy(logits, y)
                loss_aux = F.mse_loss(aux, d)
                loss = loss_cls + 0.5 * loss_aux
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            """,
            8,
        ),
    )
    valid: ClassVar[tuple[str, ...]] = (
        """
        import torch.nn.functional as F

        for x1, x2 in loader:
            online = predictor(online_net(x1))
            with torch.no_grad():
                target = target_net(x2)
            loss = F.mse_loss(F.normalize(online, dim=-1), F.normalize(target.detach(), dim=-1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        """,
        """
        import torch.nn.functional as F

        for x, y in loader:
            feats = backbone(x)
            probe_logits = probe(feats.detach())
            loss = F.cross_entropy(head(feats), y) + F.cross_entropy(probe_logits, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        """,
        """
        import torch.nn.functional as F

        for x1, x2 in loader:
            target = target_net(x2).detach()
            loss = F.mse_loss(target, predictor(online_net(x1)))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        """,
    )

    def check(self, mod: Module) -> Iterator[Hit]:
        criteria = {text for text, calls in mod.built.items() if any(_builds_loss(mod, c) for c in calls)}
        for scope in mod.scopes:
            if not scope.trained or scope.is_eval:
                continue
            terms = mod.loss_names(scope)
            for target, stmt, whole in scope.assigns:
                if target not in terms:
                    continue
                value = _loss_call(whole)
                if value is None:
                    continue
                q = mod.callee(value)
                is_loss = (
                    q.split(".")[-1] in FUNCTIONAL_LOSSES and q.startswith(("torch.nn.functional.", "F."))
                ) or dotted(value.func) in criteria
                if not is_loss:
                    continue
                found = _detached_prediction(mod, scope, value.args[0], stmt.lineno)
                if found is None:
                    continue
                if q.split(".")[-1] in SYMMETRIC and len(value.args) > 1 and _computed(scope, value.args[1]):
                    continue  # mse(target.detach(), prediction): the order does not matter
                name, how, line = found
                yield Hit(
                    stmt,
                    f"`{target}` is computed from `{name}`, which is detached (`{how}`, line "
                    f"{line}): the term counts in the loss but sends no gradient, so the module "
                    f"that produced `{name}` never trains",
                    cause="`.detach()` was applied to the prediction instead of to the input "
                    "whose gradient was meant to be stopped.",
                    fix=f"Remove `.detach()` from `{name}`; to keep this loss from updating the "
                    "shared layers, detach the input of the head instead (`head(feats.detach())`).",
                )


def _builds_loss(mod: Module, call: ast.AST | None) -> bool:
    """``nn.CrossEntropyLoss()``, also ``MyLoss().to(device)``."""
    while isinstance(call, ast.Call):
        if mod.callee(call).split(".")[-1].endswith("Loss"):
            return True
        call = call.func.value if isinstance(call.func, ast.Attribute) else None
    return False


def _computed(scope: Scope, node: ast.expr) -> bool:
    """``node`` is computed in this function (a call, or a name assigned from one): possibly a
    prediction, unlike a batch's target that arrives from the loader."""
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            return True
        if isinstance(n, ast.Name) and any(
            isinstance(v, ast.Call) and not _drawn(v) for _, v in scope.values_of(n.id)
        ):
            return True
    return False


def _drawn(call: ast.Call) -> bool:
    """``next(batches)``: a batch drawn from an iterator, data rather than a prediction."""
    return isinstance(call.func, ast.Name) and call.func.id == "next"


def _loss_call(value: ast.AST) -> ast.Call | None:
    """The call a loss term is: ``F.mse_loss(a, b)``, also scaled (``w * F.mse_loss(a, b)``,
    ``criterion(a, b) / accum``)."""
    if isinstance(value, ast.Call):
        return value if value.args else None
    if isinstance(value, ast.BinOp) and isinstance(value.op, (ast.Mult, ast.Div)):
        for side in (value.left, value.right):
            if isinstance(side, ast.Call) and side.args:
                return side
    return None


def _detached_prediction(
    mod: Module, scope: Scope, node: ast.expr, line: int
) -> tuple[str, str, int] | None:
    """(name, how, line) when ``node`` is, or names, a detached value."""
    # look through shape-only methods: aux.squeeze(-1), aux.float()
    while (receiver := method(node, *_SHAPE_ONLY)) is not None:
        node = receiver
    how = is_detached_value(mod, node)
    if how and not isinstance(node, ast.Name):
        return mod.text(node), how, node.lineno
    if isinstance(node, ast.Name):
        for stmt, value in reversed(scope.values_of(node.id, line)):
            inner: ast.AST = value
            while (receiver := method(inner, *_SHAPE_ONLY)) is not None:
                inner = receiver
            how = is_detached_value(mod, inner)
            if how and method(inner, "detach") is not None:
                return node.id, mod.text(value), stmt.lineno
            return None
    return None
