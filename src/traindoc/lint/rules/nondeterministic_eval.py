"""nondeterministic-eval: a random op in a module's forward that ``model.eval()`` does not turn off."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import ClassVar, Iterator

from traindoc.lint._ast import Module, Scope, arg, dotted, number, value_of
from traindoc.lint._models import class_defs, module_classes
from traindoc.lint._values import config_read
from traindoc.lint.rules._common import Hit, Invalid

# torch.nn.functional's dropouts -> whether training (their third argument) defaults to True
DROPOUTS = {"dropout": True, "dropout1d": True, "dropout2d": True, "dropout3d": True,
            "alpha_dropout": False, "feature_alpha_dropout": False}
# attention kernels -> the position of dropout_p (None: keyword only)
KERNELS = {"scaled_dot_product_attention": 4, "flash_attn_func": 3, "flash_attn_qkvpacked_func": 1,
           "flash_attn_varlen_func": None}
DRAWS = ("randn", "randn_like", "rand", "rand_like", "bernoulli")  # torch.<name>(...)
IN_PLACE = ("normal_", "uniform_", "bernoulli_")  # <tensor>.<name>(...)
GAUSSIAN = ("randn", "randn_like", "normal_")  # a product with a tensor makes these a sample
# Classes that are no model: a loss or matcher (PointRend's sampled points estimate the loss), a
# data augmentation (random on purpose, applied by its caller in training only), a stand-in.
NOT_MODELS = ("Loss", "Criterion", "Matcher", "Augment", "Dummy", "Mock", "Fake")
AUGMENTATION_MODULES = ("augment", "transforms")  # files or folders of data augmentations
Parents = dict[ast.AST, ast.AST]


class NondeterministicEval:
    """Code in the forward pass of an ``nn.Module`` subclass (``forward`` and the methods of its
    class it calls through ``self``) draws random numbers that ``model.eval()`` does not turn off:
    ``F.dropout`` with ``training`` at its default or a positional ``True``; an attention
    kernel's ``dropout_p`` that is neither 0 nor an expression of ``self.training``; noise drawn
    by hand (``torch.randn_like``, ``torch.rand``, ``torch.bernoulli``, ``x.normal_()``, ...) with
    no ``if`` on the mode or on a parameter the caller sets. Quiet for a ``training=`` keyword
    written out (Tacotron 2's prenet keeps ``training=True`` on purpose) and for samples on
    purpose: a Gaussian draw times a tensor the forward computed (``mu + eps * std``), Bernoulli
    draws of computed probabilities, a forward that returns the draw or computes its own loss,
    a seeded draw, one read only under a mode check or made a parameter. The catalog page says
    why each is what it is.
    """

    id: ClassVar[str] = "nondeterministic-eval"
    invalid: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            """
            import torch
            import torch.nn as nn
            import torch.nn.functional as F

            class ResidualBlock(nn.Module):
                def __init__(self, dim, dropout):
                    super().__init__()
                    self.fc1, self.fc2 = nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)
                    self.dropout = dropout

                def forward(self, x):
                    h = F.gelu(self.fc1(x))
                    h = F.dropout(h, p=self.dropout)
                    return x + self.fc2(h)

            model = nn.Sequential(ResidualBlock(128, 0.2), nn.Linear(128, 10)).eval()
            """,
            13,
        ),
        Invalid(
            """
            import torch
            from torch import nn
            import torch.nn.functional as F

            class SelfAttention(nn.Module):
                def __init__(self, dim, heads, attn_dropout=0.1):
                    super().__init__()
                    self.heads, self.attn_dropout = heads, attn_dropout
                    self.qkv = nn.Linear(dim, 3 * dim)

                def forward(self, x):
                    b, t, d = x.shape
                    q, k, v = self.qkv(x).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
                    y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.attn_dropout)
                    return y.transpose(1, 2).reshape(b, t, d)
            """,
            14,
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn

            class GaussianNoise(nn.Module):
                def __init__(self, sigma):
                    super().__init__()
                    self.sigma = sigma

                def forward(self, x):
                    return x + self.sigma * torch.randn_like(x)

            model = nn.Sequential(GaussianNoise(0.3), nn.Linear(12, 2))
            """,
            10,
        ),
    )
    valid: ClassVar[tuple[str, ...]] = (
        """
        import torch
        from torch import nn
        import torch.nn.functional as F

        class CausalSelfAttention(nn.Module):
            def __init__(self, dim, heads, p=0.1):
                super().__init__()
                self.heads, self.p = heads, p
                self.qkv = nn.Linear(dim, 3 * dim)

            def forward(self, x):
                b, t, d = x.shape
                q, k, v = self.qkv(x).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
                y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.p if self.training else 0.0, is_causal=True)
                return F.dropout(y.transpose(1, 2).reshape(b, t, d), self.p, training=self.training)

        attn = CausalSelfAttention(256, 8).eval()
        """,
        """
        import torch
        import torch.nn as nn

        class GaussianNoise(nn.Module):
            def __init__(self, sigma):
                super().__init__()
                self.sigma = sigma

            def forward(self, x):
                if self.training:
                    x = x + self.sigma * torch.randn_like(x)
                return x

        class DropPath(nn.Module):
            def __init__(self, p):
                super().__init__()
                self.p = p

            def forward(self, x):
                if not self.training or self.p == 0:
                    return x
                keep = x.new_empty(x.shape[0], 1).bernoulli_(1 - self.p)
                return x * keep / (1 - self.p)

        model = nn.Sequential(GaussianNoise(0.3), nn.Linear(12, 12), DropPath(0.2), nn.Dropout(0.5), nn.Linear(12, 2))
        """,
        """
        import torch
        from torch import nn

        class VAE(nn.Module):
            def __init__(self):
                super().__init__()
                self.enc, self.dec = nn.Linear(784, 2 * 20), nn.Linear(20, 784)

            def reparameterize(self, mu, logvar):
                std = torch.exp(0.5 * logvar)
                eps = torch.randn_like(std)
                return mu + eps * std

            def forward(self, x):
                mu, logvar = self.enc(x).chunk(2, dim=1)
                return torch.sigmoid(self.dec(self.reparameterize(mu, logvar))), mu, logvar

        class CVAE(VAE):
            def forward(self, x):
                mu, logvar = self.enc(x).chunk(2, dim=1)
                std = logvar.mul(0.5).exp_()
                eps = std.new(std.size()).normal_()
                return self.dec(eps.mul(std).add_(mu))
        """,
        """
        import torch
        import torch.nn as nn

        generator = nn.Sequential(nn.Linear(100, 256), nn.ReLU(), nn.Dropout(0.3), nn.Linear(256, 784))
        opt = torch.optim.Adam(generator.parameters(), lr=2e-4)
        for real in loader:
            z = torch.randn(real.size(0), 100)
            loss = ((generator(z) - (real + 0.05 * torch.randn_like(real))) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        """,
    )

    def check(self, mod: Module) -> Iterator[Hit]:
        if any(part.lower().startswith(AUGMENTATION_MODULES) for part in Path(mod.path).with_suffix("").parts[-2:]):
            return  # the file or its folder
        classes = module_classes(class_defs(mod))
        maps: dict[int, Parents] = {}  # the index keeps no parent for names: one map per function

        def parents(s: Scope) -> Parents:
            if id(s) not in maps:
                maps[id(s)] = {c: p for p in ast.walk(s.node) for c in ast.iter_child_nodes(p)}
            return maps[id(s)]

        seen: set[int] = set()
        for forward in mod.scopes:
            cls = forward.cls or ""
            if forward.name != "forward" or cls not in classes or any(w in cls for w in NOT_MODELS):
                continue
            reached = _reached(mod, forward)
            # a forward that computes its own loss is a training objective (a diffusion model's
            # timesteps and noise, MAE's masks): its draws estimate the loss
            objective = any("loss" in mod.callee(c).rpartition(".")[2].lower() for s, _ in reached for c in s.calls)
            for scope, sites in reached:
                if any(_gated(mod.scope(site), site, parents(mod.scope(site))) for site in sites):
                    continue
                where = f"`{cls}.{scope.name}`" + ("" if scope is forward else f" (run by `{cls}.forward`)")
                for call in scope.calls:
                    module, _, name = mod.callee(call).rpartition(".")
                    name = name or getattr(call.func, "attr", "")  # eps = std.new(size).normal_()
                    dropout = name in DROPOUTS and module in ("torch.nn.functional", "torch")
                    kernel = name in KERNELS and (module == "torch.nn.functional" or module.startswith("flash_attn"))
                    noise = not objective and ((module == "torch" and name in DRAWS) or (
                        name in IN_PLACE and isinstance(call.func, ast.Attribute) and not module.startswith("torch.")))
                    if not (dropout or kernel or noise) or id(call) in seen or _gated(scope, call, parents(scope)):
                        continue
                    hit = (_dropout(mod, call, name, where) if dropout else _kernel(mod, scope, call, name, where)
                           if kernel else _noise(mod, scope, call, name, where, parents(scope)))
                    if hit is not None:
                        seen.add(id(call))
                        yield hit


def _dropout(mod: Module, call: ast.Call, name: str, where: str) -> Hit | None:
    if any(k.arg in ("training", "train") for k in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args):
        return None  # the mode written out is a choice (Tacotron 2's prenet: training=True at inference)
    training = call.args[2] if len(call.args) > 2 else None  # torch.dropout(x, p, train) has no default
    if (training is None and (not DROPOUTS[name] or mod.callee(call) == "torch.dropout")) or (
            training is not None and not (isinstance(training, ast.Constant) and training.value is True)):
        return None
    p = arg(call, 1, "p")
    rate = 0.5 if p is None else number(value_of(mod, p, call))
    if rate == 0:
        return None
    shown = mod.text(call.func)
    why = (f"{shown}'s training argument defaults to True" if training is None
           else "its third positional argument, True, is training (not inplace, as in nn.Dropout(p, True))")
    parts = [mod.text(a) for a in call.args[:2]] + [mod.text(k) for k in call.keywords] + ["training=self.training"]
    return Hit(
        call,
        f"`{mod.text(call)}` in {where} keeps dropping {_share(mod, rate, p)} of units after model.eval(): {why}",
        cause="Functional dropout without the mode: unlike nn.Dropout, F.dropout does not read the module's "
        "training flag; it drops units whenever its training argument is True, and its default is True.",
        fix=f"Pass the mode: `{shown}({', '.join(parts)})`, or use an `nn.Dropout` module, which follows model.eval().",
    )


def _kernel(mod: Module, scope: Scope, call: ast.Call, name: str, where: str) -> Hit | None:
    at = KERNELS[name]
    rate = arg(call, at, "dropout_p") if at is not None else next(
        (k.value for k in call.keywords if k.arg == "dropout_p"), None)
    value = value_of(mod, rate, call) if rate is not None else None
    if rate is None or value is None or number(value) == 0 or _mode(scope, rate) or _mode(scope, value) \
            or _parameter(scope, value):  # a parameter: the caller's rate
        return None
    return Hit(
        call,
        f"`{mod.text(call)}` in {where} keeps dropping {_share(mod, number(value), rate)} of the attention "
        f"weights after model.eval(): its dropout_p `{mod.text(rate)}` does not check self.training",
        cause="A dropout rate passed straight to an attention kernel: the kernel applies the dropout_p it is "
        "given in any mode, so a rate that does not check self.training ignores model.eval() "
        "(Transformers PR 33844).",
        fix=f"Gate the rate: `dropout_p={mod.text(rate)} if self.training else 0.0`.",
    )


def _noise(mod: Module, scope: Scope, call: ast.Call, name: str, where: str, up: Parents) -> Hit | None:
    if any(k.arg == "generator" for k in call.keywords) or any(
            mod.callee(c) == "torch.manual_seed" and c.lineno < call.lineno for c in scope.calls):
        return None  # seeded: the caller's generator, or torch's RNG seeded first
    factors, reads = _flow(mod, scope, call, up)
    fixed = [f for f in factors if _fixed(mod, scope.cls, f, call, scope)]
    if name in GAUSSIAN and len(fixed) < len(factors):
        return None  # mu + eps * std: a sample from the distribution the forward predicts
    probs = value_of(mod, call.args[0], call) if name == "bernoulli" and call.args else None
    if probs is not None and not _fixed(mod, scope.cls, probs, call, scope) and not (
            mod.callee(probs).rpartition(".")[2].startswith(("full", "ones", "new_"))):
        return None  # torch.bernoulli(probs) of computed probabilities: a sample
    for node, raw in reads:
        parent = up.get(node)
        if (raw and isinstance(parent, ast.Return) and scope.name == "forward") or (
                isinstance(parent, ast.Call) and mod.callee(parent).endswith("Parameter")):
            return None  # a noise source (what the module gives is the draw), or a parameter's init
        if raw and isinstance(parent, ast.Compare) and not all(
                _fixed(mod, scope.cls, e, call, scope) for e in [parent.left, *parent.comparators] if e is not node):
            return None  # probs > torch.rand_like(probs): a Bernoulli sample of computed probabilities
    names = [n for n, _ in reads if isinstance(n, ast.Name)]
    if names and all(_gated(scope, n, up) for n in names):
        return None  # drawn always, read only in one mode (layer drop)
    scale = fixed[0] if fixed and "bernoulli" not in name else None
    value = number(value_of(mod, scale, call, scope=scope)) if scale is not None else None
    of = f" of fixed scale `{mod.text(scale)}`" if scale is not None else ""
    of += f" ({value:g})" if value is not None and scale is not None and mod.text(scale) != f"{value:g}" else ""
    masked = "bernoulli" in name or isinstance(up.get(call), ast.Compare)  # torch.rand(n) < ratio
    what = "a random mask" if masked else "Gaussian noise" if name in GAUSSIAN else "uniform noise"
    return Hit(
        call,
        f"`{mod.text(call)}` in {where} draws {what}{of} that model.eval() does not turn off: no "
        "`if self.training:` gates it, so two evaluations of the same input differ",
        cause="Noise injection or random masking in forward not gated by self.training: model.eval() only "
        "switches what reads the mode (nn.Dropout, BatchNorm, code under `if self.training:`).",
        fix="Gate the draw: `if self.training: x = x + noise`, or return early with `if not self.training: "
        "return x`. A draw meant to run in evaluation (a sample on purpose) can be silenced with "
        "`# traindoc: ignore[nondeterministic-eval]`.",
    )


def _share(mod: Module, rate: float | None, node: ast.expr | None) -> str:
    return f"{rate:.0%}" if rate is not None else f"a share `{mod.text(node)}`"


def _reached(mod: Module, forward: Scope) -> list[tuple[Scope, list[ast.Call]]]:
    """``forward`` and the methods of its class it calls through ``self`` (three calls deep),
    each with the calls that lead to it."""
    out: list[tuple[Scope, list[ast.Call]]] = [(forward, [])]
    for scope, sites in out:  # grows as it goes
        for call in scope.calls if len(sites) < 3 else ():
            on_self = isinstance(call.func, ast.Attribute) and dotted(call.func.value) == "self"
            target = mod.callee_scope(call) if on_self else None
            if target is not None and target.cls == forward.cls and all(target is not s for s, _ in out):
                out.append((target, [*sites, call]))
    return out


def _mode(scope: Scope, expr: ast.AST | None, depth: int = 2) -> bool:
    """``expr`` reads the module's mode: ``self.training``, a name ``training``, a local name
    assigned from one (``use_noise = self.training and self.sigma > 0``), a ``"train"`` string."""
    for n in ast.walk(expr) if expr is not None else ():
        word = n.attr if isinstance(n, ast.Attribute) else n.id if isinstance(n, ast.Name) else ""
        if "train" in word.lower() or (isinstance(n, ast.Constant) and n.value in ("train", "training")):
            return True
        if isinstance(n, ast.Name) and depth and any(
                _mode(scope, v, depth - 1) for _, v in scope.values_of(n.id) if isinstance(v, ast.expr)):
            return True
    return False


def _gated(scope: Scope, node: ast.AST, up: Parents) -> bool:
    """``node`` runs only in one mode, or as the caller chooses: under an ``if``, conditional
    expression or ``and``/``or`` on the mode or on a parameter of the function (``if sample:``,
    ``if noise is None:``), or after an ``if not self.training: return ...``."""
    a = up.get(node)
    while a is not None and a is not scope.node:
        tests = [a.test] if isinstance(a, (ast.If, ast.IfExp, ast.While)) else []
        tests += a.values if isinstance(a, ast.BoolOp) else []
        if any(_mode(scope, t) or _switch(scope, t) for t in tests):
            return True
        a = up.get(a)
    line = getattr(node, "lineno", 0)
    return any((s.end_lineno or s.lineno) < line and _mode(scope, s.test)
               and isinstance(s.body[-1], (ast.Return, ast.Raise)) for s in scope.ifs)


def _switch(scope: Scope, test: ast.expr) -> bool:
    """``test`` is ``p``, ``not p``, ``p is None`` or ``p is not None`` for a parameter ``p``."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test = test.operand
    if isinstance(test, ast.Compare) and isinstance(test.ops[0], (ast.Is, ast.IsNot)) \
            and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None:
        test = test.left
    return _parameter(scope, test)


def _flow(mod: Module, scope: Scope, draw: ast.Call, up: Parents) -> tuple[list[ast.expr], list[tuple[ast.expr, bool]]]:
    """The factors the value of ``draw`` is multiplied by (``*``, ``.mul()``, ``torch.mul``) and the
    expressions that hold it (with whether it is still the draw itself), through arithmetic,
    method calls and names (``eps = draw``; ``eps.normal_()``) read later, three names deep."""
    factors: list[ast.expr] = []
    reads: list[tuple[ast.expr, bool]] = []
    todo: list[tuple[ast.expr, int, bool]] = [(draw, 3, True)]
    while todo:
        node, depth, raw = todo.pop()
        while True:
            reads.append((node, raw))
            parent, called = up.get(node), _method_call(up, node)
            product = isinstance(parent, ast.Attribute) and parent.attr in ("mul", "mul_")
            if isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Mult):
                factors.append(parent.right if parent.left is node else parent.left)
            elif called is not None and product:
                factors += called.args[:1]
            if isinstance(parent, ast.Call) and mod.callee(parent) == "torch.mul" and len(parent.args) == 2:
                factors += [a for a in parent.args if a is not node][:1]
                node, raw = parent, False
            elif called is not None:
                node, raw = called, raw and not product
            elif isinstance(parent, ast.BinOp):
                node, raw = parent, False
            else:
                break
        target = parent.targets[0] if isinstance(parent, ast.Assign) and len(parent.targets) == 1 else None
        if isinstance(parent, ast.Expr) and isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            target = node.func.value  # eps.normal_(): eps holds the draw
        if isinstance(target, ast.Name) and depth and isinstance(parent, ast.stmt):
            after = parent.end_lineno or parent.lineno
            todo += [(n, depth - 1, raw) for n in ast.walk(scope.node) if isinstance(n, ast.Name)
                     and n.id == target.id and isinstance(n.ctx, ast.Load) and n.lineno > after]
    return factors, reads


def _fixed(mod: Module, cls: str | None, node: ast.expr, at: ast.AST, scope: Scope | None = None,
           depth: int = 3) -> bool:
    """``node`` (read at ``at``, in ``scope`` when given) is a number of the run, not a tensor: a
    literal, a constant, a config value, an attribute of class ``cls`` set from one or from a
    constructor's argument, arithmetic of those."""
    if number(node) is not None or (isinstance(node, ast.Constant) and not isinstance(node.value, str)):
        return True
    if isinstance(node, (ast.BinOp, ast.UnaryOp)) or mod.callee(node).startswith("math."):  # math.sqrt(self.beta)
        parts = [n for n in ast.iter_child_nodes(node) if isinstance(n, ast.expr) and n is not getattr(node, "func", 0)]
        return all(_fixed(mod, cls, n, at, scope, depth) for n in parts)
    if not depth or not isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)):
        return False
    value = value_of(mod, node, at, scope=scope)
    if config_read(mod, node, at) or value is None or value is node:
        return config_read(mod, node, at)
    if isinstance(value, ast.Name):  # self.sigma = sigma: a constructor's argument no call here shows
        return any(s.name == "__init__" and s.cls == cls and _parameter(s, value) for s in mod.scopes)
    return _fixed(mod, cls, value, value, None, depth - 1)


def _method_call(up: Parents, node: ast.AST) -> ast.Call | None:
    """The call ``node.m(...)`` when ``node`` is the receiver of a method call."""
    attr = up.get(node)
    call = up.get(attr) if isinstance(attr, ast.Attribute) else None
    return call if isinstance(call, ast.Call) and call.func is attr else None


def _parameter(scope: Scope, node: ast.AST | None) -> bool:
    fn = scope.node
    return isinstance(node, ast.Name) and isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.id in {
        a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]}
