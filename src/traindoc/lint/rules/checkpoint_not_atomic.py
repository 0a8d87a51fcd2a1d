"""checkpoint-not-atomic: a resume checkpoint is overwritten in place with ``torch.save``."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterator

from traindoc.lint._ast import (
    Module, arg, dotted, drops_optimizer, fixed_filename, in_temporary_dir, method, torch_saves,
)
from traindoc.lint.rules._common import Hit, Invalid

RESUME_WORDS = ("last", "latest", "ckpt", "checkpoint", "resume", "current", "snapshot")
TEMP_WORDS = ("tmp", "temp", ".part", "partial")


class CheckpointNotAtomic:
    """``torch.save`` writes straight to a fixed file name that is overwritten each time and
    read back to resume (``last.pt``, ``ckpt.pt``, ``checkpoint.pt``, or a path this file
    ``torch.load``s to resume), from a loop or a save function, with no ``os.replace`` /
    ``os.rename`` next to it. A crash or preemption mid-write leaves a truncated file and nothing
    to resume from. Also followed: ``with open(path, "wb") as f: torch.save(obj, f)``, a
    ``pathlib`` write of a buffer ``torch.save`` filled (``path.write_bytes(buf.getvalue())``),
    and a path kept in an attribute (``self.ckpt_path``) set in another method of the class.
    Per-epoch names (``ckpt_{epoch}.pt``) and one-off saves at the end of a run
    (``torch.save(model.state_dict(), "checkpoint.pth")``) stay quiet.
    """

    id: ClassVar[str] = "checkpoint-not-atomic"
    invalid: ClassVar[tuple[Invalid, ...]] = (
        # through a helper that passes its arguments on (torchvision references, DeiT, DINO)
        Invalid(
            """
            import os
            import torch

            def save_on_master(*args, **kwargs):
                if is_main_process():
                    torch.save(*args, **kwargs)

            for epoch in range(start_epoch, epochs):
                train_one_epoch(model, optimizer, loader, epoch)
                state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}
                save_on_master(state, os.path.join(output_dir, "checkpoint.pth"))
            """,
            11,
        ),
        Invalid(
            """
            import os
            import torch

            def save(model, optimizer, step, out_dir):
                state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}
                torch.save(state, os.path.join(out_dir, "last_checkpoint.pt"))
            """,
            6,
        ),
        # the path is the helper's default: every epoch writes over the same file
        Invalid(
            """
            import torch

            def save_state(state, best, filename="resume.pth.tar"):
                torch.save(state, filename)

            for epoch in range(start, epochs):
                acc = run_epoch(model, opt)
                save_state({"epoch": epoch + 1, "model": model.state_dict(), "opt": opt.state_dict()}, acc > best)
            """,
            8,
        ),
        Invalid(
            """
            import torch

            ckpt_path = f"{args.out_dir}/model.pt"
            if args.resume:
                model.load_state_dict(torch.load(ckpt_path)["model"])
            for epoch in range(args.epochs):
                train_one_epoch(model, optimizer, loader)
                torch.save({"model": model.state_dict(), "epoch": epoch}, ckpt_path)
            """,
            8,
        ),
        Invalid(
            """
            import torch

            def save_checkpoint(state, path):
                torch.save(state, path)

            for epoch in range(epochs):
                train_one_epoch(model, optimizer, loader)
                save_checkpoint({"model": model.state_dict(), "epoch": epoch}, "checkpoints/latest.pt")
            """,
            8,
        ),
        Invalid(
            """
            import torch

            def save_checkpoint(model, optimizer, epoch, out_dir):
                with open(f"{out_dir}/last.pt", "wb") as f:
                    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, f)
            """,
            5,
        ),
        Invalid(
            """
            import io
            from pathlib import Path
            import torch

            ckpt = Path(args.out_dir) / "latest.ckpt"
            for epoch in range(args.epochs):
                train_one_epoch(model, optimizer, loader)
                buffer = io.BytesIO()
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, buffer)
                ckpt.write_bytes(buffer.getvalue())
            """,
            10,
        ),
        Invalid(
            """
            import os
            import torch

            class Trainer:
                def __init__(self, model, optimizer, out_dir):
                    self.model, self.optimizer = model, optimizer
                    self.ckpt_path = os.path.join(out_dir, "checkpoint.pt")

                def _save(self, epoch):
                    state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), "epoch": epoch}
                    torch.save(state, self.ckpt_path)
            """,
            11,
        ),
        Invalid(
            """
            import argparse
            import torch

            class Trainer:
                def __init__(self, model, args):
                    self.model, self.args = model, args

                def fit(self, loader):
                    for x, y in loader:
                        self.step(x, y)
                        torch.save(self.model.state_dict(), self.args.ckpt)

            parser = argparse.ArgumentParser()
            parser.add_argument("--ckpt", default="model.pt")
            Trainer(build_model(), parser.parse_args()).fit(loader)
            """,
            11,
        ),
        # a torchrun job's snapshot: its path handed to the trainer, left at the entry point's
        # default, read back when the job restarts (PyTorch's DDP tutorials)
        Invalid(
            """
            import os
            import torch

            class Runner:
                def __init__(self, net, opt, every, snap_file):
                    self.net, self.opt, self.every = net, opt, every
                    self.snap_file = snap_file
                    self.start = 0
                    if os.path.exists(snap_file):
                        state = torch.load(snap_file)
                        self.net.load_state_dict(state["net"])
                        self.start = state["epochs"]

                def keep(self, epoch):
                    torch.save({"net": self.net.state_dict(), "epochs": epoch}, self.snap_file)

                def run(self, epochs):
                    for epoch in range(self.start, epochs):
                        train_one_epoch(self.net, self.opt)
                        if epoch % self.every == 0:
                            self.keep(epoch)

            def launch(epochs, every, snap_file="snapshot.pt"):
                net = build()
                Runner(net, torch.optim.SGD(net.parameters(), lr=0.01), every, snap_file).run(epochs)

            launch(10, 2)
            """,
            15,
        ),
    )
    valid: ClassVar[tuple[str, ...]] = (
        # the same, one snapshot file per epoch: none is written over
        """
        import torch

        class Runner:
            def __init__(self, net, snap_dir):
                self.net, self.snap_dir = net, snap_dir

            def keep(self, epoch):
                torch.save({"net": self.net.state_dict(), "epochs": epoch}, f"{self.snap_dir}/snapshot_{epoch}.pt")

            def run(self, epochs):
                for epoch in range(epochs):
                    train_one_epoch(self.net)
                    self.keep(epoch)

        def launch(epochs, snap_dir="snapshots"):
            Runner(build(), snap_dir).run(epochs)

        launch(10)
        """,
        # a test's checkpoint in pytest's temporary folder: no later run resumes from it
        """
        import torch

        def test_resume_from_checkpoint(tmp_path):
            model = torch.nn.Linear(4, 2)
            opt = torch.optim.AdamW(model.parameters())
            model(torch.randn(3, 4)).sum().backward()
            opt.step()
            checkpoint_path = tmp_path / "resume_ckpt.pth"
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": 1}, checkpoint_path)
            assert torch.load(checkpoint_path)["step"] == 1
        """,
        """
        import argparse
        import os
        import torch

        class Trainer:
            def __init__(self, model, args):
                self.model, self.args = model, args

            def fit(self, loader):
                for x, y in loader:
                    self.step(x, y)
                    torch.save(self.model.state_dict(), self.args.ckpt + ".tmp")
                    os.replace(self.args.ckpt + ".tmp", self.args.ckpt)

        parser = argparse.ArgumentParser()
        parser.add_argument("--ckpt", default="model.pt")
        Trainer(build_model(), parser.parse_args()).fit(loader)
        """,
        """
        import os
        import torch

        def save(state, out_dir):
            path = os.path.join(out_dir, "last_checkpoint.pt")
            torch.save(state, path + ".tmp")
            os.replace(path + ".tmp", path)
        """,
        """
        import torch

        for epoch in range(epochs):
            train_one_epoch(model, optimizer, loader)
            torch.save({"model": model.state_dict(), "epoch": epoch}, f"checkpoints/epoch_{epoch:03d}.pt")
        """,
        # weights and metadata only, the optimizer left out on purpose: an export, not a resume point
        """
        import torch

        for epoch in range(epochs):
            fit(model, optimizer, loader)
            snapshot = dict(epoch=epoch, model=model.state_dict(), optimizer=None)
            torch.save(snapshot, "runs/last.pt")
        """,
        """
        import torch

        train(model, optimizer, loader)
        torch.save(model.state_dict(), "model_final.pt")
        torch.save(model.state_dict(), "checkpoint.pth")
        """,
        """
        import torch

        def save_checkpoint(state, path):
            torch.save(state, path)
        """,
        """
        import io
        import os
        import torch

        def save_checkpoint(state, out_dir):
            tmp = os.path.join(out_dir, "last.pt.tmp")
            with open(tmp, "wb") as f:
                torch.save(state, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, os.path.join(out_dir, "last.pt"))

        def save_pathlib(state, ckpt):
            buffer = io.BytesIO()
            torch.save(state, buffer)
            tmp = ckpt.with_suffix(".tmp")
            tmp.write_bytes(buffer.getvalue())
            tmp.replace(ckpt)
        """,
        """
        import os
        import torch

        class Trainer:
            def __init__(self, out_dir):
                self.ckpt_dir = out_dir

            def _save(self, state, epoch):
                torch.save(state, os.path.join(self.ckpt_dir, f"epoch_{epoch:03d}.pt"))
        """,
    )

    def check(self, mod: Module) -> Iterator[Hit]:
        saves = list(torch_saves(mod))
        if not saves:
            return
        loaded = self._loaded_paths(mod)
        via_helper = {id(inner) for call, _, _, inner in saves if inner is not call}
        for call, obj, path, inner in saves + _buffer_writes(mod, saves):
            if path is None and inner is not call:
                continue
            if drops_optimizer(mod, obj, call) or drops_optimizer(mod, arg(inner, 0, "obj"), inner):
                continue  # weights without the optimizer, on purpose: an export
            if inner is call and id(call) in via_helper:
                continue  # judged where the helper is called, with the caller's path
            path = _opened_path(mod, path, call)
            name = fixed_filename(mod, path, call)
            if not name or any(w in name.lower() for w in TEMP_WORDS) or in_temporary_dir(mod, path, call):
                continue
            resumed = path is not None and mod.text(path, 400) in loaded
            said = f"{name} {mod.text(path, 400) if path is not None else ''}".lower()  # or args.ckpt
            if not resumed and not any(w in said for w in RESUME_WORDS):
                continue
            repeated = resumed or mod.repeated(call) or any(
                w in mod.scope(call).name.lower() for w in ("save", "checkpoint", "ckpt")
            )
            if not repeated:
                continue  # a one-off save at the end of a run does not overwrite a resume point
            if self._renames(mod, call) or self._renames(mod, inner):
                continue
            # a save helper (save_checkpoint(state, path)) is reported where it is called; a
            # function that saves among other work (a train step) at its own torch.save
            helper = mod.scope(inner).name.lower()
            if mod.scope(inner) is not mod.scope(call) and not any(w in helper for w in ("save", "checkpoint", "ckpt")):
                call = inner
            yield Hit(
                call,
                f"`{mod.text(call)}` (line {call.lineno}) overwrites `{name}` in place: a crash "
                f"or preemption mid-write leaves a truncated `{name}` and no checkpoint to "
                "resume from",
                cause="`torch.save` to the final path is not atomic; the previous checkpoint is "
                "destroyed before the new one is complete.",
                fix="Save to a temporary file next to it and rename: `torch.save(obj, tmp)` "
                "then `os.replace(tmp, path)` (atomic on the same filesystem).",
            )

    def _renames(self, mod: Module, call: ast.Call) -> bool:
        for c in mod.named_in(mod.scope(call), "replace", "rename", "move"):
            q = mod.callee(c)
            if q in ("os.replace", "os.rename", "shutil.move"):
                return True
            if method(c, "replace", "rename") is not None and len(c.args) == 1:
                return True  # Path(tmp).replace(path)
        return False

    def _loaded_paths(self, mod: Module) -> set[str]:
        """Paths this file reads back to resume training: ``torch.load(path)`` under an ``if``
        about resuming, or in a function that restores an optimizer/scheduler/scaler."""
        out = set()
        for c in mod.named("load"):
            if mod.callee(c) != "torch.load" or not c.args:
                continue
            resuming = any(
                isinstance(a, ast.If) and "resum" in mod.text(a.test, 400).lower()
                for a in mod.ancestors(c)
            ) or any(
                mod.role(dotted(method(other, "load_state_dict"))) in ("optimizer", "scheduler", "scaler")
                for other in mod.named_in(mod.scope(c), "load_state_dict")
            )
            if resuming:
                out.add(mod.text(c.args[0], 400))
        return out


def _opened_path(mod: Module, path: ast.expr | None, at: ast.AST) -> ast.expr | None:
    """For ``torch.save(obj, f)`` under ``with open(p, "wb") as f`` (or ``p.open("wb")``): ``p``."""
    if not isinstance(path, ast.Name):
        return path
    for a in mod.ancestors(at):
        if not isinstance(a, (ast.With, ast.AsyncWith)):
            continue
        for item in a.items:
            opened = item.context_expr
            if not (isinstance(item.optional_vars, ast.Name) and item.optional_vars.id == path.id):
                continue
            if isinstance(opened, ast.Call) and mod.callee(opened) == "open" and opened.args:
                return opened.args[0]
            receiver = method(opened, "open")
            modes_only = isinstance(opened, ast.Call) and all(
                isinstance(a, ast.Constant) and isinstance(a.value, str) for a in opened.args
            )
            if receiver is not None and modes_only:  # Path(p).open("wb"), not fs.open(p, "wb")
                return receiver
    return path


def _buffer_writes(
    mod: Module, saves: list[tuple[ast.Call, ast.expr | None, ast.expr | None, ast.Call]]
) -> list[tuple[ast.Call, ast.expr | None, ast.expr | None, ast.Call]]:
    """``path.write_bytes(buf.getvalue())`` after ``torch.save(obj, buf)`` in the same function:
    a save to ``path`` (site, object, path, the torch.save)."""
    buffers = {(id(mod.scope(c)), p.id): (obj, inner) for c, obj, p, inner in saves if isinstance(p, ast.Name)}
    out: list[tuple[ast.Call, ast.expr | None, ast.expr | None, ast.Call]] = []
    for call in mod.named("write_bytes"):
        target = method(call, "write_bytes")
        given = call.args[0] if call.args else None
        buffer = dotted(method(given, "getvalue", "getbuffer")) if given is not None else None
        key = (id(mod.scope(call)), buffer or "")
        if target is not None and key in buffers:
            obj, inner = buffers[key]
            out.append((call, obj, target, inner))
    return out
