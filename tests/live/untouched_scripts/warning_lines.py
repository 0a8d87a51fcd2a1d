"""A warning torch raises from C++ inside an op the script calls names the innermost Python
frame: on a sampled step that was the op mode's handler, between the script and torch. Each
warning must name the script's line, once per line, as without traindoc, whether its first
call falls on a sampled step or not. Prints each warning shown (file, line, category) and the
weights."""

import io
import os
import re
import sys
import warnings

import numpy as np
import torch

warnings.simplefilter("default")  # the test runs with PYTHONWARNINGS=ignore; once per line
torch.manual_seed(0)
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
shown, stderr = io.StringIO(), sys.stderr
sys.stderr = shown  # where warnings are written (read at each warning)
try:
    for step in range(40):
        rows = [np.full(4, step / 40, dtype="float32") + i for i in range(8)]
        x = torch.tensor(rows)  # a list of arrays: torch warns once a process that it is slow
        y = torch.tensor(torch.arange(8) % 2)  # a tensor copied: torch recommends clone()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
finally:
    sys.stderr = stderr
lines = re.findall(r"^(\S+?):(\d+): (\w+Warning):", shown.getvalue(), re.M)
print("warnings", [(os.path.basename(f), int(n), c) for f, n, c in lines])
print("checksum", int(sum(p.double().sum() for p in model.parameters()).item() * 1e6))
