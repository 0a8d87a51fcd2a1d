"""Mixed precision that never happens: the forward runs before the autocast block.

The script has every piece of an fp16 AMP loop (a torch.amp.GradScaler, a
`with torch.autocast(...)` block), but the model's forward is called above the block and only
the loss is computed inside it. The Linear layers therefore run in float32: training is correct,
just as slow and memory-hungry as without AMP. traindoc reports it as autocast-bypassed, an
info finding (no warning or error is expected). CPU autocast/GradScaler stand in for CUDA's.

traindoc-expect:
"""

import argparse
import math

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


def make_data(n: int, in_dim: int, n_classes: int):
    w = torch.randn(in_dim, n_classes) / math.sqrt(in_dim)
    x = torch.randn(n, in_dim)
    y = (3.0 * x @ w + 0.3 * torch.randn(n, n_classes)).argmax(dim=1)
    return x, y


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    device_type = "cpu"  # "cuda" on a GPU

    x, y = make_data(4096, 16, 4)
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True, drop_last=True)
    model = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 4))
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    scaler = torch.amp.GradScaler(device_type)

    step = 0
    while step < args.steps:
        for xb, yb in loader:
            logits = model(xb)  # BUG: outside the autocast block, so it runs in float32
            with torch.autocast(device_type, dtype=torch.float16):
                loss = criterion(logits, yb)

            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()

            if step % args.log_every == 0 or step == args.steps - 1:
                print(f"step {step:4d} | loss {loss.item():.4f} | logits {logits.dtype}")
            step += 1
            if step >= args.steps:
                break

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
