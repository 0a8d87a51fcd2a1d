"""Warnings torch issues with stacklevel=2 name the line of the script that called it, as without
traindoc: torch.load's (here the one for TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD, on torch 2.4-2.5 the
FutureWarning of every load without weights_only), and an LR scheduler stepped before its
optimizer. A filter by module (the script's own, ``__main__``) applies to them as bare. Prints
each warning's file, line and category, and the weights."""

import os
import tempfile
import warnings

import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
sched = torch.optim.lr_scheduler.StepLR(opt, 5)
seen = []
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    # A filter for this module's own warnings: matched by the module the warning is located in.
    warnings.filterwarnings("ignore", message=".*lr_scheduler.step.*before.*", module="__main__")
    for step in range(3):
        sched.step()  # before the optimizer's first step: torch warns (filtered above)
        loss = model(torch.randn(8, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ckpt.pt")
        torch.save({"model": model.state_dict(), "step": 3}, path)
        os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"
        state = torch.load(path)  # torch warns that weights_only is forced off: this line
        del os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"]
    seen = [(os.path.basename(w.filename), w.lineno, w.category.__name__) for w in caught]
print("warnings", seen)
model.load_state_dict(state["model"])
print("checksum", int(sum(p.double().sum() for p in model.parameters()).item() * 1e6))
