"""bf16-master-weights: the model is cast to bf16/fp16 and then trained by a plain optimizer."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterator

from traindoc.lint._ast import Module, Scope, dotted, kwarg, method
from traindoc.lint.rules._common import Hit, Invalid

# Optimizers or options that keep fp32 state for bf16 parameters (master weights, Kahan
# summation, stochastic rounding): with these a bf16 model trains fine.
MASTER_KWARGS = ("master_weights", "kahan_sum", "bf16_stochastic_round", "use_kahan_summation")
MASTER_PACKAGES = ("torchao.", "optimi.", "apex.", "deepspeed.", "transformer_engine.")
CASTS = ("to", "type", "half", "bfloat16")


class Bf16MasterWeights:
    """A model's parameters are cast to bf16/fp16 (``model.to(torch.bfloat16)``,
    ``model.bfloat16()``, ``model.half()``) before an optimizer that keeps no fp32 copy is built
    on them, in the same function. Updates smaller than half a bf16 step round away
    (``update-underflow``): weights near 1.0 cannot move by less than ~0.004. Quiet when the
    optimizer keeps fp32 master weights (Kahan summation, stochastic rounding) or only trains
    adapters (PEFT / a ``requires_grad`` filter), and for casts after training (export).
    """

    id: ClassVar[str] = "bf16-master-weights"
    cause_of: ClassVar[tuple[str, ...]] = ("update-underflow",)  # what the cast leads to at run time
    invalid: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            """
            import torch

            model = Transformer(config).cuda()
            model = model.to(dtype=torch.bfloat16)
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
            """,
            4,
        ),
        Invalid(
            """
            import torch
            from torch.optim import SGD

            def main():
                net = ResNet18()
                net.half()
                opt = SGD(net.parameters(), lr=0.1, momentum=0.9)
                train(net, opt)
            """,
            6,
        ),
        Invalid(
            """
            import torch

            dtype = torch.bfloat16
            model = GPT(cfg).to("cuda", dtype)
            optimizer = torch.optim.Adam([{"params": model.parameters(), "lr": 3e-4}])
            """,
            4,
        ),
    )
    valid: ClassVar[tuple[str, ...]] = (
        """
        import torch

        model = Transformer(config).cuda()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for x, y in loader:
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
                loss = criterion(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        """,
        """
        import torch

        teacher = load_teacher().to(torch.bfloat16).eval()
        student = Student().cuda()
        optimizer = torch.optim.AdamW(student.parameters(), lr=3e-4)
        """,
        """
        import torch
        from optimi import AdamW

        model = Transformer(config).to(torch.bfloat16)
        optimizer = AdamW(model.parameters(), lr=1e-3, kahan_sum=True)
        """,
        """
        import torch

        model = Net()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in loader:
            optimizer.zero_grad()
            criterion(model(x), y).backward()
            optimizer.step()
        model.half()
        torch.save(model.state_dict(), "model_fp16.pt")
        """,
        """
        import torch

        images = images.to(device, torch.float16)
        model = model.to(device)
        optimizer = torch.optim.Adam(model.parameters())
        """,
    )

    def check(self, mod: Module) -> Iterator[Hit]:
        if any(q.startswith(("peft", "peft.")) for q in mod.aliases.values()):
            return  # adapters are kept in fp32 by PEFT; the cast base model is frozen
        if not any(mod.named(c) for c in CASTS):
            return
        for scope in mod.scopes:
            casts = list(self._casts(mod, scope))
            if not casts:
                continue
            optimizers = [
                c
                for c in mod.constructors()
                if mod.scope_of.get(c) is scope and mod.kind_of_call(c) == "optimizer"
            ]
            for node, model, dtype in casts:
                for opt in optimizers:
                    if opt.lineno <= node.lineno or not _takes_params_of(opt, model):
                        continue
                    if _keeps_master(mod, opt):
                        break
                    opt_name = mod.callee(opt).split(".")[-1]
                    short, share = ("a bf16", "0.4%") if dtype == "torch.bfloat16" else ("an fp16", "0.05%")
                    yield Hit(
                        node,
                        f"`{model}` is cast to `{dtype}` (line {node.lineno}) and its parameters "
                        f"go to `{opt_name}` (line {opt.lineno}) with no fp32 master copy: "
                        f"updates smaller than half {short} step (~{share} of a weight) round "
                        "away and those weights stop moving",
                        cause=f"`{mod.text(node)}` stores the trained parameters themselves in "
                        "16 bits; the optimizer adds its small updates to them in 16 bits.",
                        fix=f"Keep `{model}` in fp32 (remove the cast) and run the forward under "
                        f"`torch.autocast(device_type=..., dtype={dtype})`; or use an optimizer "
                        "with fp32 master weights / Kahan summation.",
                    )
                    break

    def _casts(self, mod: Module, scope: Scope) -> Iterator[tuple[ast.stmt, str, str]]:
        """(node, model name, dtype) for each cast of a module-like name in ``scope``."""
        for stmt in _statements(mod, scope):
            if isinstance(stmt, ast.Expr):
                call, target = stmt.value, None
            elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                call, target = stmt.value, dotted(stmt.targets[0])
            else:
                continue
            # walk the call chain: Net().to(dtype).cuda() / model.half()
            node = call
            while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                dtype = _cast_dtype(mod, scope, node)
                if dtype:
                    receiver = dotted(node.func.value)
                    name = target or receiver
                    if name:
                        yield stmt, name, dtype
                    break
                node = node.func.value


def _statements(mod: Module, scope: Scope) -> Iterator[ast.stmt]:
    """The statements of ``scope`` that hold a possible cast (``.to``, ``.half()`` ...)."""
    seen: set[int] = set()
    for call in mod.named_in(scope, *CASTS):
        node = mod.parent.get(call)
        while node is not None and not isinstance(node, ast.stmt):
            node = mod.parent.get(node)
        if isinstance(node, (ast.Expr, ast.Assign)) and id(node) not in seen:
            seen.add(id(node))
            yield node


def _cast_dtype(mod: Module, scope: Scope, call: ast.Call) -> str | None:
    if not isinstance(call.func, ast.Attribute):  # not a method call: no cast
        return None
    attr = call.func.attr
    if attr == "bfloat16" and not call.args:
        return "torch.bfloat16"
    if attr == "half" and not call.args:
        return "torch.float16"
    if attr in ("to", "type"):
        candidates = [kwarg(call, "dtype"), *call.args[:2]]
        for c in candidates:
            dtype = mod.is_dtype(c, scope)
            if dtype:
                return dtype
    return None


def _takes_params_of(opt: ast.Call, model: str) -> bool:
    requires_grad_filter = False
    takes = False
    for n in ast.walk(opt):
        receiver = method(n, "parameters", "named_parameters")
        if receiver is not None and dotted(receiver) == model:
            takes = True
        if isinstance(n, ast.Attribute) and n.attr == "requires_grad":
            requires_grad_filter = True
    return takes and not requires_grad_filter


def _keeps_master(mod: Module, opt: ast.Call) -> bool:
    if mod.callee(opt).startswith(MASTER_PACKAGES):
        return True
    for key in MASTER_KWARGS:
        value = kwarg(opt, key)
        if value is not None and not (isinstance(value, ast.Constant) and not value.value):
            return True
    return False
