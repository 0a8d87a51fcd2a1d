"""A character-level language model trained with micro-steps: the loss of each micro-batch is
divided by their count, gradients are clipped after unscaling, the LR follows a warmup and a
cosine decay computed by hand, and the checkpoint is written to a temporary file first."""

import argparse
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F


class CharLM(nn.Module):
    def __init__(self, vocab: int, width: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        block = nn.TransformerEncoderLayer(width, nhead=4, dim_feedforward=4 * width, batch_first=True)
        self.body = nn.TransformerEncoder(block, layers)
        self.head = nn.Linear(width, vocab)

    def forward(self, idx):
        size = idx.shape[1]
        causal = torch.triu(torch.ones(size, size, dtype=torch.bool, device=idx.device), 1)
        return self.head(self.body(self.embed(idx), mask=causal))


def lr_at(it, base, warmup, total):
    if it < warmup:
        return base * (it + 1) / warmup
    progress = min(1.0, (it - warmup) / max(1, total - warmup))
    return 0.1 * base + 0.45 * base * (1 + math.cos(math.pi * progress))


def sample_batch(text, block, rows, device):
    starts = torch.randint(len(text) - block - 1, (rows,))
    x = torch.stack([text[s:s + block] for s in starts]).to(device)
    y = torch.stack([text[s + 1:s + block + 1] for s in starts]).to(device)
    return x, y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="input.txt")
    ap.add_argument("--iters", type=int, default=3000)
    ap.add_argument("--micro", type=int, default=4)
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--out", default="ckpt")
    args = ap.parse_args()

    device = "cuda" if torch.cuda.is_available() else "cpu"
    raw = open(args.data, encoding="utf-8").read()
    chars = sorted(set(raw))
    text = torch.tensor([chars.index(c) for c in raw], dtype=torch.long)
    model = CharLM(len(chars), 256, 4).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    scaler = torch.amp.GradScaler(device, enabled=device == "cuda")

    for it in range(args.iters):
        for group in opt.param_groups:
            group["lr"] = lr_at(it, args.lr, 100, args.iters)
        model.train()
        for _ in range(args.micro):
            x, y = sample_batch(text, 128, 16, device)
            with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
                logits = model(x)
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
            scaler.scale(loss / args.micro).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)

        if it % 500 == 0:
            model.eval()
            with torch.no_grad():
                x, y = sample_batch(text, 128, 16, device)
                val = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
            print(f"iter {it} train {loss.item():.3f} val {val.item():.3f}")
            os.makedirs(args.out, exist_ok=True)
            state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "scaler": scaler.state_dict(),
                     "iter": it, "rng": torch.get_rng_state(), "chars": chars}
            path = os.path.join(args.out, "last.pt")
            torch.save(state, path + ".tmp")
            os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()
