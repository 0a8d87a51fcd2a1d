"""checkpoint-incomplete: a training checkpoint lacks state needed to resume exactly."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterator

from traindoc.lint._ast import (
    Module, Scope, arg, dotted, drops_optimizer, fixed_filename, in_temporary_dir, kwarg, method, number, resolve, torch_saves,
)
from traindoc.lint.rules._common import Hit, Invalid

PARTS = ("model", "optimizer", "scheduler", "scaler", "step")
UNKNOWN = "<entries the file does not show>"
STEP_KEYS = ("step", "epoch", "iter", "update", "tokens", "samples_seen")
EFFECT = {
    "optimizer": "the optimizer's moments from zero",
    "scheduler": "the LR schedule from its first value",
    "scaler": "the GradScaler from its initial scale",
    "step": "the step counter (and anything keyed on it) from 0",
}


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


class CheckpointIncomplete:
    """A dict saved with ``torch.save`` holds the model and some training state (the optimizer
    or the step), so it is meant for resuming, but lacks a piece this file uses: the
    optimizer, an LR scheduler, a GradScaler, or the step/epoch counter. A resumed run then
    restarts the schedule, the loss scale or the counters. A weights-only save
    (``{"model": model.state_dict()}``) is an export and stays quiet.

    PyTorch-Ignite's ``Checkpoint(to_save, saver)`` is a save too: its dict holds the objects
    themselves, and an engine of ignite's built in this file holds the loop's progress (the
    step). Its ``ModelCheckpoint`` handler keeps weights and stays quiet.
    """

    id: ClassVar[str] = "checkpoint-incomplete"
    invalid: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            """
            import torch

            optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
            scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-4, total_steps=10000)
            scaler = torch.amp.GradScaler("cuda")
            for step, batch in enumerate(loader):
                train_step(model, batch, optimizer, scheduler, scaler)
                if step % 1000 == 0:
                    checkpoint = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}
                    torch.save(checkpoint, f"ckpt_{step}.pt")
            """,
            9,
        ),
        Invalid(
            """
            import torch

            def save(model, optimizer, path):
                torch.save({"model_state_dict": model.state_dict(), "optimizer_state_dict": optimizer.state_dict()}, "model_opt.pt")
            """,
            4,
        ),
        # keyword form; the run resumes from it with a GradScaler whose scale it drops
        Invalid(
            """
            import torch

            def train(args, model, optimizer, loader):
                scaler = torch.cuda.amp.GradScaler()
                for epoch in range(args.start_epoch, args.epochs):
                    run_epoch(model, optimizer, scaler, loader)
                    state = dict(epoch=epoch + 1, model=model.state_dict(), optimizer=optimizer.state_dict())
                    torch.save(state, args.out / f"epoch_{epoch}.pth")
            """,
            7,
        ),
        Invalid(
            """
            import os
            import torch

            def save_checkpoint(state, path):
                torch.save(state, path + ".tmp")
                os.replace(path + ".tmp", path)

            scaler = torch.amp.GradScaler("cuda")
            for epoch in range(epochs):
                train_one_epoch(model, optimizer, scaler, loader)
                save_checkpoint({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, "last.pt")
            """,
            11,
        ),
        # the state kept in a dataclass, saved as a dict (PyTorch's minGPT-DDP example)
        Invalid(
            """
            from dataclasses import asdict, dataclass
            import torch

            @dataclass
            class State:
                weights: dict
                opt: dict
                done_epochs: int

            class Loop:
                def __init__(self, net, opt, fp16):
                    self.net, self.opt = net, opt
                    self.amp = torch.amp.GradScaler("cuda", enabled=fp16)

                def keep(self, epoch, path):
                    state = State(weights=self.net.state_dict(), opt=self.opt.state_dict(), done_epochs=epoch)
                    torch.save(asdict(state), path)
            """,
            17,
        ),
        Invalid(
            """
            import torch
            from ignite.engine import Events, create_supervised_trainer
            from ignite.handlers import Checkpoint, DiskSaver

            optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
            trainer = create_supervised_trainer(model, optimizer, criterion)
            to_save = {"model": model, "trainer": trainer}
            handler = Checkpoint(to_save, DiskSaver("ckpt", require_empty=False), n_saved=2)
            trainer.add_event_handler(Events.EPOCH_COMPLETED, handler)
            trainer.run(train_loader, max_epochs=10)
            """,
            7,
        ),
        Invalid(
            """
            import torch
            from ignite.engine import Engine, Events
            from ignite.handlers import Checkpoint, DiskSaver

            def update(engine, batch):
                x, y = batch
                opt.zero_grad()
                loss = torch.nn.functional.cross_entropy(net(x), y)
                loss.backward()
                opt.step()
                return loss.item()

            opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
            trainer = Engine(update)
            trainer.add_event_handler(
                Events.ITERATION_COMPLETED(every=1000),
                Checkpoint(to_save={"net": net, "engine": trainer}, save_handler=DiskSaver("runs/ckpt")),
            )
            """,
            17,
        ),
    )
    valid: ClassVar[tuple[str, ...]] = (
        """
        import torch
        from ignite.engine import Events, create_supervised_trainer
        from ignite.handlers import Checkpoint, DiskSaver, ModelCheckpoint

        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        trainer = create_supervised_trainer(model, optimizer, criterion)
        to_save = {"model": model, "optimizer": optimizer, "trainer": trainer}
        trainer.add_event_handler(Events.EPOCH_COMPLETED, Checkpoint(to_save, DiskSaver("ckpt"), n_saved=2))
        best = ModelCheckpoint("ckpt", n_saved=1, filename_prefix="best")
        trainer.add_event_handler(Events.COMPLETED, best, {"model": model})
        """,
        # the same with the scaler among the dataclass's fields
        """
        from dataclasses import asdict, dataclass
        import torch

        @dataclass
        class State:
            weights: dict
            opt: dict
            amp: dict
            done_epochs: int

        class Loop:
            def __init__(self, net, opt, fp16):
                self.net, self.opt = net, opt
                self.amp = torch.amp.GradScaler("cuda", enabled=fp16)

            def keep(self, epoch, path):
                state = State(weights=self.net.state_dict(), opt=self.opt.state_dict(), amp=self.amp.state_dict(),
                              done_epochs=epoch)
                torch.save(asdict(state), path)
        """,
        # a test's checkpoint in pytest's temporary folder, weights only on purpose
        """
        import torch

        def test_loading_weights_without_the_optimizer(tmp_path):
            model = torch.nn.Linear(4, 2)
            opt = torch.optim.AdamW(model.parameters())
            model(torch.randn(3, 4)).sum().backward()
            opt.step()
            torch.save({"state_dict": model.state_dict(), "epoch": 7}, tmp_path / "ckpt.pth")
        """,
        # plain SGD (no momentum) keeps no state for a snapshot to lose
        """
        import torch
        import torch.nn.functional as F

        class Trainer:
            def __init__(self, model, loader, snapshot_path):
                self.model, self.loader, self.snapshot_path = model, loader, snapshot_path
                self.optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)

            def train(self, epochs):
                for epoch in range(epochs):
                    for x, y in self.loader:
                        self.optimizer.zero_grad()
                        F.cross_entropy(self.model(x), y).backward()
                        self.optimizer.step()
                    torch.save({"MODEL_STATE": self.model.state_dict(), "EPOCHS_RUN": epoch}, self.snapshot_path)
        """,
        # the scaler stored under a key computed at run time (timm's CheckpointSaver); entries
        # merged from elsewhere, which the file does not show
        """
        import torch

        class Saver:
            def __init__(self, model, optimizer, amp_scaler=None, extra=None):
                self.model, self.optimizer, self.amp_scaler, self.extra = model, optimizer, amp_scaler, extra

            def save(self, path, epoch):
                state = {"epoch": epoch, "state_dict": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}
                if self.amp_scaler is not None:
                    state[self.amp_scaler.state_dict_key] = self.amp_scaler.state_dict()
                torch.save(state, path)

            def save_with_extra(self, path, epoch):
                state = {"epoch": epoch, "state_dict": self.model.state_dict()}
                state.update(self.extra.checkpoint_state())
                torch.save(state, path)

        scaler = torch.amp.GradScaler("cuda")
        saver = Saver(model, optimizer, scaler)
        for epoch in range(90):
            train_one_epoch(model, optimizer, scaler, loader)
            saver.save("last.pth", epoch)
        """,
        """
        import torch

        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-4, total_steps=10000)
        scaler = torch.amp.GradScaler("cuda")
        checkpoint = {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "step": step,
        }
        checkpoint["scaler"] = scaler.state_dict()
        torch.save(checkpoint, f"ckpt_{step}.pt")
        """,
        """
        import torch

        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
        torch.save({"model": model.state_dict()}, "weights.pt")
        torch.save(model.state_dict(), "model.pt")
        """,
        """
        import torch

        def save(state, path):
            torch.save({**state, "step": state["step"]}, path)
        """,
        # The optimizer is left out on purpose: an export of weights with metadata.
        """
        import torch

        for epoch in range(epochs):
            train_one_epoch(model, optimizer, scheduler, loader)
            torch.save({"epoch": epoch, "model": model.state_dict(), "optimizer": None}, "weights/last.pt")
        """,
        # The schedule is rebuilt from the saved epoch on resume: its state is not lost.
        """
        import torch

        def train(model, epoch_start, epochs, ckpt_dir):
            optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4)
            decay = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.999, last_epoch=epoch_start - 2)
            for epoch in range(epoch_start, epochs + 1):
                run_epoch(model, optimizer)
                decay.step()
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch},
                           f"{ckpt_dir}/G_{epoch}.pth")
        """,
        """
        import torch

        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        lr_decay = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda=lambda e: 0.98 ** e)
        start = restore(model, optimizer)  # the saved epoch + 1, or 0
        lr_decay.last_epoch = start - 1
        for epoch in range(start, 300):
            fit_one_epoch(model, optimizer)
            lr_decay.step()
            torch.save({"epoch": epoch, "model": model.state_dict(), "optimizer": optimizer.state_dict()}, f"w/{epoch}.pt")
        """,
    )

    def check(self, mod: Module) -> Iterator[Hit]:
        ignite = _ignite_saves(mod)
        saves = list(torch_saves(mod)) + ignite
        by_object = {id(save[0]) for save in ignite}  # Ignite saves the objects, load_objects restores them
        if not saves:
            return
        uses = self._uses(mod)
        for call, obj, path, _ in saves:
            found = self._dict(mod, obj, call)
            if found is None or drops_optimizer(mod, obj, call) or in_temporary_dir(mod, path, call):
                continue  # (a checkpoint in a temporary folder is not resumed by a later run)
            node, keys, receivers = found
            objects = id(call) in by_object
            have = {part for part in PARTS if _has(part, keys, receivers, mod)}
            if "model" not in have or not ({"optimizer", "step"} & have):
                continue
            missing, effects, entries = [], [], []
            for part in ("optimizer", "scheduler", "scaler"):
                if part in uses and part not in have:
                    state = uses[part] if objects else f"{uses[part]}.state_dict()"
                    missing.append(f"`{state}`")
                    effects.append(EFFECT[part])
                    entries.append(f'"{part}": {state}')
            if "step" not in have and fixed_filename(mod, path, call) is not None:
                missing.append("the step/epoch counter")
                effects.append(EFFECT["step"])
                entries.append('"step": step')
            if not missing:
                continue
            listed = ", ".join(f"`{k}`" for k in keys)
            yield Hit(
                node,
                f"The checkpoint saved at line {call.lineno} (keys {listed}) lacks "
                f"{_join(missing)}: a resumed run restarts {_join(effects)}",
                cause="Only part of the training state is saved, so resuming does not continue "
                "the same run.",
                fix=f"Add {_join([f'`{e}`' for e in entries])} to the checkpoint dict and restore "
                + ("them on resume (`Checkpoint.load_objects(to_load=to_save, checkpoint=...)`)." if objects else
                   "them on resume (`load_state_dict`, and the step counter)."),
            )

    def _dict(self, mod: Module, obj: ast.expr | None,
              call: ast.Call) -> tuple[ast.expr, list[str], list[str]] | None:
        """(node, keys, receivers of .state_dict() values) of the dict saved, or None: a dict
        display ``{"model": ...}``, a ``dict(model=..., epoch=...)`` call, or a dataclass built
        with keywords and turned into a dict (``asdict``)."""
        name = obj.id if isinstance(obj, ast.Name) else None
        node = resolve(mod, obj, call, depth=1)
        fields = None  # keyword arguments that become the dict's entries
        if isinstance(node, ast.Call) and mod.callee(node) == "dict" and not node.args:
            fields = node.keywords
        elif isinstance(node, ast.Call) and mod.callee(node).endswith("asdict") and len(node.args) == 1:
            # a dataclass's fields as a dict: ``asdict(Snapshot(model_state=..., epoch=...))``
            built = resolve(mod, node.args[0], node, depth=1)
            if isinstance(built, ast.Call) and not built.args:
                fields = built.keywords
        if fields is not None and node is not None:
            items: list[tuple[ast.expr | None, ast.expr]] = [
                (None if kw.arg is None else ast.Constant(kw.arg), kw.value) for kw in fields
            ]
        elif isinstance(node, ast.Dict):
            items = list(zip(node.keys, node.values))
        else:
            return None
        keys: list[str] = []
        receivers: list[str] = []
        for key, value in items:
            if key is None or not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                return None  # **spread or computed keys: cannot know what is in it
            keys.append(key.value)
            # the object's own state_dict(), or the object itself (Ignite saves objects)
            receivers.append(dotted(method(value, "state_dict")) or dotted(value) or "")
        if name:
            scope = mod.scope(call)
            for stmt in _subscript_sets(mod, scope, name, call.lineno):
                if stmt[0] == UNKNOWN:
                    return None  # entries the file does not show: cannot know what is missing
                keys.append(stmt[0])
                receivers.append(stmt[1])
        return node, keys, receivers

    def _uses(self, mod: Module) -> dict[str, str]:
        """The optimizer, scheduler and GradScaler this file builds, by name."""
        out: dict[str, str] = {}
        for text, calls in mod.built.items():
            for call in calls:
                kind = mod.kind_of_call(call)
                if kind in ("optimizer", "scheduler", "scaler") and kind not in out:
                    enabled = kwarg(call, "enabled")
                    if kind == "scaler" and isinstance(enabled, ast.Constant) and enabled.value is False:
                        continue
                    if kind == "optimizer" and _stateless(mod, call):
                        continue  # plain SGD keeps no state: a resume without it loses nothing
                    last = kwarg(call, "last_epoch")
                    if kind == "scheduler" and (
                        (last is not None and number(last) != -1) or _repositioned(mod, text)
                    ):
                        continue  # set to the saved epoch on resume (`last_epoch=epoch - 1`)
                    out[kind] = text
        return out


def _stateless(mod: Module, call: ast.Call) -> bool:
    """``torch.optim.SGD(params, lr)`` without momentum: ``state_dict()`` holds no state."""
    if (mod.callee(call) or "").split(".")[-1] != "SGD":
        return False
    momentum = arg(call, 2, "momentum")
    return momentum is None or number(momentum) == 0


def _repositioned(mod: Module, scheduler: str) -> bool:
    """``scheduler.last_epoch = start_epoch - 1`` somewhere in the file: the schedule is put
    back at the resumed epoch without its state."""
    target = f"{scheduler}.last_epoch"
    return any(t == target for scope in mod.scopes for t, _, _ in scope.assigns)


def _has(part: str, keys: list[str], receivers: list[str], mod: Module) -> bool:
    for key, receiver in zip(keys, receivers):
        low = key.lower()
        role = mod.role(receiver) if receiver else None
        if part == "model" and ("model" in low or "state_dict" in low or low in ("net", "weights", "params")):
            if not any(other in low for other in ("optim", "sched", "scaler")):
                return True
        if part == "optimizer" and ("optim" in low or low in ("opt",) or role == "optimizer"):
            return True
        if part == "scheduler" and ("sched" in low or role == "scheduler"):
            return True
        if part == "scaler" and ("scaler" in low or low == "amp" or role == "scaler"):
            return True
        if part == "step" and (any(k in low for k in STEP_KEYS) or low == "it" or _engine(mod, receiver)):
            return True
    return False


def _ignite_saves(mod: Module) -> list[tuple[ast.Call, ast.expr | None, ast.expr | None, ast.Call]]:
    """PyTorch-Ignite's ``Checkpoint(to_save, save_handler, ...)``: (site, dict, no path, call)."""
    return [(call, arg(call, 0, "to_save"), None, call) for call in mod.named("Checkpoint")
            if mod.callee(call).startswith("ignite.")]


def _engine(mod: Module, name: str) -> bool:
    """An Ignite engine built in this file (``create_supervised_trainer``, ``Engine(step)``):
    its state_dict is the loop's progress, the epoch and the iteration."""
    return any(mod.callee(call).startswith("ignite.engine") for call in mod.built.get(name, ()))


def _subscript_sets(mod: Module, scope: Scope, name: str, before: int) -> Iterator[tuple[str, str]]:
    """(key, receiver) for ``name["key"] = value`` and ``name.update(key=value)`` in scope."""
    for stmt in ast.walk(scope.node):
        if isinstance(stmt, ast.Assign) and stmt.lineno < before:
            for t in stmt.targets:
                if isinstance(t, ast.Subscript) and dotted(t.value) == name:
                    # a computed key (timm: ``state[self.amp_scaler.state_dict_key] = ...``) is
                    # known by the object whose state it stores
                    key = t.slice.value if isinstance(t.slice, ast.Constant) else mod.text(t.slice)
                    yield str(key), dotted(method(stmt.value, "state_dict")) or ""
        elif isinstance(stmt, ast.Call) and dotted(method(stmt, "update")) == name and stmt.lineno < before:
            for kw in stmt.keywords:
                if kw.arg:
                    yield kw.arg, dotted(method(kw.value, "state_dict")) or ""
            for a in stmt.args:
                if isinstance(a, ast.Dict):
                    for k, v in zip(a.keys, a.values):
                        if isinstance(k, ast.Constant) and isinstance(k.value, str):
                            yield k.value, dotted(method(v, "state_dict")) or ""
                else:
                    yield UNKNOWN, ""  # ``state.update(task.get_checkpoint_state())``: any key
