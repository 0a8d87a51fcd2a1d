"""nanoGPT-style language model whose accumulation loop lost its `/ accum_steps`: the step sums 4 micro-batches.

The same tiny GPT as healthy_gpt.py (random windows from `get_batch()`, no DataLoader, a
warmup + cosine LR written into the param groups every step), trained with 4 micro-batches per
optimizer step. The line `loss = loss / accum_steps` was deleted while refactoring the logging
(`loss_accum` now divides for the print instead), so each step applies the sum of the four
micro-batch gradients: AdamW hides most of the factor, but `clip_grad_norm_(1.0)` now sees
3-4x the norm of one micro-batch, so the clip threshold means something else than it did.
Catalog `unscaled-grad-accumulation`.

traindoc-expect: unscaled-grad-accumulation@0
"""

import argparse
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=64, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=8, help="micro-batch size")
    p.add_argument("--accum-steps", type=int, default=4, help="micro-batches per optimizer step")
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--min-lr", type=float, default=5e-4)
    p.add_argument("--warmup", type=int, default=6)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--log-every", type=int, default=8)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


@dataclass
class GPTConfig:
    vocab_size: int = 64
    block_size: int = 32
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    dropout: float = 0.0


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.dropout = cfg.dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0
        )
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)])
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying

        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):  # scaled init of the residual projections
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss

    def configure_optimizer(self, lr: float, weight_decay: float) -> torch.optim.AdamW:
        params = {n: p for n, p in self.named_parameters() if p.requires_grad}
        decay = [p for p in params.values() if p.dim() >= 2]
        no_decay = [p for p in params.values() if p.dim() < 2]
        groups = [
            {"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]
        return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95))


def make_stream(vocab: int, n_chains: int = 64, length: int = 256) -> torch.Tensor:
    """Token streams from a sparse random Markov chain: each token has 3 likely successors."""
    logits = torch.full((vocab, vocab), -4.0)
    for t in range(vocab):
        succ = torch.randperm(vocab)[:3]
        logits[t, succ] = torch.tensor([3.0, 2.0, 1.0])
    probs = logits.softmax(dim=1)
    tokens = torch.empty(n_chains, length, dtype=torch.long)
    tokens[:, 0] = torch.randint(0, vocab, (n_chains,))
    for i in range(1, length):
        tokens[:, i] = torch.multinomial(probs[tokens[:, i - 1]], 1).squeeze(1)
    return tokens


def get_batch(data: torch.Tensor, batch_size: int, block_size: int):
    chain = torch.randint(0, data.size(0), (batch_size,))
    start = torch.randint(0, data.size(1) - block_size - 1, (batch_size,))
    offs = start[:, None] + torch.arange(block_size + 1)
    window = data[chain[:, None], offs]
    return window[:, :-1].contiguous(), window[:, 1:].contiguous()


def get_lr(step: int, args: argparse.Namespace) -> float:
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    progress = min(1.0, (step - args.warmup) / max(1, args.steps - args.warmup))
    return args.min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (args.lr - args.min_lr)


@torch.no_grad()
def estimate_loss(model: GPT, data: torch.Tensor, cfg: GPTConfig, iters: int = 4) -> float:
    model.eval()
    losses = [model(*get_batch(data, 32, cfg.block_size))[1].item() for _ in range(iters)]
    model.train()
    return sum(losses) / len(losses)


def main() -> None:
    args = get_args()
    torch.manual_seed(0)

    cfg = GPTConfig()
    data = make_stream(cfg.vocab_size)
    train_data, val_data = data[:56], data[56:]

    model = GPT(cfg)
    optimizer = model.configure_optimizer(args.lr, args.weight_decay)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{n_params / 1e3:.1f}k parameters")

    model.train()
    for step in range(args.steps):
        lr = get_lr(step, args)
        for g in optimizer.param_groups:
            g["lr"] = lr

        loss_accum = 0.0
        for _ in range(args.accum_steps):
            x, y = get_batch(train_data, args.batch_size, cfg.block_size)
            _, loss = model(x, y)
            loss_accum += loss.item() / args.accum_steps
            loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

        if step % args.log_every == 0 or step == args.steps - 1:
            print(
                f"step {step:4d} | loss {loss_accum:.4f} | grad_norm {grad_norm.item():.3f}"
                f" | lr {lr:.2e}"
            )

    print(f"val loss {estimate_loss(model, val_data, cfg):.4f}")

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
