"""Healthy fp16 AMP whose GradScaler skips steps early and mid-run, as it is designed to.

A fault classifier for machine sensor readings, trained with the loop of the PyTorch "Automatic
Mixed Precision" recipe: the forward under torch.autocast(dtype=torch.float16),
`scaler.scale(loss).backward()`, `scaler.unscale_(opt)` then clip_grad_norm_, `scaler.step(opt)`,
`scaler.update()`, `opt.zero_grad()` at the end of the iteration. The scaler starts at
init_scale=2**24 ("let it calibrate"), so the first six steps overflow fp16 and are skipped
while the scale falls to a size that fits; its growth_interval is 30 (scaled down from the
default 2000 with the length of the run), so every 30 clean steps it doubles the scale and
probes for overflow again. Four training records were logged in millivolts instead of volts
(1000x too large): at step 21 a batch that draws one, while the model still misclassifies it,
overflows the scaled gradients, and later growth probes overflow at steps 92 and 136. Each time
the scaler skips that one optimizer step and halves its scale. Nine skipped steps out of 150 is
the GradScaler working: the loss falls from 1.39 to 0.13 and the validation accuracy reaches
0.91. The script prints every step at which the scale dropped and the list of skipped steps.
CPU autocast/GradScaler stand in for the CUDA ones.

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
    p.add_argument("--steps", type=int, default=150, help="iterations (scaler.step calls)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--init-scale", type=float, default=2.0 ** 24)
    p.add_argument("--growth-interval", type=int, default=30)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


class FaultClassifier(nn.Module):
    def __init__(self, n_sensors: int, hidden: int, n_faults: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(n_sensors, hidden), nn.GELU(),
            nn.Linear(hidden, hidden), nn.GELU(),
            nn.Linear(hidden, n_faults),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def make_data(n: int, n_sensors: int, n_faults: int, n_millivolt: int):
    """Readings whose fault label comes from a random linear teacher; a few rows in millivolts."""
    w = torch.randn(n_sensors, n_faults) / math.sqrt(n_sensors)
    x = torch.randn(n, n_sensors)
    y = (3.0 * x @ w + 0.3 * torch.randn(n, n_faults)).argmax(dim=1)
    bad = torch.randperm(n)[:n_millivolt]
    x[bad] *= 1000.0  # logged in the wrong unit; nobody noticed
    return x, y


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    device = "cpu"  # "cuda" on a GPU

    n_sensors, n_faults = 16, 4
    x, y = make_data(4096, n_sensors, n_faults, n_millivolt=4)
    x_train, y_train, x_val, y_val = x[:3584], y[:3584], x[3584:], y[3584:]
    loader = DataLoader(TensorDataset(x_train, y_train), batch_size=args.batch_size, shuffle=True,
                        drop_last=True, generator=torch.Generator().manual_seed(0))

    net = FaultClassifier(n_sensors, 64, n_faults)
    opt = torch.optim.AdamW(net.parameters(), lr=args.lr, weight_decay=0.01)
    scaler = torch.amp.GradScaler(device, init_scale=args.init_scale,
                                growth_interval=args.growth_interval)

    skipped: list[int] = []
    step = 0
    net.train()
    while step < args.steps:
        for xb, yb in loader:
            with torch.autocast(device_type=device, dtype=torch.float16):
                output = net(xb)
                loss = F.cross_entropy(output, yb)

            scale = scaler.get_scale()
            scaler.scale(loss).backward()
            scaler.unscale_(opt)  # so that the clip sees the true gradients
            grad_norm = torch.nn.utils.clip_grad_norm_(net.parameters(), max_norm=args.clip)
            scaler.step(opt)  # skips opt.step() if the gradients hold inf/NaN
            scaler.update()
            opt.zero_grad()  # set_to_none=True here can modestly improve performance

            if scaler.get_scale() < scale:
                skipped.append(step)
                print(f"step {step:4d} | overflow, step skipped"
                      f" | scale {scale:.0f} -> {scaler.get_scale():.0f}")
            elif step % args.log_every == 0 or step == args.steps - 1:
                print(f"step {step:4d} | loss {loss.item():.4f} | grad_norm {grad_norm.item():.3f}"
                      f" | scale {scaler.get_scale():.0f}")
            step += 1
            if step >= args.steps:
                break

    print(f"{len(skipped)} of {args.steps} steps skipped by the GradScaler, at {skipped}")
    net.eval()
    with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.float16):
        logits = net(x_val).float()
    print(f"val loss {F.cross_entropy(logits, y_val).item():.4f}"
          f" | val acc {(logits.argmax(1) == y_val).float().mean().item():.3f}")

    if args.save:
        torch.save(net.state_dict(), args.save)


if __name__ == "__main__":
    main()
