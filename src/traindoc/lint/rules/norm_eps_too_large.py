"""norm-eps-too-large: a torch.nn normalization layer built with an eps of 0.01 or more."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterator

from traindoc.lint._ast import Module, arg, number, value_of
from traindoc.lint.rules._common import Hit, Invalid

# At or above this, an eps is almost never meant: 1000x PyTorch's default 1e-5 and 10x Keras's
# 1e-3, the largest default of the frameworks code is ported from.
LARGE_EPS = 0.01

# class -> (position of its size argument and that argument's name, position of eps, the
# parameters after eps); the Lazy classes infer their size and take eps first.
_STATS = ("momentum", "affine", "track_running_stats")
_BATCH = ((0, "num_features"), 1, _STATS)
NORMS: dict[str, tuple[tuple[int, str] | None, int, tuple[str, ...]]] = {
    **{f"BatchNorm{d}d": _BATCH for d in (1, 2, 3)},
    **{f"InstanceNorm{d}d": _BATCH for d in (1, 2, 3)},
    "SyncBatchNorm": _BATCH,
    "LayerNorm": ((0, "normalized_shape"), 1, ("elementwise_affine", "bias")),
    "RMSNorm": ((0, "normalized_shape"), 1, ("elementwise_affine",)),
    "GroupNorm": ((1, "num_channels"), 2, ("affine",)),
    **{f"Lazy{kind}{d}d": (None, 0, _STATS) for kind in ("BatchNorm", "InstanceNorm") for d in (1, 2, 3)},
}
_ORDINAL = ("first", "second", "third")


class NormEpsTooLarge:
    """A ``torch.nn`` normalization layer (BatchNorm, SyncBatchNorm, InstanceNorm, LayerNorm,
    GroupNorm, RMSNorm and their Lazy forms) whose ``eps``, by position or keyword, is a number
    of 0.01 or more (written there or through a name assigned one in the file), or is the same
    expression as the layer's size (``nn.BatchNorm2d(n5x5, n5x5)``: a channel count, at least
    1). The usual cause is Keras's argument order: ``nn.BatchNorm2d(C, 0.8)`` meant momentum
    0.8 and set eps=0.8, so the layer divides by ``sqrt(var + 0.8)`` and damps small-variance
    inputs instead of normalizing them (PyTorch-GAN, its issue #116). Only the classes of
    ``torch.nn`` count, not a class of the user's own named ``LayerNorm``.
    """

    id: ClassVar[str] = "norm-eps-too-large"
    invalid: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            """
            import torch.nn as nn

            class Generator(nn.Module):
                def __init__(self, latent_dim, img_size):
                    super().__init__()

                    def block(in_feat, out_feat, normalize=True):
                        layers = [nn.Linear(in_feat, out_feat)]
                        if normalize:
                            layers.append(nn.BatchNorm1d(out_feat, 0.8))
                        layers.append(nn.LeakyReLU(0.2, inplace=True))
                        return layers

                    self.model = nn.Sequential(
                        *block(latent_dim, 128, normalize=False),
                        *block(128, 256),
                        nn.Linear(256, img_size * img_size),
                        nn.Tanh(),
                    )

            class Discriminator(nn.Module):
                def __init__(self, channels):
                    super().__init__()

                    def discriminator_block(in_filters, out_filters, bn=True):
                        block = [nn.Conv2d(in_filters, out_filters, 3, 2, 1), nn.LeakyReLU(0.2, inplace=True)]
                        if bn:
                            block.append(nn.BatchNorm2d(out_filters, 0.8))
                        return block

                    self.model = nn.Sequential(
                        *discriminator_block(channels, 16, bn=False),
                        *discriminator_block(16, 32),
                    )
            """,
            10, 28,
        ),
        Invalid(
            """
            import torch
            from torch import nn

            class Inception(nn.Module):
                def __init__(self, input_channels, n3x3, n5x5_reduce, n5x5):
                    super().__init__()
                    self.b3 = nn.Sequential(
                        nn.Conv2d(input_channels, n3x3, kernel_size=3, padding=1),
                        nn.BatchNorm2d(n3x3),
                        nn.ReLU(inplace=True),
                    )
                    self.b5 = nn.Sequential(
                        nn.Conv2d(input_channels, n5x5_reduce, kernel_size=1),
                        nn.BatchNorm2d(n5x5_reduce),
                        nn.ReLU(inplace=True),
                        nn.Conv2d(n5x5_reduce, n5x5, kernel_size=3, padding=1),
                        nn.BatchNorm2d(n5x5, n5x5),
                        nn.ReLU(inplace=True),
                    )

                def forward(self, x):
                    return torch.cat([self.b3(x), self.b5(x)], dim=1)

            a3 = Inception(192, 128, 16, 32)
            out = a3(torch.randn(8, 192, 28, 28))
            """,
            17,
        ),
        Invalid(
            """
            import torch
            from torch.nn import GroupNorm

            BN_EPS = 0.8

            def conv_block(c_in, c_out):
                return torch.nn.Sequential(
                    torch.nn.Conv2d(c_in, c_out, 3, padding=1),
                    torch.nn.BatchNorm2d(c_out, BN_EPS),
                    torch.nn.ReLU(),
                )

            head = torch.nn.Sequential(torch.nn.Conv2d(64, 64, 1), GroupNorm(8, 64, 0.5))
            """,
            9, 13,
        ),
    )
    valid: ClassVar[tuple[str, ...]] = (
        """
        import torch.nn as nn

        def block(C):
            return nn.Sequential(nn.Conv2d(C, C, 3, padding=1), nn.BatchNorm2d(C, momentum=0.8))
        """,
        """
        import torch.nn as nn

        # a Keras port: BatchNormalization(momentum=0.99, epsilon=1e-3)
        def block(C):
            return nn.Sequential(nn.Conv2d(C, C, 3), nn.BatchNorm2d(C, eps=1e-3, momentum=0.01))
        """,
        """
        import torch
        from torch import nn

        class Block(nn.Module):
            def __init__(self, d, C):
                super().__init__()
                self.ln = nn.LayerNorm(d, eps=1e-12)
                self.gn = nn.GroupNorm(32, C)

        block = Block(768, 256)
        y = block.ln(torch.randn(4, 768))
        """,
        """
        import torch.nn as nn

        def block(args, C):
            return nn.Sequential(nn.Conv2d(C, C, 3), nn.BatchNorm2d(C, args.bn_eps))
        """,
        """
        import torch
        import torch.nn as nn
        import torch.nn.functional as F

        class LayerNorm(nn.Module):  # our own: its second argument switches the shift on
            def __init__(self, width, shift):
                super().__init__()
                self.gain = nn.Parameter(torch.ones(width))
                self.shift = nn.Parameter(torch.zeros(width)) if shift else None

            def forward(self, x):
                return F.layer_norm(x, (x.shape[-1],), self.gain, self.shift)

        class Block(nn.Module):
            def __init__(self, cfg):
                super().__init__()
                self.norm_in = LayerNorm(cfg.width, shift=cfg.shift)
                self.norm_out = LayerNorm(cfg.width, True)
        """,
    )

    def check(self, mod: Module) -> Iterator[Hit]:
        for call in mod.named(*NORMS):
            q = mod.callee(call)
            cls = q.rpartition(".")[2]
            if not q.startswith("torch.nn.") or cls not in NORMS:
                continue
            size_at, eps_at, _ = NORMS[cls]
            eps = arg(call, eps_at, "eps")
            if eps is None:
                continue
            size = arg(call, *size_at) if size_at else None
            if size is not None and ast.dump(size) == ast.dump(eps):
                shown = number(value_of(mod, size, call))
                if shown is None or shown >= 1:  # a count, not an eps spelled twice
                    yield self._size_twice(mod, call, cls, eps, eps_at)
                continue
            value = number(value_of(mod, eps, call))
            if value is not None and value >= LARGE_EPS:
                yield self._large(mod, call, cls, eps, eps_at, value)

    def _large(self, mod: Module, call: ast.Call, cls: str, eps: ast.expr, eps_at: int, value: float) -> Hit:
        shown = f"{value:g}"
        via = f" (`{eps.id}`)" if isinstance(eps, ast.Name) else ""
        damped = (f"the layer divides by sqrt(var + {shown}), so an input whose variance is below {shown} "
                  "is damped instead of normalized")
        positional = _positional(call, eps)
        if positional and _has_momentum(cls):
            momentum = arg(call, eps_at + 1, "momentum")
            defaults = "eps 1e-5" if momentum is not None else "eps 1e-5, momentum 0.1"
            fix = f"Drop the number: `{_without(mod, call, cls, eps)}` ({defaults})"
            if value < 1 and momentum is None:
                keyword = _without(mod, call, cls, eps, f"momentum={1 - value:g}")
                fix += (f"; or, if {shown} was Keras's momentum, write it as a keyword: `{keyword}` "
                        "(Keras's momentum m is PyTorch's 1 - m)")
            return Hit(
                eps,
                f"`{mod.text(call)}` sets eps={shown}{via}: the {_ORDINAL[eps_at]} positional argument of "
                f"{cls} is eps, not momentum; {damped}",
                cause=(f"Keras's BatchNormalization takes momentum first; PyTorch's {cls} takes eps "
                       f"{_ORDINAL[eps_at]} and momentum after it, so a positional momentum lands in eps."
                       if value < 1 else
                       f"A number meant for another argument landed in eps, {cls}'s "
                       f"{_ORDINAL[eps_at]} positional argument."),
                fix=fix + ".",
            )
        where = f"the {_ORDINAL[eps_at]} positional argument of {cls} is eps; " if positional else ""
        return Hit(
            eps,
            f"`{mod.text(call)}` sets eps={shown}{via}, {value / 1e-5:.0f}x PyTorch's default 1e-5: "
            f"{where}{damped}",
            cause=f"An eps of {LARGE_EPS:g} or more is almost never meant: PyTorch's default is 1e-5 "
            "and a Keras or TF port's epsilon is 1e-3.",
            fix=f"Drop it for the default: `{_without(mod, call, cls, eps)}`; or use `eps=1e-3` for a Keras "
            f"or TF port. If {shown} is deliberate, silence the line with "
            "`# traindoc: ignore[norm-eps-too-large]`.",
        )

    def _size_twice(self, mod: Module, call: ast.Call, cls: str, eps: ast.expr, eps_at: int) -> Hit:
        size = mod.text(eps)
        place = (f"the {_ORDINAL[eps_at]} positional argument of {cls}" if _positional(call, eps)
                 else "its eps keyword")
        return Hit(
            eps,
            f"`{mod.text(call)}` passes the size `{size}` again as eps ({place}): eps is a channel "
            f"count, at least 1, and the layer divides by sqrt(var + {size}), so an input whose "
            "variance is below that is damped instead of normalized",
            cause="A copy-paste repeated the layer's size into the eps position.",
            fix=f"Drop the repeated size: `{_without(mod, call, cls, eps)}` (eps 1e-5).",
        )


def _has_momentum(cls: str) -> bool:
    return "BatchNorm" in cls or "InstanceNorm" in cls


def _positional(call: ast.Call, node: ast.expr) -> bool:
    return any(a is node for a in call.args)


def _without(mod: Module, call: ast.Call, cls: str, eps: ast.expr, extra: str | None = None) -> str:
    """The user's call with ``eps`` left out (the positional arguments after it then written as
    keywords) and ``extra`` added as the last argument."""
    cut = next((i for i, a in enumerate(call.args) if a is eps), len(call.args))
    later = NORMS[cls][2]
    parts = [mod.text(a) for a in call.args[:cut]]
    parts += [f"{name}={mod.text(a)}" for name, a in zip(later, call.args[cut + 1:])]
    parts += [f"{k.arg}={mod.text(k.value)}" if k.arg else f"**{mod.text(k.value)}"
              for k in call.keywords if k.value is not eps]
    if extra:
        parts.append(extra)
    return f"{mod.text(call.func)}({', '.join(parts)})"
