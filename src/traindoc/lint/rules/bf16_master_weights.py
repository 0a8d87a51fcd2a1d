"""bf16-master-weights: the model is cast to bf16/fp16 and then trained by a plain optimizer."""

from __future__ import annotations

import ast
import math
from typing import ClassVar, Iterator

from traindoc.lint._ast import Module, Scope, arg, dotted, kwarg, method, number, value_of
from traindoc.lint.rules._common import Hit, Invalid

# Optimizers or options that keep fp32 state for bf16 parameters (master weights, Kahan
# summation, stochastic rounding): with these a bf16 model trains fine.
MASTER_KWARGS = ("master_weights", "kahan_sum", "bf16_stochastic_round", "use_kahan_summation")
MASTER_PACKAGES = ("torchao.", "optimi.", "apex.", "deepspeed.", "transformer_engine.")
CASTS = ("to", "type", "half", "bfloat16")
# Optimizers whose step moves each element by about its LR, whatever the gradient's scale.
LR_SIZED_STEPS = frozenset({"Adam", "AdamW", "Adamax", "NAdam", "RAdam", "Lion", "Adam8bit", "AdamW8bit",
                            "PagedAdamW", "PagedAdamW8bit"})
# Fraction bits of the low precisions: the spacing of values in [2**e, 2**(e+1)) is 2**(e - bits).
FRACTION_BITS = {"torch.bfloat16": 7, "torch.float16": 10}
# Loaders that build a model in the dtype they are given (Hugging Face transformers, diffusers).
LOADERS = ("from_pretrained", "from_config", "from_single_file")
LOADER_KWARGS = ("torch_dtype", "dtype")
# Lightning's precisions that store the parameters themselves in 16 bits ("bf16"/"16" mean mixed).
TRUE_PRECISIONS = {"bf16-true": "torch.bfloat16", "16-true": "torch.float16"}
LIGHTNING = ("lightning", "pytorch_lightning", "lightning_fabric")
# How a model came to be in 16 bits, as the message and the fix say it.
HOW = {"cast": "cast to", "loaded": "loaded in", "default": "built in"}
KEEP = {"cast": "remove the cast", "loaded": "load it without the dtype",
        "default": "build it before `torch.set_default_dtype(...)`, or set float32 back first"}
DTYPE_NAMES = {"bfloat16": "torch.bfloat16", "bf16": "torch.bfloat16", "float16": "torch.float16",
               "fp16": "torch.float16", "half": "torch.float16"}


class Bf16MasterWeights:
    """A model's parameters are cast to bf16/fp16 (``model.to(torch.bfloat16)``,
    ``model.bfloat16()``, ``model.half()``), loaded in it
    (``AutoModelForCausalLM.from_pretrained(name, torch_dtype=torch.bfloat16)``,
    ``dtype="bfloat16"``) or built while ``torch.set_default_dtype(torch.bfloat16)`` holds,
    before an optimizer that keeps no fp32 copy is built on them, in the
    same function; or a Lightning ``Trainer``/``Fabric`` with ``precision="bf16-true"`` trains.
    Updates smaller than half a bf16 step round away (``update-underflow``): weights near 1.0
    cannot move by less than ~0.004; with an Adam-like optimizer and a known LR the finding
    names the largest weight that still moves. Quiet when the optimizer keeps fp32 master
    weights (Kahan summation, stochastic rounding) or only trains adapters (PEFT / a
    ``requires_grad`` filter), and for casts after training (export).
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
        Invalid(
            """
            import torch
            from transformers import AutoModelForCausalLM

            model = AutoModelForCausalLM.from_pretrained(
                "Qwen/Qwen2.5-0.5B", torch_dtype=torch.bfloat16, attn_implementation="sdpa"
            )
            model.gradient_checkpointing_enable()
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.0)
            """,
            4,
        ),
        Invalid(
            """
            import lightning as L

            trainer = L.Trainer(max_epochs=3, precision="bf16-true", accelerator="gpu")
            trainer.fit(LitClassifier(lr=3e-4), train_loader, val_loader)
            """,
            3,
        ),
        Invalid(
            """
            from lightning.fabric import Fabric

            fabric = Fabric(devices=1, precision="16-true")
            model = GPT(config)
            optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
            model, optimizer = fabric.setup(model, optimizer)
            """,
            3,
        ),
        Invalid(
            """
            import torch
            from diffusers import UNet2DConditionModel

            unet = UNet2DConditionModel.from_pretrained(base, subfolder="unet", dtype="float16").to("cuda")
            optimizer = torch.optim.AdamW(unet.parameters(), lr=1e-5)
            """,
            4,
        ),
        Invalid(
            """
            import torch

            def main(cfg):
                torch.set_default_dtype(torch.bfloat16)
                model = Transformer(cfg.model)
                torch.set_default_dtype(torch.float32)
                opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
            """,
            4,
        ),
        Invalid(
            """
            import torch

            dtype = "bfloat16"
            ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
            model = GPT(gptconf)
            model.to(device=device, dtype=ptdtype)
            optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95))
            """,
            6,
        ),
    )
    valid: ClassVar[tuple[str, ...]] = (
        """
        import lightning as L

        trainer = L.Trainer(max_epochs=3, precision="bf16-mixed")
        trainer.fit(LitModel(), train_loader)
        predictor = L.Trainer(precision="bf16-true")
        predictor.predict(LitModel.load_from_checkpoint(path), test_loader)
        """,
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
        from torchao.prototype import low_bit_optim
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=torch.bfloat16)
        optim = low_bit_optim.AdamW8bit(model.parameters(), lr=args.lr, bf16_stochastic_round=True)
        """,
        """
        import torch
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(path, torch_dtype="auto")
        optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
        """,
        """
        import torch
        from transformers import AutoModelForCausalLM

        reference = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.bfloat16).eval()
        policy = AutoModelForCausalLM.from_pretrained(path)
        optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-6)
        """,
        """
        import torch

        torch.set_default_dtype(torch.bfloat16)
        rope = RotaryCache(cfg)
        draft = Transformer(cfg.draft).float()
        torch.set_default_dtype(torch.float32)
        model = Transformer(cfg, rope)
        optimizer = torch.optim.AdamW([*model.parameters(), *draft.parameters()], lr=3e-4)
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
        yield from _true_precision(mod)
        if not any(mod.named(c) for c in (*CASTS, *LOADERS, "set_default_dtype")):
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
            for node, model, dtype, how in casts:
                for opt in optimizers:
                    if opt.lineno <= node.lineno or not _takes_params_of(opt, model):
                        continue
                    if _keeps_master(mod, opt):
                        break
                    opt_name = mod.callee(opt).split(".")[-1]
                    short, share = ("a bf16", "0.4%") if dtype == "torch.bfloat16" else ("an fp16", "0.05%")
                    yield Hit(
                        node,
                        f"`{model}` is {HOW[how]} `{dtype}` (line {node.lineno}) and its parameters "
                        f"go to `{opt_name}` (line {opt.lineno}) with no fp32 master copy: "
                        f"updates smaller than half {short} step (~{share} of a weight) round "
                        "away and those weights stop moving" + _with_lr(mod, scope, opt, opt_name, dtype),
                        cause=f"`{mod.text(node)}` stores the trained parameters themselves in "
                        "16 bits; the optimizer adds its small updates to them in 16 bits.",
                        fix=f"Keep `{model}` in fp32 ({KEEP[how]}) "
                        f"and run the forward under "
                        f"`torch.autocast(device_type=..., dtype={dtype})`; or use an optimizer "
                        "with fp32 master weights / Kahan summation.",
                    )
                    break

    def _casts(self, mod: Module, scope: Scope) -> Iterator[tuple[ast.stmt, str, str, str]]:
        """(node, model name, dtype, how: a key of ``HOW``) for each cast of a module-like name
        in ``scope``, each model a loader builds in a low precision, and each object built
        while ``torch.set_default_dtype`` makes new parameters low-precision."""
        yield from _built_by_default(mod, scope)
        for stmt in _statements(mod, scope):
            if isinstance(stmt, ast.Expr):
                call, target = stmt.value, None
            elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                call, target = stmt.value, dotted(stmt.targets[0])
            else:
                continue
            # walk the call chain: Net().to(dtype).cuda() / model.half() / Auto*.from_pretrained(...)
            node = call
            while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                dtype = _cast_dtype(mod, scope, node)
                loaded = dtype is None and node.func.attr in LOADERS
                if loaded:
                    dtype = _loader_dtype(mod, scope, node)
                if dtype:
                    name = target or (None if loaded else dotted(node.func.value))
                    if name:
                        yield stmt, name, dtype, "loaded" if loaded else "cast"
                    break
                node = node.func.value


def _built_by_default(mod: Module, scope: Scope) -> Iterator[tuple[ast.stmt, str, str, str]]:
    """``torch.set_default_dtype(torch.bfloat16)``: every object built by a call and assigned
    to a name in ``scope`` after it, until the default is set again, has its new parameters
    in that dtype (the optimizer's ``_takes_params_of`` picks the models among them)."""
    sets = [c for c in mod.named_in(scope, "set_default_dtype") if mod.callee(c) == "torch.set_default_dtype"]
    for i, call in enumerate(sets):
        dtype = mod.is_dtype(arg(call, 0, "d"), scope)
        if not dtype:
            continue
        end = sets[i + 1].lineno if i + 1 < len(sets) else math.inf
        stmt = mod.parent.get(call)
        if not isinstance(stmt, ast.Expr):
            continue
        for name, assigned, value in scope.assigns:
            if isinstance(value, ast.Call) and call.lineno < assigned.lineno < end \
                    and not _back_to_fp32(mod, scope, name, value):
                yield stmt, name, dtype, "default"


def _back_to_fp32(mod: Module, scope: Scope, name: str, value: ast.Call) -> bool:
    """Is the model built as ``value`` and held by ``name`` cast back to fp32 or fp64
    (``GPT(cfg).float()``, ``model.to(torch.float32)``)?"""
    chain = [n for n in ast.walk(value) if isinstance(n, ast.Call)]
    later = [c for c in mod.named_in(scope, "float", "double", "to", "type")
             if isinstance(c.func, ast.Attribute) and dotted(c.func.value) == name]
    for c in chain + later:
        if not isinstance(c.func, ast.Attribute):
            continue
        if c.func.attr in ("float", "double") and not c.args:
            return True
        if c.func.attr in ("to", "type") and any(
                mod.qualname(a) in ("torch.float32", "torch.float", "torch.float64", "torch.double")
                for a in [kwarg(c, "dtype"), *c.args[:2]] if a is not None):
            return True
    return False


def _true_precision(mod: Module) -> Iterator[Hit]:
    """A Lightning ``Trainer``/``Fabric`` with ``precision="bf16-true"`` (``"16-true"``) that
    trains (``fit``, or Fabric's ``setup`` of an optimizer): Lightning casts the module, and the
    optimizers built on it update 16-bit parameters."""
    for call in mod.named("Trainer", "Fabric"):
        owner = mod.callee(call)
        value = kwarg(call, "precision")
        named = value_of(mod, value, call) if value is not None else None
        if not owner.startswith(LIGHTNING) or not isinstance(named, ast.Constant):
            continue
        precision = named.value
        if not isinstance(precision, str) or precision not in TRUE_PRECISIONS or not _trains(mod, call):
            continue
        dtype = TRUE_PRECISIONS[precision]
        short = owner.rsplit(".", 1)[-1]
        mixed = "bf16-mixed" if dtype == "torch.bfloat16" else "16-mixed"
        yield Hit(
            call,
            f"`{short}(precision=\"{precision}\")` stores the model's parameters in `{dtype}` and its "
            "optimizers update them there with no fp32 master copy: updates smaller than half a "
            f"{'bf16' if dtype == 'torch.bfloat16' else 'fp16'} step round away and those weights stop moving",
            cause=f"Lightning's \"{precision}\" casts the module itself to 16 bits before the optimizers "
            "are built; the optimizer adds its small updates to them in 16 bits.",
            fix=f"Use `precision=\"{mixed}\"`: Lightning then keeps fp32 weights and runs the forward "
            "under autocast.",
        )


def _trains(mod: Module, call: ast.Call) -> bool:
    """Does the Trainer or Fabric that ``call`` makes train (``fit``; Fabric's ``setup`` of a
    model and an optimizer, ``setup_optimizers``), not only predict or test?"""
    up = mod.parent.get(call)
    if isinstance(up, ast.Attribute):  # L.Trainer(...).fit(...)
        return up.attr == "fit"
    name = dotted(up.targets[0]) if isinstance(up, ast.Assign) and len(up.targets) == 1 else None
    return name is not None and any(
        dotted(c.func.value) == name and (c.func.attr != "setup" or len(c.args) > 1)
        for c in mod.named("fit", "setup", "setup_optimizers") if isinstance(c.func, ast.Attribute))


def _statements(mod: Module, scope: Scope) -> Iterator[ast.stmt]:
    """The statements of ``scope`` that hold a possible cast (``.to``, ``.half()`` ...)."""
    seen: set[int] = set()
    for call in mod.named_in(scope, *CASTS, *LOADERS):
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


def _with_lr(mod: Module, scope: Scope, opt: ast.Call, name: str, dtype: str) -> str:
    """What the optimizer's LR means in this dtype, when the step is LR-sized and the LR is
    known: the largest weight that still moves, against the norm weights' 1.0."""
    if name not in LR_SIZED_STEPS:
        return ""
    lr = number(value_of(mod, arg(opt, 1, "lr"), opt, scope=scope))
    if lr is None or not 0 < lr < 1:
        return ""
    # A step survives in [2**e, 2**(e+1)) when it exceeds half the spacing there, 2**(e - bits - 1).
    limit = 2.0 ** (math.floor(math.log2(lr * 2 ** (FRACTION_BITS[dtype] + 1))) + 1)
    if limit > 0.5:  # a weight at 1.0 can still step down
        return ""
    return (f"; `{name}` moves each element by about lr = {lr:g} a step, which a {dtype.split('.')[1]} "
            f"weight keeps only while |w| < {limit:.2g}: the norm weights (1.0) never change"
            + (", nor do weights of a typical 0.02" if limit <= 2.0 ** -6 else ""))


def _loader_dtype(mod: Module, scope: Scope, call: ast.Call) -> str | None:
    """The low precision a loader is asked to build the model in: a torch dtype, or its name as
    a string (``torch_dtype="bfloat16"``); None for ``"auto"`` (the checkpoint's, unknown here)."""
    for key in LOADER_KWARGS:
        value = kwarg(call, key)
        if value is None:
            continue
        dtype = mod.is_dtype(value, scope)
        if dtype:
            return dtype
        named = value_of(mod, value, value, scope=scope)  # a string from a config, argparse ...
        if isinstance(named, ast.Constant) and isinstance(named.value, str):
            return DTYPE_NAMES.get(named.value)
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
