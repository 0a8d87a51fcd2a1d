"""Healthy Muon + AdamW split: Muon for 2-D hidden weights, AdamW for everything else.

The modern "two optimizers" recipe (modded-nanoGPT style) on a small tabular model with
categorical embeddings: torch.optim.Muon at lr 0.02 (its usual range, far above AdamW's) takes
the 2-D weight matrices of the hidden layers, and AdamW at lr 3e-3 takes the embeddings, biases,
LayerNorm weights and the output head (Muon only makes sense for hidden matrices; its
Newton-Schulz step runs in bf16, so the hidden width is kept small for CPU). Both are
stepped and zeroed every iteration, and share one warmup-free linear-decay LR multiplier.

traindoc-expect:
"""

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=120, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--muon-lr", type=float, default=0.02)
    p.add_argument("--adam-lr", type=float, default=3e-3)
    p.add_argument("--log-every", type=int, default=15)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


N_CAT, CAT_VOCAB, N_NUM, N_CLASSES = 4, 16, 16, 6


class TabularNet(nn.Module):
    def __init__(self, emb_dim: int = 16, hidden: int = 64) -> None:
        super().__init__()
        self.embeddings = nn.ModuleList(nn.Embedding(CAT_VOCAB, emb_dim) for _ in range(N_CAT))
        in_dim = N_CAT * emb_dim + N_NUM
        self.fc1 = nn.Linear(in_dim, hidden)
        self.norm1 = nn.LayerNorm(hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.norm2 = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, N_CLASSES)

    def forward(self, cats: torch.Tensor, nums: torch.Tensor) -> torch.Tensor:
        emb = [e(cats[:, i]) for i, e in enumerate(self.embeddings)]
        x = torch.cat(emb + [nums], dim=1)
        x = F.gelu(self.norm1(self.fc1(x)))
        x = F.gelu(self.norm2(self.fc2(x)))
        return self.head(x)


def make_data(n: int):
    """Class scores from per-category lookup tables plus a linear map of the numeric features."""
    tables = torch.randn(N_CAT, CAT_VOCAB, N_CLASSES)
    w = torch.randn(N_NUM, N_CLASSES) / math.sqrt(N_NUM)
    cats = torch.randint(0, CAT_VOCAB, (n, N_CAT))
    nums = torch.randn(n, N_NUM)
    scores = sum(tables[i][cats[:, i]] for i in range(N_CAT)) + 2.0 * nums @ w
    y = (scores + 0.5 * torch.randn(n, N_CLASSES)).argmax(dim=1)
    return cats, nums, y


def main() -> None:
    args = get_args()
    torch.manual_seed(0)

    cats, nums, y = make_data(8192)
    n_train = 7168
    model = TabularNet()

    hidden_matrices = [model.fc1.weight, model.fc2.weight]
    hidden_ids = {id(p) for p in hidden_matrices}
    others = [p for p in model.parameters() if id(p) not in hidden_ids]
    muon = torch.optim.Muon(hidden_matrices, lr=args.muon_lr, momentum=0.95, weight_decay=0.01)
    adamw = torch.optim.AdamW(others, lr=args.adam_lr, betas=(0.9, 0.95), weight_decay=0.0)
    optimizers = [muon, adamw]
    base_lrs = [args.muon_lr, args.adam_lr]

    model.train()
    for step in range(args.steps):
        frac = 1.0 - 0.9 * step / args.steps  # linear decay to 10%
        for opt, base in zip(optimizers, base_lrs):
            for g in opt.param_groups:
                g["lr"] = base * frac

        idx = torch.randint(0, n_train, (args.batch_size,))
        logits = model(cats[idx], nums[idx])
        loss = F.cross_entropy(logits, y[idx])

        for opt in optimizers:
            opt.zero_grad(set_to_none=True)
        loss.backward()
        for opt in optimizers:
            opt.step()

        if step % args.log_every == 0 or step == args.steps - 1:
            muon_lr = muon.param_groups[0]["lr"]
            print(f"step {step:4d} | loss {loss.item():.4f} | muon lr {muon_lr:.4f}")

    model.eval()
    with torch.no_grad():
        val_logits = model(cats[n_train:], nums[n_train:])
        val_loss = F.cross_entropy(val_logits, y[n_train:]).item()
        val_acc = (val_logits.argmax(1) == y[n_train:]).float().mean().item()
    print(f"val loss {val_loss:.4f} | val acc {val_acc:.3f}")

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
