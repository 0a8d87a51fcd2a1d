"""Healthy bf16 mixed precision: fp32 parameters, torch.autocast(bfloat16) around the forward.

The correct twin of "cast the model to bf16": parameters, gradients and AdamW state stay in fp32
(the master weights), only the forward runs under torch.autocast("cpu", dtype=torch.bfloat16),
so matmuls produce bf16 activations while the loss is computed in fp32 outside the autocast
region. bf16 needs no GradScaler. The model is tiny (hidden 32) because bf16 matmuls are slow
on CPU.

traindoc-expect:
"""

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=150, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--log-every", type=int, default=15)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


class Net(nn.Module):
    def __init__(self, in_dim: int, hidden: int, n_classes: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(in_dim, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.gelu(self.norm(self.fc1(x)))
        x = F.gelu(self.fc2(x))
        return self.out(x)


def make_data(n: int, in_dim: int, n_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Labels from a random linear teacher on the inputs, with a little logit noise."""
    w = torch.randn(in_dim, n_classes) / math.sqrt(in_dim)
    x = torch.randn(n, in_dim)
    y = (3.0 * x @ w + 0.3 * torch.randn(n, n_classes)).argmax(dim=1)
    return x, y


def main() -> None:
    args = get_args()
    torch.manual_seed(0)

    in_dim, n_classes = 16, 4
    x, y = make_data(4096, in_dim, n_classes)
    x_train, y_train, x_val, y_val = x[:3584], y[:3584], x[3584:], y[3584:]

    model = Net(in_dim, 32, n_classes)  # parameters stay fp32
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)

    model.train()
    for step in range(args.steps):
        idx = torch.randint(0, x_train.size(0), (args.batch_size,))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(x_train[idx])  # bf16 activations
        loss = F.cross_entropy(logits.float(), y_train[idx])

        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

        if step % args.log_every == 0 or step == args.steps - 1:
            print(f"step {step:4d} | loss {loss.item():.4f} | logits dtype {logits.dtype}")

    model.eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        val_logits = model(x_val).float()
    val_loss = F.cross_entropy(val_logits, y_val).item()
    val_acc = (val_logits.argmax(1) == y_val).float().mean().item()
    print(f"val loss {val_loss:.4f} | val acc {val_acc:.3f}")

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
