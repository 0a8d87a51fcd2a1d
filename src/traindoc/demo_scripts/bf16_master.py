"""Tiny causal transformer cast to bf16 before AdamW: updates round away, LayerNorms stay 1.0.

A one-block causal transformer (width 32) learns a synthetic Markov-chain language. To "save
memory" the script calls `model = model.to(dtype=torch.bfloat16)` before building AdamW (peak
LR 1e-4, linear warmup + cosine). The parameters themselves are now bf16: near 1.0 a bf16
number can only move in steps of 2^-8..2^-7 (0.004-0.008), and a typical weight of 0.1 in
steps of ~5e-4, while AdamW's per-step update is ~1e-4. So nearly every update rounds back to
the old value: LayerNorm weights stay exactly 1.0, ~92% of the weight elements are unchanged
on a typical step (~80% never change at all), and the loss barely moves although the gradients
are finite and non-zero. Reproduces seed 002 (first attempt: "Parameters in BFloat16 ... Norms
completely frozen (all still 1.0)"); catalog `update-underflow`, `bf16-master-weights`,
`frozen-parameters` and `stalled-loss`.

traindoc-expect: update-underflow@0 bf16-master-weights@0 frozen-parameters@0
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 32


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=150, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=16)
    p.add_argument("--d-model", type=int, default=32)
    p.add_argument("--n-layers", type=int, default=1)
    p.add_argument("--n-heads", type=int, default=2)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--log-every", type=int, default=15)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


class Block(nn.Module):
    def __init__(self, d: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.n_heads, d // self.n_heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


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


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    corpus = make_corpus(make_chain(gen), 2048, args.seq_len, gen)

    model = TinyLM(VOCAB, args.d_model, args.n_layers, args.n_heads, args.seq_len)
    model = model.to(dtype=torch.bfloat16)  # bf16 everywhere: half the memory
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=args.weight_decay
    )

    def lr_lambda(step: int) -> float:
        if step < args.warmup:
            return (step + 1) / args.warmup
        progress = (step - args.warmup) / max(1, args.steps - args.warmup)
        return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)

    model.train()
    for step in range(args.steps):
        x, y = get_batch(corpus, args.batch_size, gen)
        logits = model(x)
        loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), y.reshape(-1))

        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()

        if step % args.log_every == 0 or step == args.steps - 1:
            print(f"step {step:4d} | loss {loss.item():.4f} | grad norm {grad_norm.item():.3f}"
                  f" | lr {scheduler.get_last_lr()[0]:.2e}")

    ln_w = model.get_parameter("blocks.0.ln1.weight")
    print(f"blocks.0.ln1.weight: mean {ln_w.float().mean().item():.6f}, dtype {ln_w.dtype}")
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
