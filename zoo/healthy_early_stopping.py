"""Early stopping on a validation plateau, long before a 60-epoch cosine schedule ends.

A small regression model overfits a tiny training set; the script evaluates every epoch and
stops after three epochs without a new best validation loss (the usual patience rule), with a
CosineAnnealingLR sized for 60 epochs. Stopping early is the script's decision here: traindoc
says the schedule was cut short, as info, and warns about nothing.

traindoc-expect:
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=60)
    p.add_argument("--patience", type=int, default=3)
    p.add_argument("--save", default="")
    args = p.parse_args()
    torch.manual_seed(0)
    w = torch.randn(16, 1)
    x_train, x_val = torch.randn(48, 16), torch.randn(256, 16)
    y_train = x_train @ w + 1.0 * torch.randn(48, 1)  # few, noisy samples: overfits fast
    y_val = x_val @ w + 1.0 * torch.randn(256, 1)
    model = nn.Sequential(nn.Linear(16, 256), nn.ReLU(), nn.Linear(256, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.epochs)
    best, bad_epochs, best_state = float("inf"), 0, None
    for epoch in range(args.epochs):
        model.train()
        for i in range(0, 48, 16):
            loss = F.mse_loss(model(x_train[i:i + 16]), y_train[i:i + 16])
            opt.zero_grad()
            loss.backward()
            opt.step()
        sched.step()
        model.eval()
        with torch.no_grad():
            val = F.mse_loss(model(x_val), y_val).item()
        print(f"epoch {epoch} train_loss {loss.item():.4f} val_loss {val:.4f}")
        if val < best:
            best, bad_epochs = val, 0
            best_state = {k: v.clone() for k, v in model.state_dict().items()}
        else:
            bad_epochs += 1
            if bad_epochs >= args.patience:
                print(f"early stopping at epoch {epoch}: best val_loss {best:.4f}")
                break
    if best_state is not None:
        model.load_state_dict(best_state)
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
