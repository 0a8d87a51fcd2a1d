"""A tensor-parallel or FSDP2 torchrun job on gloo, with torch's own `parallelize_module` and
`fully_shard`: the parameters are DTensors (shards of one weight across the ranks), and so are
some activations.

Styles: ``megatron`` (a column-parallel then a row-parallel Linear, every rank fed the same
batch, a loop at module level as PyTorch's tensor-parallel example writes it), ``sequence`` (a
trainer class; a LayerNorm under SequenceParallel, so the activations between layers are
DTensors sharded along the sequence, each rank fed its own part), ``titan`` (a language model as
an LLM pre-training framework writes it: its loss under `loss_parallel()`), ``fsdp2`` (the
same model sharded block by block) and ``fsdp1`` (wrapped by FSDP1's class, as Accelerate does). Options write the two mistakes of PyTorch's tensor-parallel
example's history: the optimizer built before the parameters were replaced, and no `zero_grad()`.

``--audit FILE`` writes the DTensor operations that ran with a traindoc frame on the stack: an
observer that computes on a DTensor runs collectives the training did not ask for.
"""

import argparse
import contextlib
import os
import traceback

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel, SequenceParallel,
                                               loss_parallel, parallelize_module)

p = argparse.ArgumentParser()
p.add_argument("--style", choices=["megatron", "sequence", "titan", "fsdp2", "fsdp1"], default="megatron")
p.add_argument("--steps", type=int, default=12)
p.add_argument("--optimizer-first", action="store_true", help="build AdamW before parallelize_module")
p.add_argument("--no-zero-grad", action="store_true")
p.add_argument("--flat-params", action="store_true", help="fsdp1: use_orig_params=False")
p.add_argument("--save-dir", default=None)
p.add_argument("--audit", default=None)
args = p.parse_args()


# traindoc's frames that call torch for the script: its function mode, its wrapper of backward()
# and of the clipping functions' inner step.
PASS_THROUGH = {("_ops.py", "__torch_function__"), ("_patch.py", "backward"),
                ("_patch.py", "_engine_run_backward"), ("_clip.py", "clip")}


def audit(path: str):  # type: ignore[no-untyped-def]
    from torch.distributed.tensor import DTensor
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: list[str] = []

    def traindoc_site() -> str | None:
        """The innermost frame outside torch, this audit and traindoc's pass-throughs, as
        file:line, when it is one of traindoc's own."""
        for frame in reversed(traceback.extract_stack()[:-2]):
            name = frame.filename
            if ("/torch/" in name or name.startswith("<")
                    or "/traindoc/" in name and (os.path.basename(name), frame.name) in PASS_THROUGH):
                continue
            return f"{os.path.basename(name)}:{frame.lineno}" if "/traindoc/" in name else None
        return None

    class Audit(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            site = traindoc_site() if DTensor in types else None
            if site is not None:
                seen.append(f"{func}@{site}")
            return func(*args, **(kwargs or {}))

    import atexit
    atexit.register(lambda: open(path, "w").write("\n".join(seen)))
    return Audit()


class Block(nn.Module):
    def __init__(self, width: int = 16, hidden: int = 32) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, hidden)
        self.down = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(self.norm(x))))


def megatron(mesh, rank: int) -> dict[str, torch.Tensor]:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    if args.optimizer_first:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True)
    model = parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    if not args.optimizer_first:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True)
    for i in range(args.steps):
        torch.manual_seed(100 + i)  # the same batch on every rank, as tensor parallelism needs
        x = torch.randn(16, 8)
        y = x[:, :4].sin()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        if not args.no_zero_grad:
            optimizer.zero_grad()
    return model.state_dict()


class SequenceTrainer:
    def __init__(self, mesh, rank: int) -> None:  # type: ignore[no-untyped-def]
        torch.manual_seed(0)
        self.rank = rank
        self.net = Block()
        if args.optimizer_first:
            self.opt = torch.optim.SGD(self.net.parameters(), lr=0.05, momentum=0.9)
        plan = {
            "norm": SequenceParallel(),
            "up": ColwiseParallel(input_layouts=Shard(1)),
            "down": RowwiseParallel(output_layouts=Shard(1)),
        }
        self.net = parallelize_module(self.net, mesh, plan)
        if not args.optimizer_first:
            self.opt = torch.optim.SGD(self.net.parameters(), lr=0.05, momentum=0.9)

    def train_step(self, step: int) -> float:
        g = torch.Generator().manual_seed(1000 * step + self.rank)  # this rank's part of the sequence
        x = torch.randn(4, 6, 16, generator=g)
        if not args.no_zero_grad:
            self.opt.zero_grad(set_to_none=True)
        loss = (self.net(x) - x.roll(1, dims=-1)).pow(2).mean()
        loss.backward()
        self.opt.step()
        return loss.item()

    def fit(self) -> dict[str, torch.Tensor]:
        for step in range(args.steps):
            self.train_step(step)
        return self.net.state_dict()


class TinyLM(nn.Module):
    def __init__(self, vocab: int = 32, width: int = 16) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, width)
        self.block = Block(width)
        self.norm = nn.LayerNorm(width)
        self.output = nn.Linear(width, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.output(self.norm(self.block(self.tok_embeddings(tokens))))


def titan(mesh, rank: int) -> dict[str, torch.Tensor]:  # type: ignore[no-untyped-def]
    """A language model's step as an LLM pre-training framework writes it: sequence-parallel
    norms, logits left sharded over the vocabulary and a loss computed on them under
    `loss_parallel()`, the gradient norm clipped across the shards, a warm-up schedule."""
    torch.manual_seed(0)
    model = TinyLM()
    if args.optimizer_first:
        optimizers = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    parallelize_module(model, mesh, {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "block.norm": SequenceParallel(),
        "block.up": ColwiseParallel(input_layouts=Shard(1)),
        "block.down": RowwiseParallel(output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        "output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False),
    })
    if not args.optimizer_first:
        optimizers = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    schedulers = torch.optim.lr_scheduler.LambdaLR(optimizers, lambda s: min(1.0, (s + 1) / 4))
    data = torch.Generator().manual_seed(7)
    for _ in range(args.steps):
        tokens = torch.randint(0, 32, (4, 9), generator=data)  # every rank draws the same batch
        inputs, labels = tokens[:, :-1], tokens[:, 1:]
        if not args.no_zero_grad:
            optimizers.zero_grad()
        with loss_parallel():
            pred = model(inputs)
            loss = F.cross_entropy(pred.flatten(0, 1), labels.flatten(0, 1))
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        optimizers.step()
        schedulers.step()
    return model.state_dict()


def fsdp2(mesh, rank: int) -> dict[str, torch.Tensor]:  # type: ignore[no-untyped-def]
    """FSDP2: every parameter a DTensor shard, gathered for each forward and backward; each rank
    its own batches, the gradients reduce-scattered, the norm clipped over the shards."""
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = TinyLM()
    if args.optimizer_first:
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for block in (model.tok_embeddings, model.block):
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    if not args.optimizer_first:
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data = torch.Generator().manual_seed(7 + rank)
    for _ in range(args.steps):
        tokens = torch.randint(0, 32, (4, 9), generator=data)
        loss = F.cross_entropy(model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten(0, 1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if not args.no_zero_grad:
            opt.zero_grad()
    return model.state_dict()


def fsdp1(mesh, rank: int) -> dict[str, torch.Tensor]:  # type: ignore[no-untyped-def]
    """FSDP1 as Accelerate and the Trainer configure it: each block wrapped, the original
    parameters kept (`use_orig_params=True`: each rank's parameters are views of its flat shard,
    empty where it holds none of one) unless ``--flat-params``."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    torch.manual_seed(0)
    model = TinyLM()
    if args.optimizer_first:
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model = FSDP(model, device_id=torch.device("cpu"), auto_wrap_policy=ModuleWrapPolicy({Block}),
                 use_orig_params=not args.flat_params)
    if not args.optimizer_first:
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data = torch.Generator().manual_seed(7 + rank)
    for _ in range(args.steps):
        tokens = torch.randint(0, 32, (4, 9), generator=data)
        loss = F.cross_entropy(model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten(0, 1))
        loss.backward()
        model.clip_grad_norm_(1.0)
        opt.step()
        if not args.no_zero_grad:
            opt.zero_grad()
    return model.state_dict()  # the full weights, on every rank


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    with audit(f"{args.audit}.rank{rank}") if args.audit else contextlib.nullcontext():
        run = {"megatron": megatron, "titan": titan, "fsdp2": fsdp2, "fsdp1": fsdp1,
               "sequence": lambda mesh, rank: SequenceTrainer(mesh, rank).fit()}[args.style]
        state = run(mesh, rank)
    if args.save_dir:
        local = {k: (v.to_local() if hasattr(v, "to_local") else v).detach().clone() for k, v in state.items()}
        torch.save(local, os.path.join(args.save_dir, f"rank{rank}.pt"))
    dist.destroy_process_group()


main()
