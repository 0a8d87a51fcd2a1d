"""Healthy GRU sequence classifier: Adam, clip_grad_norm_ at 5.0, StepLR per epoch.

The classic epoch-based recurrent-model loop: noisy 1-D signals (sinusoids whose frequency is
the class, with random phase, amplitude and noise) go through a batch_first GRU whose
last hidden state feeds a linear head. Adam at 1e-2, gradient clipping at 5.0 (the usual RNN
safety net, which a healthy run should rarely hit), a StepLR halving the LR every 2 epochs
(scheduler.step() once per epoch, after the epoch's optimizer steps), and a validation pass
after each epoch.

traindoc-expect:
"""

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=128, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--clip", type=float, default=5.0)
    p.add_argument("--log-every", type=int, default=16)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


class GRUClassifier(nn.Module):
    def __init__(self, in_dim: int, hidden: int, n_classes: int, num_layers: int = 1) -> None:
        super().__init__()
        self.gru = nn.GRU(in_dim, hidden, num_layers=num_layers, batch_first=True)
        self.head = nn.Linear(hidden, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, h_n = self.gru(x)  # h_n: (num_layers, batch, hidden)
        return self.head(h_n[-1])


def make_signals(n: int, n_classes: int, length: int):
    """Class k is a sinusoid of frequency (k + 1) cycles per window, plus noise."""
    y = torch.randint(0, n_classes, (n,))
    t = torch.linspace(0.0, 1.0, length)
    phase = 2 * math.pi * torch.rand(n, 1)
    amp = 0.5 + torch.rand(n, 1)
    freq = (y + 1).float().unsqueeze(1)
    x = amp * torch.sin(2 * math.pi * freq * t + phase) + 0.3 * torch.randn(n, length)
    return x.unsqueeze(-1), y  # (n, length, 1)


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    model.eval()
    logits = model(x)
    model.train()
    return F.cross_entropy(logits, y).item(), (logits.argmax(1) == y).float().mean().item()


def main() -> None:
    args = get_args()
    torch.manual_seed(0)

    n_classes, length = 5, 16
    x, y = make_signals(1280, n_classes, length)
    x_train, y_train, x_val, y_val = x[:1024], y[:1024], x[1024:], y[1024:]
    loader = DataLoader(
        TensorDataset(x_train, y_train), batch_size=args.batch_size, shuffle=True, num_workers=0
    )

    model = GRUClassifier(1, 32, n_classes)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)

    epochs = math.ceil(args.steps / len(loader))
    step = 0
    model.train()
    for epoch in range(epochs):
        for xb, yb in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            optimizer.step()

            if step % args.log_every == 0:
                print(
                    f"epoch {epoch} step {step:4d} | loss {loss.item():.4f}"
                    f" | grad_norm {grad_norm.item():.3f}"
                )
            step += 1
            if step >= args.steps:
                break
        scheduler.step()
        val_loss, val_acc = evaluate(model, x_val, y_val)
        print(
            f"epoch {epoch} done | last loss {loss.item():.4f} | val loss {val_loss:.4f}"
            f" | val acc {val_acc:.3f} | lr {scheduler.get_last_lr()[0]:.2e}"
        )

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
