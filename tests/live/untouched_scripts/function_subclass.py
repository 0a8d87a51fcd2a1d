"""A tensor subclass with the documented ``__torch_function__`` table, filled at import (under
`traindoc run`, after traindoc started): torch.nan_to_num and torch.where go to the user's own
handlers, as without traindoc. Prints the handlers' call counts and the final weights."""

import torch
import torch.nn.functional as F

HANDLED_FUNCTIONS = {}
CALLS = {"nan_to_num": 0, "where": 0}


class Logged(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in HANDLED_FUNCTIONS:
            return HANDLED_FUNCTIONS[func](*args, **kwargs)
        return super().__torch_function__(func, types, args, kwargs)


def implements(fn):
    def register(handler):
        HANDLED_FUNCTIONS[fn] = handler
        return handler
    return register


@implements(torch.nan_to_num)
def _nan_to_num(x, *args, **kwargs):
    CALLS["nan_to_num"] += 1
    with torch._C.DisableTorchFunctionSubclass():
        return torch.nan_to_num(x, *args, **kwargs) * 1.0


@implements(torch.where)
def _where(cond, x, y):
    CALLS["where"] += 1
    with torch._C.DisableTorchFunctionSubclass():
        return torch.where(cond, x, y)


torch.manual_seed(0)
w = torch.randn(5, 3, requires_grad=True)
opt = torch.optim.SGD([w], lr=0.1)
for _ in range(20):
    x, y = torch.randn(8, 5), torch.randint(0, 3, (8,))
    logits = (x @ w).as_subclass(Logged)
    logits = torch.where(logits > -100, torch.nan_to_num(logits), logits)
    loss = F.cross_entropy(logits.as_subclass(torch.Tensor), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("calls", CALLS, "checksum", repr(float(w.detach().double().sum())))
