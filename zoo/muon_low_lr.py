"""Tiny causal transformer trained with Muon at an AdamW fine-tuning LR: updates are ~1e-5 of w.

The script follows the usual Muon recipe: torch.optim.Muon for the 2-D hidden weight matrices
(attention and MLP), AdamW for embeddings, norms, biases and the output head. But the learning
rates came from an AdamW full-fine-tuning config: `--lr 5e-6` for Muon and `--aux-lr 1e-6` for
AdamW. Muon's orthogonalised update has a spectral norm of ~1 whatever the gradient scale, so
its step is ~lr relative to a unit-scale weight: ||dw||/||w|| per step is below 1e-5 instead of
the ~1e-3..1e-2 a Muon run needs (Muon wants lr ~1e-3..2e-2), and AdamW's 1e-6 moves the
embeddings by ~1e-6 of their norm. Everything is fp32 and the gradients are healthy; the model
simply does not move and the loss stays flat. Reproduces seed 002 (second attempt: "max_lr =
0.0003 (AdamW scale) but using Muon optimizer ... Essentially not training"); catalog
`tiny-updates` and `stalled-loss`.

traindoc-expect: tiny-updates@0
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 64


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=120, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=16)
    p.add_argument("--d-model", type=int, default=32)
    p.add_argument("--n-layers", type=int, default=1)
    p.add_argument("--n-heads", type=int, default=4)
    p.add_argument("--lr", type=float, default=5e-6, help="Muon LR (hidden matrices)")
    p.add_argument("--aux-lr", type=float, default=1e-6, help="AdamW LR (embeddings, norms, head)")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--log-every", type=int, default=15)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


class Block(nn.Module):
    def __init__(self, d: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d, bias=False)
        self.out = nn.Linear(4 * d, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.n_heads, d // self.n_heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class TinyLM(nn.Module):
    def __init__(self, vocab: int, d: int, n_layers: int, n_heads: int, max_len: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        self.blocks = nn.ModuleList(Block(d, n_heads) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def make_chain(gen: torch.Generator, sharpness: float = 3.0) -> torch.Tensor:
    """A random first-order Markov chain over the vocabulary (row-stochastic matrix)."""
    return torch.softmax(sharpness * torch.randn(VOCAB, VOCAB, generator=gen), dim=1)


def make_corpus(
    chain: torch.Tensor, n_seqs: int, seq_len: int, gen: torch.Generator
) -> torch.Tensor:
    """n_seqs token sequences of length seq_len + 1 sampled from the chain."""
    seq = torch.empty(n_seqs, seq_len + 1, dtype=torch.long)
    seq[:, 0] = torch.randint(0, VOCAB, (n_seqs,), generator=gen)
    for t in range(1, seq_len + 1):
        seq[:, t] = torch.multinomial(chain[seq[:, t - 1]], 1, generator=gen).squeeze(1)
    return seq


def get_batch(
    corpus: torch.Tensor, batch_size: int, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    rows = corpus[torch.randint(0, len(corpus), (batch_size,), generator=gen)]
    return rows[:, :-1], rows[:, 1:]


def build_optimizers(model: nn.Module, lr: float, aux_lr: float) -> list[torch.optim.Optimizer]:
    """Muon for 2-D hidden matrices; AdamW for everything else (embeddings, norms, head)."""
    hidden, other = [], []
    for name, p in model.named_parameters():
        if p.ndim == 2 and name.startswith("blocks."):
            hidden.append(p)
        else:
            other.append(p)
    muon = torch.optim.Muon(hidden, lr=lr, momentum=0.95, weight_decay=0.1)
    adamw = torch.optim.AdamW(other, lr=aux_lr, betas=(0.9, 0.95), weight_decay=0.0)
    return [muon, adamw]


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    corpus = make_corpus(make_chain(gen), 2048, args.seq_len, gen)

    model = TinyLM(VOCAB, args.d_model, args.n_layers, args.n_heads, args.seq_len)
    optimizers = build_optimizers(model, args.lr, args.aux_lr)

    def lr_lambda(step: int) -> float:
        if step < args.warmup:
            return (step + 1) / args.warmup
        progress = (step - args.warmup) / max(1, args.steps - args.warmup)
        return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress))

    schedulers = [torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda) for opt in optimizers]

    model.train()
    for step in range(args.steps):
        x, y = get_batch(corpus, args.batch_size, gen)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))

        for opt in optimizers:
            opt.zero_grad(set_to_none=True)
        loss.backward()
        for opt in optimizers:
            opt.step()
        for sched in schedulers:
            sched.step()

        if step % args.log_every == 0 or step == args.steps - 1:
            print(f"step {step:4d} | loss {loss.item():.4f}"
                  f" | lr muon {schedulers[0].get_last_lr()[0]:.2e}"
                  f" adamw {schedulers[1].get_last_lr()[0]:.2e}")

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
