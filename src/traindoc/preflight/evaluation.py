"""The eval probe: two eval-mode passes of the model on the first training batch must agree.

When they do not, forward hooks on every submodule find the module that makes them differ: the
first call (in the order calls finish, so children before their parent) whose inputs agree
between the two passes while its output does not. Its children all agree given their inputs,
so the random op is that module itself (a ``Dropout`` left in train mode) or its own forward's
code (``F.dropout(h, p)`` without ``training=self.training``).
"""

from __future__ import annotations

import inspect
import re
import warnings
from pathlib import Path
from typing import Any

import torch

from traindoc.catalog import finding
from traindoc.findings import fmt
from traindoc.live.objects import user_site
from traindoc.live.probes.eval_parts import RANDOM_OPS, RandomDraws
from traindoc.preflight.result import Result
from traindoc.preflight.state import clone
from traindoc.preflight.verdict import FAIL, NOT_APPLICABLE, PASS, Verdict

Print = tuple[float, float, int]  # a tensor's (sum, sum of |x|, numel), in float64
Call = tuple[str, Any, bool, Print | None, Print | None]  # (name, module, its training flag, input, output)


def eval_determinism(r: Result, tolerance: float, module_name: str) -> Verdict:
    if r.first_input is None:
        return Verdict("eval", NOT_APPLICABLE, "no model forward ran during training")
    _, args, kwargs = r.first_input
    module = r.first_module  # eager: a compiled module's passes would trace our hooks
    calls: list[list[Call]] = [[], []]
    was = module.training
    try:
        module.eval()
        with torch.no_grad():
            outs = [_traced(module, args, kwargs, calls[i]) for i in range(2)]
    except Exception as exc:  # the forward needs arguments we did not capture
        return Verdict("eval", NOT_APPLICABLE,
                       f"re-running {module_name}'s forward failed: {type(exc).__name__}: {exc}"[:300])
    finally:
        module.train(was)
    a, b = _tensors(outs[0]), _tensors(outs[1])
    if not a or len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b)):
        return Verdict("eval", NOT_APPLICABLE, f"{module_name}'s forward returns no tensor to compare")
    if not all(bool(torch.isfinite(t).all()) for t in a + b):
        return Verdict("eval", NOT_APPLICABLE, f"{module_name}'s output is not finite after {r.steps} training steps")
    diff = max(float((x - y).abs().max()) for x, y in zip(a, b))
    scale = max(float(x.abs().max()) for x in a) or 1.0
    rel = diff / scale
    summary = f"two eval-mode passes of {module_name} on the first batch differ by {fmt(rel)} (relative)"
    if not rel > tolerance:
        return Verdict("eval", PASS, summary)
    sampled = _sampling(module, args, kwargs)
    if sampled:
        return Verdict("eval", NOT_APPLICABLE, (
            f"{summary}: its forward samples in eval mode ({sampled}: a draw scaled by a tensor it computed) "
            "and runs no other random op (a dropout, noise of a fixed scale), as a model that samples by design "
            "does (a VAE's reparameterization, a diffusion model's noise and timesteps); make its eval forward "
            "deterministic (the mean, fixed timesteps) to have it checked"))
    where = _culprit(calls[0], calls[1], tolerance, module)
    summary += f"; first at {where[0]}" if where else ""
    f = finding(
        "nondeterministic-eval", step=0,
        message=(f"in eval mode, two forward passes of {module_name} on the same batch differ by {fmt(diff)} "
                 f"({fmt(rel)} of the output's largest magnitude; tolerance {fmt(tolerance)}): "
                 + (where[1] if where else "a random op ignores model.eval().")),
        fix=(where[2] if where else None),
        evidence={"model": type(module).__name__, "relative_difference": rel, "absolute_difference": diff,
                  "tolerance": tolerance, "module": where[0] if where else ""},
        where=[where[0]] if where else (),
    )
    return Verdict("eval", FAIL, summary, (f,))


def _traced(module: Any, args: Any, kwargs: dict[str, Any], calls: list[Call]) -> Any:
    """One forward with a hook on every submodule recording its input and output prints."""
    names = {id(m): n for n, m in module.named_modules()}
    pending: dict[int, list[Print | None]] = {}

    def pre(m: Any, inputs: Any) -> None:
        pending.setdefault(id(m), []).append(_print(inputs))

    def post(m: Any, inputs: Any, output: Any) -> None:
        stack = pending.get(id(m)) or [None]
        calls.append((names.get(id(m), "?"), m, m.training, stack.pop(), _print(output)))

    # a TorchScript module takes no hooks: its passes are compared, its culprit is not searched
    handles = [h for m in module.modules() if not isinstance(m, torch.jit.ScriptModule)
               for h in (m.register_forward_pre_hook(pre), m.register_forward_hook(post))]
    try:
        with warnings.catch_warnings():  # torch's notes on hooks and compiled modules: ours, not the user's
            warnings.simplefilter("ignore")
            return module(*clone(args), **clone(kwargs))
    finally:
        for h in handles:
            h.remove()


# Integer draws of a model that samples by design: a diffusion model's timesteps, categories
_INDEX_DRAWS = frozenset(("randint", "randint_like", "multinomial"))


class _Draws(RandomDraws):
    """The live eval probe's reading of a forward's random ops (a sample from a distribution the
    model predicts, or other noise), with where each ran; integer draws (random timesteps) are
    left to the float draws they index."""

    def __init__(self) -> None:
        super().__init__()
        self.sites: list[str] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = getattr(func, "__name__", "")
        if name in RANDOM_OPS:
            site = user_site(1)
            self.sites.append(f"torch.{name}" + (f" at {site}" if site else ""))
            if name in _INDEX_DRAWS:
                return func(*args, **(kwargs or {}))
        return super().__torch_function__(func, types, args, kwargs)


def _sampling(module: Any, args: Any, kwargs: dict[str, Any]) -> str:
    """``torch.randn_like at model.py:62`` when one more eval pass, watched op by op, samples by
    design (a draw scaled by a tensor the forward computed, as a VAE's; a ``torch.distributions``
    sample) and runs no other random op (functional dropout, noise of a fixed scale); else ""."""
    draws = _Draws()
    was = module.training
    try:
        module.eval()
        with torch.no_grad(), draws:
            module(*clone(args), **clone(kwargs))
    except Exception:  # the two passes ran: this one is ours, and tells nothing
        return ""
    finally:
        module.train(was)
    if not draws.sampled or draws.other:
        return ""
    return ", ".join(list(dict.fromkeys(draws.sites))[:3])


def _culprit(a: list[Call], b: list[Call], tolerance: float, root: Any) -> tuple[str, str, str] | None:
    """(name, what differs, fix) of the first call whose inputs agree and whose output differs."""
    for (name, m, training, in_a, out_a), (_, _, _, in_b, out_b) in zip(a, b):
        if _close(in_a, in_b, tolerance) and not _close(out_a, out_b, tolerance):
            shown = f"{type(root).__name__}.{name}" if name else type(root).__name__
            kind = type(m).__name__
            if training:
                return (shown, f"{shown} ({kind}) differs between the passes: the module is still in train mode "
                        "after model.eval() (its training flag is True).",
                        f"Find what sets {shown} back to training (a train() override, a "
                        "`.training = True`, a forward that calls .train()) and remove it.")
            line = _random_call(type(m))
            at = f" at {line}" if line else ""
            return (shown, f"{shown} ({kind}) differs between the passes although its inputs agree and it is in "
                    f"eval mode: its forward calls a random op that ignores eval mode{at}.",
                    "Pass training=self.training to the functional call (F.dropout(h, p, training=self.training)) "
                    "or use the nn.Dropout module, which follows model.eval().")
    return None


RANDOM_CALL = re.compile(r"\b(?:F\.|functional\.)?(?:dropout\w*|alpha_dropout|rrelu)\((?![^)]*training\s*=)")


def _random_call(cls: type[torch.nn.Module]) -> str:
    """``file.py:42: `h = F.dropout(h, p=self.p)``` for a dropout call without ``training=`` in
    the forward's source, or ""."""
    try:
        lines, start = inspect.getsourcelines(cls.forward)
        path = inspect.getsourcefile(cls.forward)
    except (OSError, TypeError):
        return ""
    for i, text in enumerate(lines):
        if RANDOM_CALL.search(text) and "nn." not in text:
            return f"{Path(path or '?').name}:{start + i}: `{text.strip()}`"
    return ""


def _print(obj: Any) -> Print | None:
    ts = _tensors(obj)
    if not ts:
        return None
    t = ts[0].detach().double()
    return float(t.sum()), float(t.abs().sum()), t.numel()


def _close(a: Print | None, b: Print | None, tolerance: float) -> bool:
    if a is None or b is None:
        return a is b
    scale = max(abs(a[1]), abs(b[1])) or 1.0
    return a[2] == b[2] and abs(a[0] - b[0]) <= tolerance * scale and abs(a[1] - b[1]) <= tolerance * scale


def _tensors(out: Any) -> list[torch.Tensor]:
    """The floating-point tensors of a module's output (a tensor, tuple, list, dict or HF ModelOutput)."""
    if isinstance(out, torch.Tensor):
        return [out.detach().float()] if out.is_floating_point() else []
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _tensors(o)]
    return []
