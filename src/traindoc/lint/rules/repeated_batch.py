"""repeated-batch: a shuffling sampler trains every epoch in the order of the first."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterator

from traindoc.lint._ast import Module, Scope, dotted, kwarg, loaders, method, names_in, sampler_of, truth, unwrapped
from traindoc.lint.rules._common import Hit, Invalid

# Packages whose seed functions put torch's global generator back to a state; torch.cuda's seed
# only the GPU generators, which a sampler never draws from.
SEEDING = frozenset({"torch", "transformers", "accelerate", "lightning", "pytorch_lightning", "lightning_fabric"})


class RepeatedBatch:
    """A training loop that runs once per epoch iterates a loader whose shuffling sampler draws
    the same permutation every epoch. Two ways, each judged by what the sampler draws from, not
    by names: a ``DistributedSampler`` (shuffling, the default) shuffles with ``seed + epoch``
    and nothing in the file calls ``set_epoch`` (nor sets its ``epoch``); a loader that shuffles
    with torch's global generator (``shuffle=True`` or a ``RandomSampler`` without a generator
    of its own) is iterated in a loop whose every pass first puts that generator back to the
    same state (``torch.manual_seed(seed)``, a ``set_seed`` helper of the file, the loader's
    own generator re-seeded, or the loader rebuilt with ``torch.Generator().manual_seed(seed)``).
    The loader is followed from the loop through names, returns of the file's functions,
    dicts of loaders and the arguments of the function the epoch loop calls. Quiet when the seed
    changes with the epoch, when the sampler does not shuffle, when the loader goes through a
    wrapper that sets the epoch itself (``accelerator.prepare``), and for a single pass.
    """

    id: ClassVar[str] = "repeated-batch"
    invalid: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader, DistributedSampler

            sampler = DistributedSampler(train_set)
            loader = DataLoader(train_set, batch_size=64, sampler=sampler, drop_last=True)
            for epoch in range(epochs):
                for x, y in loader:
                    loss = criterion(model(x), y)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
            """,
            4,
        ),
        Invalid(
            """
            import torch
            from torch.utils.data.distributed import DistributedSampler

            def build_loader(dataset, batch_size, distributed):
                sampler = DistributedSampler(dataset) if distributed else None
                return torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=sampler is None,
                                                   sampler=sampler)

            def train(model, loader, optimizer):
                model.train()
                for step, batch in enumerate(loader):
                    loss = model(**batch).loss
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()

            train_loader = build_loader(train_set, 32, True)
            for epoch in range(num_epochs):
                train(model, train_loader, optimizer)
            """,
            5,
        ),
        Invalid(
            """
            import random
            import numpy as np
            import torch
            from torch.utils.data import DataLoader

            def set_seed(seed):
                random.seed(seed)
                np.random.seed(seed)
                torch.manual_seed(seed)

            loader = DataLoader(clicks, batch_size=256, shuffle=True)
            for epoch in range(args.epochs):
                set_seed(args.seed)
                for dense, cat, y in loader:
                    loss = torch.nn.functional.binary_cross_entropy_with_logits(model(dense, cat), y)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
            """,
            13,
        ),
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader

            class Trainer:
                def fit(self, dataset, epochs):
                    for epoch in range(epochs):
                        loader = DataLoader(dataset, batch_size=32, shuffle=True,
                                            generator=torch.Generator().manual_seed(self.seed))
                        for x, y in loader:
                            loss = self.loss_fn(self.model(x), y)
                            self.optimizer.zero_grad()
                            loss.backward()
                            self.optimizer.step()
            """,
            7,
        ),
    )
    valid: ClassVar[tuple[str, ...]] = (
        """
        import torch
        from torch.utils.data import DataLoader, DistributedSampler

        sampler = DistributedSampler(train_set)
        loader = DataLoader(train_set, batch_size=64, sampler=sampler, drop_last=True)
        for epoch in range(epochs):
            sampler.set_epoch(epoch)
            for x, y in loader:
                loss = criterion(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        """,
        """
        import torch
        from torch.utils.data.distributed import DistributedSampler

        def train(model, loader, optimizer, epoch):
            model.train()
            loader.sampler.set_epoch(epoch)
            for batch in loader:
                loss = model(**batch).loss
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()

        train_loader = torch.utils.data.DataLoader(train_set, batch_size=32, sampler=DistributedSampler(train_set))
        val_loader = torch.utils.data.DataLoader(val_set, batch_size=32,
                                                 sampler=DistributedSampler(val_set, shuffle=False))
        for epoch in range(num_epochs):
            train(model, train_loader, optimizer, epoch)
            model.eval()
            with torch.no_grad():
                for batch in val_loader:
                    metric.update(model(**batch).logits)
        """,
        # a fixed order on purpose, and one pass over a shuffling sampler
        """
        import torch
        from torch.utils.data import DataLoader, DistributedSampler

        ordered = DataLoader(stream, batch_size=8, sampler=DistributedSampler(stream, shuffle=False))
        for epoch in range(epochs):
            for x, y in ordered:
                loss = criterion(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        once = DataLoader(finetune_set, batch_size=8, sampler=DistributedSampler(finetune_set))
        for x, y in once:
            loss = criterion(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        """,
        # a sampler rebuilt every epoch with the epoch in its seed
        """
        import torch
        from torch.utils.data import DataLoader, DistributedSampler

        for epoch in range(epochs):
            sampler = DistributedSampler(train_set, seed=base_seed + epoch)
            for x, y in DataLoader(train_set, batch_size=64, sampler=sampler):
                loss = criterion(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        """,
        # the seed changes with the epoch; seeded once; seeded per run of a sweep
        """
        import torch
        from torch.utils.data import DataLoader

        loader = DataLoader(clicks, batch_size=256, shuffle=True)
        for epoch in range(args.epochs):
            torch.manual_seed(args.seed + epoch)
            for dense, y in loader:
                loss = torch.nn.functional.mse_loss(model(dense), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
        """,
        """
        import torch
        from torch.utils.data import DataLoader

        for lr in (1e-3, 3e-4):
            torch.manual_seed(0)
            model = torch.nn.Linear(8, 1)
            opt = torch.optim.SGD(model.parameters(), lr=lr)
            loader = DataLoader(points, batch_size=16, shuffle=True)
            for epoch in range(5):
                for x, y in loader:
                    loss = torch.nn.functional.mse_loss(model(x), y)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
        """,
        # Accelerate sets the sampler's epoch at every pass of a prepared loader
        """
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader, DistributedSampler

        accelerator = Accelerator()
        loader = DataLoader(train_set, batch_size=64, sampler=DistributedSampler(train_set))
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        for epoch in range(epochs):
            for x, y in loader:
                loss = criterion(model(x), y)
                optimizer.zero_grad()
                accelerator.backward(loss)
                optimizer.step()
        """,
    )

    def check(self, mod: Module) -> Iterator[Hit]:
        epoch_set = bool(mod.named("set_epoch")) or any(
            t.endswith(".epoch") for s in mod.scopes for t, _, _ in s.assigns
        )
        seen: set[int] = set()
        for scope in mod.scopes:
            for loop in scope.loops:
                drawn = mod.iterated(loop)
                if drawn is None or not mod.backwards_in(scope, loop):
                    continue
                passes = _epoch_loops(mod, scope, loop)
                for loader in loaders(mod, drawn, loop):
                    sampler = sampler_of(mod, loader, "DistributedSampler")
                    if sampler is not None and not epoch_set and mod.repeated(loop) and _shuffles(mod, sampler):
                        if id(sampler) not in seen:
                            seen.add(id(sampler))
                            yield self._distributed(mod, sampler, drawn, loop, passes)
                        continue
                    generator = _global_shuffle(mod, loader)
                    if generator is None:
                        continue
                    for epoch_loop in passes:
                        for call, seed in _reseeds(mod, epoch_loop, loop, loader, generator):
                            if id(call) not in seen:
                                seen.add(id(call))
                                yield self._reseeded(mod, call, seed, drawn, epoch_loop)

    def _distributed(self, mod: Module, sampler: ast.Call, drawn: ast.expr, loop: ast.stmt,
                     passes: list[ast.stmt]) -> Hit:
        name = _stored_as(mod, sampler)
        epoch = f" (the loop at line {passes[0].lineno})" if passes else ""
        loader = mod.text(unwrapped(mod, drawn), 60)
        if name and passes and mod.scope(sampler) is mod.scope(passes[0]):
            fix = f"Call `{name}.set_epoch(epoch)` at the start of every epoch{epoch}, before the loader is iterated"
        else:
            fix = f"Call `{loader}.sampler.set_epoch(epoch)` with the epoch's number before line {loop.lineno} iterates it"
        return Hit(
            sampler,
            f"{'`' + name + '`' if name else 'this DistributedSampler'} (line {sampler.lineno}) shuffles with "
            f"`seed + epoch`, and nothing in this file calls its `set_epoch`: every epoch{epoch} trains on "
            f"`{loader}` in the first epoch's order, on every rank",
            cause="DistributedSampler draws each pass's permutation from `seed + self.epoch`, and its epoch "
            "stays 0 until `set_epoch` is called: the batches, their composition and the gradient noise "
            "repeat every epoch.",
            fix=f"{fix} (`DistributedSampler(shuffle=False)` if one fixed order is meant).",
        )

    def _reseeded(self, mod: Module, call: ast.Call, seed: ast.expr, drawn: ast.expr, epoch_loop: ast.stmt) -> Hit:
        loader = mod.text(unwrapped(mod, drawn), 60)
        what = (f"`{loader}` is rebuilt with a generator seeded to `{mod.text(seed, 40)}`"
                if (mod.callee(call) or "").endswith("DataLoader") else
                f"`{mod.text(call, 60)}` puts the generator that `{loader}` shuffles with back to seed "
                f"`{mod.text(seed, 40)}`")
        return Hit(
            call,
            f"{what} at every pass of the loop at line {epoch_loop.lineno}: every epoch draws the same "
            "permutation and trains on the same batches in the same order",
            cause="A shuffling DataLoader draws each epoch's permutation from its generator (torch's "
            "global one unless it was given its own); seeding it again with the same value before each "
            "pass makes every pass draw the first pass's order.",
            fix="Seed once, before the epoch loop, and keep one generator for the whole run (or make "
            "the seed change with the epoch: `seed + epoch`).",
        )


def _shuffles(mod: Module, sampler: ast.Call) -> bool:
    """The sampler shuffles, and the same way every pass: not a sampler rebuilt in each pass
    with a seed that changes (``DistributedSampler(ds, seed=base + epoch)``)."""
    given = kwarg(sampler, "shuffle")
    if given is not None and truth(mod, given, sampler) is not True:
        return False
    seed = kwarg(sampler, "seed")
    home = mod.scope(sampler)
    return seed is None or not any(_varies(seed, _assigned_in(home, loop)) for loop in mod.loops_around(sampler))


def _global_shuffle(mod: Module, loader: ast.Call) -> ast.expr | None:
    """What the loader shuffles with when it shuffles: its ``generator=`` (or its
    RandomSampler's), else the name ``torch`` for torch's global generator; None when it does
    not shuffle, or the file does not show that it does."""
    random = sampler_of(mod, loader, "RandomSampler")
    if random is None and truth(mod, kwarg(loader, "shuffle"), loader) is not True:
        return None
    owner = random if random is not None else loader
    return kwarg(owner, "generator") or ast.Name("torch")


def _epoch_loops(mod: Module, scope: Scope, loop: ast.stmt) -> list[ast.stmt]:
    """The loops each of whose passes runs ``loop`` once: the innermost loop around it, else the
    innermost loop around each call of its function."""
    around = _pass_loop(mod, loop)
    if around is not None:
        return [around]
    found = (_pass_loop(mod, call) for call in mod.callers_of(scope))
    return [outer for outer in found if outer is not None]


def _pass_loop(mod: Module, node: ast.AST) -> ast.stmt | None:
    """The innermost loop around ``node`` that is not over a literal (``for phase in ["train",
    "val"]`` runs the phases of one pass, not passes)."""
    for loop in mod.loops_around(node):
        if not (isinstance(loop, (ast.For, ast.AsyncFor)) and isinstance(loop.iter, (ast.List, ast.Tuple, ast.Set))):
            return loop
    return None


def _reseeds(mod: Module, epoch_loop: ast.stmt, loop: ast.stmt, loader: ast.Call,
             generator: ast.expr) -> Iterator[tuple[ast.Call, ast.expr]]:
    """Calls in ``epoch_loop``'s own body (not in a deeper loop, not in the training loop)
    that put ``generator`` back to a seed that is the same at every pass: a seeding call, or
    the loader itself, rebuilt there with ``generator=torch.Generator().manual_seed(seed)``."""
    home = mod.scope(epoch_loop)
    varying = _assigned_in(home, epoch_loop)
    own = dotted(generator)
    for call in mod.calls_in(home, epoch_loop):
        if mod.inside(call, loop) or _pass_loop(mod, call) is not epoch_loop:
            continue
        if call is loader:
            seed = _generator_seed(mod, generator) if isinstance(generator, ast.Call) else None
        elif mod.inside(call, loader):
            continue
        else:
            seed = _seed_of(mod, call, own, 2)
        if seed is not None and not _varies(seed, varying):
            yield call, seed


def _generator_seed(mod: Module, generator: ast.Call) -> ast.expr | None:
    """``torch.Generator().manual_seed(seed)`` given to a loader built inside the loop: seed."""
    receiver = method(generator, "manual_seed")
    if receiver is not None and generator.args and (mod.callee(receiver) or "").endswith("Generator"):
        return generator.args[0]
    return None


def _seed_of(mod: Module, call: ast.Call, generator: str | None, depth: int) -> ast.expr | None:
    """The seed ``call`` puts torch's global generator (or the loader's own, ``generator``) back
    to: ``torch.manual_seed(s)``, a framework's ``set_seed(s)``/``seed_everything(s)``, the
    loader's generator's ``manual_seed(s)``, or a function of this file that does one of these
    (its argument for the parameter it seeds with)."""
    q = mod.callee(call) or ""
    head, _, _ = q.partition(".")
    last = q.split(".")[-1]
    receiver = method(call, "manual_seed")
    if generator not in (None, "torch") and receiver is not None and dotted(receiver) == generator:
        return call.args[0] if call.args else None
    if generator == "torch" and head in SEEDING and last in ("manual_seed", "set_seed", "seed_everything") \
            and not q.startswith("torch.cuda"):
        return call.args[0] if call.args else kwarg(call, "seed")
    fn = mod.callee_scope(call)
    if fn is None or depth == 0 or not isinstance(fn.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    params = [a.arg for a in fn.node.args.args]
    if fn.cls is not None and params[:1] in (["self"], ["cls"]):
        params = params[1:]
    for inner in fn.calls:
        seed = _seed_of(mod, inner, generator, depth - 1)
        if seed is None:
            continue
        used = names_in(seed) & set(params)
        if not used:
            return seed
        name = used.pop()
        i = params.index(name)
        passed = kwarg(call, name) or (call.args[i] if i < len(call.args) else None)
        return passed
    return None


def _assigned_in(scope: Scope, loop: ast.stmt) -> set[str]:
    """Names (and dotted attributes) that change from one pass of ``loop`` to the next."""
    out = set()
    if isinstance(loop, (ast.For, ast.AsyncFor)):
        out |= names_in(loop.target)
    start, end = loop.lineno, loop.end_lineno or loop.lineno
    for target, stmt, _ in scope.assigns:
        if start <= stmt.lineno <= end:
            out.add(target)
    return out


def _varies(seed: ast.expr, varying: set[str]) -> bool:
    """The seed can differ between passes: it reads a name the loop changes, or calls something
    (``random.randint``, ``time.time()``)."""
    for node in ast.walk(seed):
        if isinstance(node, ast.Call):
            return True
        if isinstance(node, (ast.Name, ast.Attribute)) and dotted(node) in varying:
            return True
    return False


def _stored_as(mod: Module, call: ast.Call) -> str | None:
    """The name a call's result is assigned to (``train_sampler = DistributedSampler(...)``)."""
    up = mod.parent.get(call)
    kept = ""
    while isinstance(up, (ast.IfExp, ast.DictComp, ast.comprehension)):
        kept = "[...]" if isinstance(up, ast.DictComp) else kept
        up = mod.parent.get(up)
    if isinstance(up, ast.Assign) and len(up.targets) == 1 and dotted(up.targets[0]):
        return f"{dotted(up.targets[0])}{kept}"
    return None
