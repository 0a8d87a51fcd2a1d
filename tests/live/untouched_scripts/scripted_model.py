"""TorchScript users: a scripted module whose forward calls F.cross_entropy, torch.where and
torch.nan_to_num, a scripted function, and torch.distributed.optim (scripted at import) driving
training through ZeroRedundancyOptimizer on a one-rank gloo group. Prints the final weights'
checksum: the same under `traindoc run` as under `python`."""

import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.distributed.optim  # scripts its functional optimizers at import
import torch.nn as nn
import torch.nn.functional as F


class Scored(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = torch.where(torch.isfinite(x), x, torch.zeros_like(x))
        logits = torch.nan_to_num(self.fc(logits))
        return F.cross_entropy(logits, y)


@torch.jit.script
def scale(x: torch.Tensor) -> torch.Tensor:
    return torch.nan_to_num(torch.where(x > 0, x, -x)) * 0.5


def main() -> None:
    torch.manual_seed(0)
    store = tempfile.mktemp()
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    model = torch.jit.script(Scored())
    opt = torch.distributed.optim.ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.SGD, lr=0.1)
    for _ in range(12):
        x, y = torch.randn(16, 6), torch.randint(0, 3, (16,))
        loss = model(scale(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()
    os.path.exists(store) and os.remove(store)
    print("checksum", repr(sum(float(p.detach().double().sum()) for p in model.parameters())))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
