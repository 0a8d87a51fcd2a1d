"""muon-adamw-scale-lr: an AdamW-scale learning rate handed to Muon."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterator

from traindoc.lint._ast import Module, arg, dotted, kwarg, number, value_of
from traindoc.lint.rules._common import Hit, Invalid

LIMIT = 5e-4  # at or below this, an LR is AdamW-scale; Muon's default is 1e-3


class MuonAdamwScaleLr:
    """``torch.optim.Muon`` (or a ``Muon`` class from another package) gets a literal learning
    rate of 5e-4 or less, directly, through a name assigned a literal in the same file, or in a
    param group. Muon's orthogonalized update is meant for lr ~1e-3 to 2e-2; at an AdamW LR
    such as 3e-4 the weights barely move (seed 002: ``max_lr: 0.0003 # use 0.001 for Muon``).
    Quiet with ``adjust_lr_fn="match_rms_adamw"``, which rescales Muon to take AdamW LRs.
    """

    id: ClassVar[str] = "muon-adamw-scale-lr"
    invalid: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            """
            import torch

            hidden = [p for p in model.parameters() if p.ndim == 2]
            optimizer = torch.optim.Muon(hidden, lr=3e-4, momentum=0.95)
            """,
            4,
        ),
        Invalid(
            """
            from muon import Muon

            max_lr = 0.0003  # lower for AdamW (use 0.001 for Muon)

            def build(model):
                return Muon(
                    [{"params": model.blocks.parameters()}],
                    lr=max_lr,
                )
            """,
            8,
        ),
    )
    valid: ClassVar[tuple[str, ...]] = (
        """
        import torch

        muon = torch.optim.Muon(hidden_matrices, lr=0.02, momentum=0.95)
        adamw = torch.optim.AdamW(embeddings_and_gains, lr=3e-4)
        """,
        """
        import torch

        optimizer = torch.optim.Muon(hidden, lr=3e-4, adjust_lr_fn="match_rms_adamw")
        """,
        """
        import torch

        optimizer = torch.optim.Muon(hidden, lr=args.lr)
        """,
    )

    def check(self, mod: Module) -> Iterator[Hit]:
        for call in mod.named("Muon"):
            q = mod.callee(call)
            if q.split(".")[-1] != "Muon":
                continue
            adjust = kwarg(call, "adjust_lr_fn")
            if isinstance(adjust, ast.Constant) and adjust.value == "match_rms_adamw":
                continue
            candidates = [arg(call, 1, "lr")]
            params = arg(call, 0, "params")
            if isinstance(params, (ast.List, ast.Tuple)):
                for group in params.elts:
                    if isinstance(group, ast.Dict):
                        for key, value in zip(group.keys, group.values):
                            if isinstance(key, ast.Constant) and key.value == "lr":
                                candidates.append(value)
            for node in candidates:
                if node is None:
                    continue
                lr = number(value_of(mod, node, call))
                if lr is None or not 0 < lr <= LIMIT:
                    continue
                owner = self._owner(mod, call)
                shown = f"{lr:g}"
                via = f" (`{node.id}`)" if isinstance(node, ast.Name) else ""
                yield Hit(
                    node,
                    f"`{owner or q}` is built with lr={shown}{via}, an AdamW-scale learning rate: "
                    "Muon's orthogonalized updates are meant for lr ~1e-3 to 2e-2 (default "
                    f"1e-3), so at {shown} the weights barely move",
                    cause="An LR tuned for AdamW was reused for Muon, whose update has a fixed "
                    "RMS per matrix and needs a larger step size.",
                    fix=f"Raise Muon's lr to ~1e-3 (its default) or higher, keeping {shown} for "
                    "an AdamW on the non-matrix parameters; or pass "
                    "`adjust_lr_fn=\"match_rms_adamw\"` to torch.optim.Muon to reuse AdamW LRs.",
                )
                break

    def _owner(self, mod: Module, call: ast.Call) -> str | None:
        parent = mod.parent.get(call)
        if isinstance(parent, ast.Assign) and len(parent.targets) == 1:
            name = dotted(parent.targets[0])
            if name:
                return f"{name} = {mod.callee(call)}(...)"
        return None
