"""A classifier whose logits are a tensor subclass with its own `__torch_function__` (a
logging or quantization wrapper, as torchao's and the docs' examples are), checkpointing and
resuming by itself. Each training step calls F.cross_entropy and Tensor.backward once: the
subclass must see each once, as without traindoc, and preflight must measure the loss once
(a wrapper on Tensor.backward is reached twice through the subclass's dispatch)."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

from untouched_check import record

SEEN = {"cross_entropy": 0, "backward": 0}


class Logged(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in SEEN:
            SEEN[name] += 1
        return super().__torch_function__(func, types, args, kwargs or {})


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
data_x, data_y = torch.randn(256, 8), torch.randint(0, 4, (256,))
start = 0
if os.path.exists("last.pt"):
    ck = torch.load("last.pt")
    model.load_state_dict(ck["model"])
    opt.load_state_dict(ck["optimizer"])
    torch.set_rng_state(ck["rng"])
    start = ck["step"]
for step in range(start, 100):
    idx = torch.randint(0, 256, (32,))
    logits = model(data_x[idx]).as_subclass(Logged)
    loss = F.cross_entropy(logits, data_y[idx])
    opt.zero_grad()
    loss.backward()
    assert SEEN == {"cross_entropy": step - start + 1, "backward": step - start + 1}, SEEN
    if step - start < 3:
        record(f"subclass step {step}")
    opt.step()
    if step % 10 == 9:
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step + 1,
                    "rng": torch.get_rng_state()}, "last.pt")
