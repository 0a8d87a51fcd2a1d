"""Mixed precision by hand: an fp32 master model steps, a bf16 working copy computes, the healthy twin.

The optimizer (AdamW) holds the fp32 master weights. Each step the bf16 working copy runs the
forward and backward, its gradients are copied into the masters' ``.grad`` as fp32, the
optimizer steps and clears the masters, the working copy's gradients are set to None, and the
new master weights are copied back into the working copy. The twin of
bf16_working_copy_no_zero_grad.

traindoc-expect:
"""

from __future__ import annotations

import argparse
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--save", default="")
    args = p.parse_args()
    torch.manual_seed(0)
    x = torch.randn(1024, 16)
    y = (x[:, :4].sum(1) > 0).long() + 2 * (x[:, 4:8].sum(1) > 0).long()
    master = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    work = copy.deepcopy(master).to(torch.bfloat16)
    optimizer = torch.optim.AdamW(master.parameters(), lr=args.lr, weight_decay=0.01)
    for step in range(args.steps):
        idx = torch.randint(0, len(x), (64,))
        logits = work(x[idx].to(torch.bfloat16))
        loss = F.cross_entropy(logits.float(), y[idx])
        loss.backward()
        for m, w in zip(master.parameters(), work.parameters()):
            m.grad = w.grad.float()
        optimizer.step()
        optimizer.zero_grad()
        work.zero_grad(set_to_none=True)
        with torch.no_grad():
            for m, w in zip(master.parameters(), work.parameters()):
                w.copy_(m)
        if step % 20 == 0:
            print(f"step {step} loss {loss.item():.4f}")
    if args.save:
        torch.save(master.state_dict(), args.save)


if __name__ == "__main__":
    main()
