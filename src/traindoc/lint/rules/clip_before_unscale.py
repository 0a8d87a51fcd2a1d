"""clip-before-unscale: gradients are clipped while still multiplied by the GradScaler's scale."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterator

from traindoc.lint._ast import Module, dotted, kwarg, method
from traindoc.lint.rules._common import Hit, Invalid

CLIP = ("clip_grad_norm_", "clip_grad_value_", "clip_grad_norm")


class ClipBeforeUnscale:
    """``torch.nn.utils.clip_grad_norm_`` (or ``clip_grad_value_``) runs after
    ``scaler.scale(loss).backward()`` and before ``scaler.step(optimizer)`` without
    ``scaler.unscale_(optimizer)`` in between: the threshold is compared with gradients that
    are still multiplied by the loss scale (65536 at the start), so it clips on every step by
    a huge factor. The same with Accelerate in fp16 (``Accelerator(mixed_precision="fp16")``,
    whose ``accelerator.backward`` scales the loss): a raw ``clip_grad_norm_`` after it and
    before ``optimizer.step()`` without ``accelerator.unscale_gradients()``.
    ``accelerator.clip_grad_norm_`` unscales by itself and stays quiet, as does bf16.
    """

    id: ClassVar[str] = "clip-before-unscale"
    invalid: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            """
            import torch

            scaler = torch.amp.GradScaler("cuda")
            for x, y in loader:
                optimizer.zero_grad()
                with torch.autocast("cuda", dtype=torch.float16):
                    loss = criterion(model(x), y)
                scaler.scale(loss).backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
                scaler.step(optimizer)
                scaler.update()
            """,
            9,
        ),
        Invalid(
            """
            from torch import nn
            from torch.cuda.amp import GradScaler

            def train_step(model, batch, optimizer, scaler: GradScaler):
                loss = model(batch)
                scaler.scale(loss).backward()
                nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.unscale_(optimizer)
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
            """,
            7,
        ),
        Invalid(
            """
            import torch
            from accelerate import Accelerator

            accelerator = Accelerator(mixed_precision="fp16")
            model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
            for batch in loader:
                optimizer.zero_grad()
                loss = model(**batch).loss
                accelerator.backward(loss)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
            """,
            10,
        ),
    )
    valid: ClassVar[tuple[str, ...]] = (
        """
        import torch

        scaler = torch.amp.GradScaler("cuda")
        for x, y in loader:
            optimizer.zero_grad()
            with torch.autocast("cuda", dtype=torch.float16):
                loss = criterion(model(x), y)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
            scaler.step(optimizer)
            scaler.update()
        """,
        """
        for batch in loader:
            with accelerator.accumulate(model):
                loss = model(**batch).loss
                accelerator.backward(loss)
                accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                optimizer.zero_grad()
        """,
        """
        import torch

        for x, y in loader:
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
        """,
        """
        import torch
        from accelerate import Accelerator

        accelerator = Accelerator(mixed_precision="fp16")
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        for batch in loader:
            optimizer.zero_grad()
            loss = model(**batch).loss
            accelerator.backward(loss)
            accelerator.unscale_gradients()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
        """,
        """
        import torch
        from accelerate import Accelerator

        accelerator = Accelerator(mixed_precision="bf16")
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        for batch in loader:
            optimizer.zero_grad()
            accelerator.backward(model(**batch).loss)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
        """,
    )

    def check(self, mod: Module) -> Iterator[Hit]:
        yield from self._accelerate_fp16(mod)
        for scope in mod.scopes:
            scaled = [b for b in scope.backwards if b.via == "scaler" and b.owner]
            if not scaled:
                continue
            for call in mod.named_in(scope, *CLIP):
                if not self._is_clip(mod, call):
                    continue
                before = [b for b in scaled if b.call.lineno < call.lineno]
                if not before:
                    continue
                b = before[-1]
                scaler = b.owner or "scaler"
                if _disabled(mod, scaler):
                    continue
                unscaled = any(
                    dotted(method(c, "unscale_")) == scaler and b.call.lineno < c.lineno < call.lineno
                    for c in mod.named_in(scope, "unscale_")
                )
                stepped_later = any(
                    dotted(method(c, "step")) == scaler and c.lineno > call.lineno
                    for c in mod.named_in(scope, "step")
                )
                if unscaled or not stepped_later:
                    continue
                limit = kwarg(call, "max_norm") or kwarg(call, "clip_value")
                if limit is None and len(call.args) > 1:
                    limit = call.args[1]
                shown = f" `{mod.text(limit)}`" if limit is not None else ""
                yield Hit(
                    call,
                    f"`{mod.text(call)}` (line {call.lineno}) clips gradients that are still "
                    f"multiplied by `{scaler}`'s scale (`{b.text()}`, line {b.call.lineno}): "
                    f"with a scale of 65536 the threshold{shown} clips every step by a huge factor",
                    cause=f"`{scaler}.unscale_(optimizer)` is not called between backward and "
                    "clipping, so the clip threshold is compared with scaled gradients.",
                    fix=f"Call `{scaler}.unscale_(optimizer)` right before the clip; "
                    f"`{scaler}.step(optimizer)` then knows they are unscaled.",
                )

    def _accelerate_fp16(self, mod: Module) -> Iterator[Hit]:
        """A raw clip after ``accelerator.backward`` of an fp16 Accelerator, before the step."""
        for scope in mod.scopes:
            scaled = [b for b in scope.backwards if b.via == "wrapper" and b.owner and _fp16_accelerator(mod, b.owner)]
            if not scaled:
                continue
            for call in mod.named_in(scope, *CLIP):
                before = [b for b in scaled if b.call.lineno < call.lineno]
                if not self._is_clip(mod, call) or not before:
                    continue
                b = before[-1]
                unscaled = any(
                    b.call.lineno < c.lineno < call.lineno for c in mod.named_in(scope, "unscale_gradients")
                )
                stepped_later = any(o for c, o in mod.optimizer_steps(scope) if c.lineno > call.lineno)
                if unscaled or not stepped_later:
                    continue
                yield Hit(
                    call,
                    f"`{mod.text(call)}` (line {call.lineno}) clips gradients that `{b.text()}` "
                    f"(line {b.call.lineno}) left multiplied by the fp16 loss scale of `{b.owner}`: "
                    "with a scale of 65536 the threshold clips every step by a huge factor",
                    cause=f"`{b.owner}` was built with `mixed_precision=\"fp16\"`, so its backward "
                    "scales the loss; a plain `clip_grad_norm_` does not unscale first.",
                    fix=f"Use `{b.owner}.clip_grad_norm_(model.parameters(), max_norm)` (it unscales), "
                    f"or call `{b.owner}.unscale_gradients()` right before this clip.",
                )

    def _is_clip(self, mod: Module, call: ast.Call) -> bool:
        q = mod.callee(call)
        name = q.split(".")[-1]
        if name not in CLIP:
            return False
        head = q.rsplit(".", 1)[0] if "." in q else ""
        # torch.nn.utils.clip_grad_norm_ (through any alias), or a bare imported name
        return head == "" or head == "nn.utils" or q.startswith("torch.nn.utils")


def _fp16_accelerator(mod: Module, owner: str) -> bool:
    for call in mod.built.get(owner, ()):
        precision = kwarg(call, "mixed_precision")
        if mod.callee(call).endswith("Accelerator") and isinstance(precision, ast.Constant):
            return precision.value == "fp16"
    return False


def _disabled(mod: Module, scaler: str) -> bool:
    for call in mod.built.get(scaler, ()):
        enabled = kwarg(call, "enabled")
        if isinstance(enabled, ast.Constant) and enabled.value is False:
            return True
    return False
