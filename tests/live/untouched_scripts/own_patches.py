"""A script that monkeypatches torch itself (a counting F.cross_entropy, a clip_grad_norm_
wrapper, torch.save defaulting to a temp folder): each patch of the user's is called, as
without traindoc, and fx's symbolic_trace of a module calling torch functions gives the graph a
bare run gives. Prints the counts, the traced code and the weights."""

import functools
import io

import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F

COUNTS = {"cross_entropy": 0, "clip": 0, "save": 0}
_ce, _clip, _save = F.cross_entropy, torch.nn.utils.clip_grad_norm_, torch.save


@functools.wraps(_ce)
def cross_entropy(*args, **kwargs):
    COUNTS["cross_entropy"] += 1
    return _ce(*args, **kwargs)


def clip_grad_norm_(*args, **kwargs):
    COUNTS["clip"] += 1
    return _clip(*args, **kwargs)


def save(obj, f, *args, **kwargs):
    COUNTS["save"] += 1
    return _save(obj, f, *args, **kwargs)


F.cross_entropy, torch.nn.utils.clip_grad_norm_, torch.save = cross_entropy, clip_grad_norm_, save


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        h = torch.where(x > 0, x, torch.zeros_like(x))
        return torch.nan_to_num(self.fc(h)).masked_fill(x[:, :3] > 5, 0.0)


torch.manual_seed(0)
net = Net()
traced = torch.fx.symbolic_trace(net)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for step in range(15):
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    loss = F.cross_entropy(traced(x), y)
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
    opt.step()
    if step % 5 == 0:
        torch.save(net.state_dict(), io.BytesIO())
print("counts", COUNTS)
print(traced.code.strip())
print("checksum", repr(sum(float(p.detach().double().sum()) for p in net.parameters())))
