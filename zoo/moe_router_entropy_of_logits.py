"""MoE token classifier whose logged router entropy treats raw gate logits as log-probabilities.

A small sequence model (embedding, one top-2 mixture-of-experts feed-forward block of 4
experts, mean pooling, a linear head) learns a 4-class task on random token sequences (the
most frequent token residue mod 4). A `log_moe_stats` helper in the style of MoE trainers
writes router statistics to TensorBoard every 10 steps: `router/top1_frac` (the busiest expert's share of tokens, right) and
`router/entropy`, computed with an entropy helper written for log-probabilities,
`-(l * l.exp()).sum(-1)`, that is handed the raw gate logits. The logits are not log-probs
(they do not log-sum-exp to 0), so the "entropy" is negative from its first value on (about
-1.3, down to -1.6): any alert on low router entropy fires on nonsense, and a real collapse
would be hidden. The routing itself stays balanced. Catalog `metric-out-of-range` (seed 000's
router metrics, in another logger and formula).

traindoc-expect: metric-out-of-range
"""

from __future__ import annotations

import argparse
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.tensorboard import SummaryWriter


def entropy_of(logprobs: torch.Tensor) -> torch.Tensor:
    return -(logprobs * logprobs.exp()).sum(-1)


class MoEFeedForward(nn.Module):
    def __init__(self, d_model: int, n_experts: int, top_k: int = 2) -> None:
        super().__init__()
        self.top_k = top_k
        self.gate = nn.Linear(d_model, n_experts, bias=False)
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(d_model, 2 * d_model), nn.GELU(),
                                                   nn.Linear(2 * d_model, d_model)) for _ in range(n_experts))
        self.gate_logits: torch.Tensor | None = None

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        flat = h.reshape(-1, h.shape[-1])
        logits = self.gate(flat)
        self.gate_logits = logits.detach()
        weights, chosen = logits.softmax(-1).topk(self.top_k, dim=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        out = torch.zeros_like(flat)
        for slot in range(self.top_k):
            for e, expert in enumerate(self.experts):
                rows = chosen[:, slot] == e
                if rows.any():
                    out[rows] += weights[rows, slot, None] * expert(flat[rows])
        return h + out.reshape(h.shape)


class TokenClassifier(nn.Module):
    def __init__(self, vocab: int, d_model: int, n_experts: int, n_classes: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.moe = MoEFeedForward(d_model, n_experts)
        self.head = nn.Linear(d_model, n_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.moe(self.embed(tokens)).mean(1))


def log_moe_stats(writer: SummaryWriter, moe: MoEFeedForward, step: int, n_experts: int) -> None:
    logits = moe.gate_logits
    assert logits is not None
    top1 = logits.argmax(-1)
    frac = torch.bincount(top1, minlength=n_experts).float() / top1.numel()
    writer.add_scalar("router/top1_frac", frac.max().item(), step)
    writer.add_scalar("router/entropy", entropy_of(logits).mean().item(), step)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--vocab", type=int, default=50)
    p.add_argument("--n-experts", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--logdir", default=None)
    p.add_argument("--save", default=None, help="write model.state_dict() here")
    args = p.parse_args()

    torch.manual_seed(0)
    model = TokenClassifier(args.vocab, 16, args.n_experts, 4)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    writer = SummaryWriter(args.logdir or tempfile.mkdtemp(prefix="moe_entropy_"))
    for step in range(args.steps):
        tokens = torch.randint(0, args.vocab, (64, 12))
        labels = (tokens % 4).mode(dim=1).values  # the most frequent residue decides the class
        loss = F.cross_entropy(model(tokens), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        writer.add_scalar("train/loss", loss.item(), step)
        if step % 10 == 0:
            log_moe_stats(writer, model.moe, step, args.n_experts)
            print(f"step {step} loss {loss.item():.3f}")
    writer.close()
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
