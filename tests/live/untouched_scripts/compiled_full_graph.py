"""torch.compile(fullgraph=True): dynamo compiles as many graphs, as often, as in a bare run
(traindoc's sampled-step hooks and its op-level mode stay off a compiled model). Prints dynamo's
counters and the weights."""

import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
compiled = torch.compile(model, fullgraph=True)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(40):
    x, y = torch.randn(16, 8), torch.randint(0, 4, (16,))
    loss = F.cross_entropy(compiled(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step in (10, 30):  # evaluation of the compiled model under no_grad
        with torch.no_grad():
            compiled(torch.randn(4, 8))
print("graphs", dict(counters["stats"]), "recompiles", sum(counters["recompiles"].values()))
print("checksum", repr(sum(float(p.detach().double().sum()) for p in model.parameters())))
