"""torchtitan-style LM whose summed token loss is clipped by ~750x on every step.

Written the way torchtitan's trainer is: a frozen config dataclass per component, the model
built by a builder function from its ``ModelArgs``, a ``train_step`` function, and gradient
clipping done as torchtitan's ``dist_utils.clip_grad_norm_`` does it, in two calls:
``torch.nn.utils.get_total_norm`` (then ``full_tensor()`` when the norm is a DTensor, the FSDP2
case) and ``torch.nn.utils.clip_grads_with_norm_``; ``clip_grad_norm_`` itself is never called.

The bug is the loss: ``cross_entropy(..., reduction="sum")`` over 8 x 32 = 256 tokens instead of
their mean, so the gradient is 256x larger than intended (norm ~750 here) and max_norm=1.0 clips
every step by about 750x. Each update is then the gradient direction times lr, whatever the
warmup schedule says. The healthy twin is `healthy_titan_clip.py`. Catalog
`clipping-every-step`.

traindoc-expect: clipping-every-step
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, replace

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.tensor import DTensor


@dataclass(frozen=True)
class ModelArgs:
    vocab_size: int = 64
    dim: int = 32
    n_layers: int = 2
    max_seq_len: int = 32

    def __post_init__(self) -> None:
        if self.dim % 4:
            raise ValueError(f"dim must be a multiple of 4, got {self.dim}")


@dataclass(frozen=True)
class TrainingConfig:
    steps: int = 60
    batch_size: int = 8
    seq_len: int = 32
    max_norm: float = 1.0
    loss_reduction: str = "sum"  # BUG: torchtitan takes the mean over the tokens
    lr: float = 3e-4
    warmup_steps: int = 10


@dataclass(frozen=True)
class JobConfig:
    model: ModelArgs = field(default_factory=ModelArgs)
    training: TrainingConfig = field(default_factory=TrainingConfig)


class Block(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(args.dim)
        self.mlp = nn.Sequential(nn.Linear(args.dim, 4 * args.dim), nn.GELU(), nn.Linear(4 * args.dim, args.dim))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.mlp(self.norm(h))


class TinyLM(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleList(Block(args) for _ in range(args.n_layers))
        self.norm = nn.LayerNorm(args.dim)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h)
        return self.output(self.norm(h))  # (batch, seq, vocab)


def build_model(args: ModelArgs) -> TinyLM:
    model = TinyLM(args)
    for p in model.parameters():
        if p.ndim == 2:
            nn.init.normal_(p, std=0.02)
    return model


def loss_fn(logits: torch.Tensor, labels: torch.Tensor, reduction: str) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1), reduction=reduction)


@torch.no_grad()
def clip_grad_norm_(parameters: list[nn.Parameter], max_norm: float) -> torch.Tensor:
    """As torchtitan's dist utils: the norm first (reduced when it is a DTensor), then the clip."""
    grads = [p.grad for p in parameters if p.grad is not None]
    total_norm = torch.nn.utils.get_total_norm(grads, 2.0)
    if isinstance(total_norm, DTensor):
        total_norm = total_norm.full_tensor()
    torch.nn.utils.clip_grads_with_norm_(parameters, max_norm, total_norm)
    return total_norm


def synthetic_batches(cfg: JobConfig, gen: torch.Generator):
    """Token sequences that follow a fixed random bigram table: a learnable next-token task."""
    table = torch.randint(0, cfg.model.vocab_size, (cfg.model.vocab_size,), generator=gen)
    while True:
        start = torch.randint(0, cfg.model.vocab_size, (cfg.training.batch_size, 1), generator=gen)
        seq = [start]
        for _ in range(cfg.training.seq_len):
            seq.append(table[seq[-1]])
        tokens = torch.cat(seq, dim=1)
        yield tokens[:, :-1], tokens[:, 1:]


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, scheduler, inputs: torch.Tensor,
               labels: torch.Tensor, cfg: TrainingConfig) -> tuple[float, float]:
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), labels, cfg.loss_reduction)
    loss.backward()
    grad_norm = clip_grad_norm_(list(model.parameters()), cfg.max_norm)
    optimizer.step()
    scheduler.step()
    return loss.item(), grad_norm.item()


def main(training: TrainingConfig | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=TrainingConfig.steps)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    cli = p.parse_args()
    cfg = JobConfig(training=replace(training or TrainingConfig(), steps=cli.steps))
    torch.manual_seed(0)
    model = build_model(cfg.model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.training.lr, weight_decay=0.1)
    warmup = cfg.training.warmup_steps
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup))
    batches = synthetic_batches(cfg, torch.Generator().manual_seed(0))
    for step in range(cfg.training.steps):
        inputs, labels = next(batches)
        loss, grad_norm = train_step(model, optimizer, scheduler, inputs, labels, cfg.training)
        if step % 10 == 0:
            print(f"step {step:3d} | loss {loss:9.2f} | grad_norm {grad_norm:8.2f}")
    if cli.save:
        torch.save(model.state_dict(), cli.save)


if __name__ == "__main__":
    main()
