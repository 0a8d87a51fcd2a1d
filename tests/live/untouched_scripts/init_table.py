"""A tensor subclass whose ``__torch_function__`` table takes over ``torch.nn.init`` (each shard
of a weight drawn from its own seeded generator, whatever the order of the calls), filled at
import: the model is built with it, and its head is drawn again halfway through training (a
classifier reset). Under `traindoc run` both inits reach the user's handlers, as without
traindoc. Prints the handlers' call counts and the final weights."""

import torch
import torch.nn as nn
import torch.nn.functional as F

HANDLED = {}
CALLS = {"kaiming_uniform_": 0, "normal_": 0}


class Sharded(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        handler = HANDLED.get(func)
        if handler is not None:
            return handler(*args, **kwargs)
        return super().__torch_function__(func, types, args, kwargs)


def _rows(tensor, draw):
    with torch._C.DisableTorchFunctionSubclass(), torch.no_grad():
        for i in range(tensor.shape[0]):
            tensor[i].copy_(draw(torch.Generator().manual_seed(1000 + i), tensor.shape[1:]))
    return tensor


def _kaiming(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    CALLS["kaiming_uniform_"] += 1
    bound = 1 / tensor.shape[1] ** 0.5
    return _rows(tensor, lambda g, shape: (torch.rand(shape, generator=g) * 2 - 1) * bound)


def _normal(tensor, mean=0.0, std=1.0, generator=None):
    CALLS["normal_"] += 1
    return _rows(tensor, lambda g, shape: torch.randn(shape, generator=g) * std + mean)


HANDLED[nn.init.kaiming_uniform_] = _kaiming
HANDLED[nn.init.normal_] = _normal


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(6, 16)
        self.head = nn.Linear(16, 3)
        for layer in (self.body, self.head):
            nn.init.kaiming_uniform_(layer.weight.data.as_subclass(Sharded), a=5 ** 0.5)

    def forward(self, x):
        return self.head(torch.relu(self.body(x)))


torch.manual_seed(0)
model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(20):
    if step == 10:
        nn.init.normal_(model.head.weight.data.as_subclass(Sharded), std=0.01)
    x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("calls", CALLS, "checksum", repr(float(sum(p.detach().double().sum() for p in model.parameters()))))
