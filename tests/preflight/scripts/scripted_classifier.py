"""A classifier whose loss is computed inside a TorchScript module (`torch.jit.script` of a
forward that calls F.cross_entropy), as exported-model training code does. TorchScript compiles
F.cross_entropy from torch's own source: a Python wrapper in its place does not compile
("undefined value has_torch_function_variadic"), and the script cannot run at all."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from untouched_check import record


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.body(x), y)


torch.manual_seed(0)
net = torch.jit.script(Net())
opt = torch.optim.Adam(net.parameters(), lr=1e-2)
data_x, data_y = torch.randn(256, 8), torch.randint(0, 4, (256,))
for step in range(100):
    idx = torch.randint(0, 256, (32,))
    loss = net(data_x[idx], data_y[idx])
    opt.zero_grad()
    loss.backward()
    if step < 3:
        record(f"scripted step {step}")
    opt.step()
