"""DeepSpeed regression on raw house prices: its clipping scales every update by ~1/1000.

Written the way DeepSpeed's examples are: a JSON-style ``ds_config`` dict (batch size, the
optimizer, ``gradient_clipping``), ``deepspeed.initialize`` building the engine, the optimizer
and the data loader from a Dataset, then ``engine(x)``, ``engine.backward(loss)`` and
``engine.step()``. DeepSpeed clips inside ``engine.step()`` with its own ``clip_grad_norm_``;
the script never calls torch's.

The bug: the targets are raw prices (hundreds of thousands) while the inputs are standardized,
so the MSE gradient norm is ~1e6 and ``gradient_clipping: 1.0`` clips every step by that factor:
the model crawls toward prices it cannot reach at this LR, and nothing in the loss curve says
why. The gradient norm itself, far above the parameters' norm from the first step, is
exploding-gradients' evidence. Standardizing the targets (``--fixed``, the twin
`healthy_deepspeed_regression.py`) gives gradients near 1 that are rarely clipped. Catalog
`clipping-every-step`, `exploding-gradients`.

Runs as one process here; ``deepspeed train.py`` sets the same rendezvous variables.

traindoc-expect: clipping-every-step@0 exploding-gradients@0
"""

from __future__ import annotations

import argparse
import os
import socket

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import TensorDataset

import deepspeed


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def houses(n: int, standardize_targets: bool) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 8, generator=g)  # standardized features: area, rooms, age ...
    price = 250_000 + 60_000 * x[:, 0] + 25_000 * x[:, 1] - 15_000 * x[:, 2] + 5_000 * torch.randn(n, generator=g)
    y = (price - price.mean()) / price.std() if standardize_targets else price
    return TensorDataset(x, y.unsqueeze(1))


def main(fixed: bool = False) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=-1)  # the deepspeed launcher passes it
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--fixed", action="store_true")
    parser.add_argument("--zero-stage", type=int, default=0, choices=(0, 1, 2, 3))
    parser.add_argument("--bf16", action="store_true", help="bf16 weights, fp32 master copies")
    parser.add_argument("--save", default=None, help="write the model's state_dict here")
    args = parser.parse_args()
    fixed = fixed or args.fixed
    for key, value in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", str(free_port())),
                       ("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1")):
        os.environ.setdefault(key, value)
    torch.manual_seed(0)

    ds_config = {
        "train_micro_batch_size_per_gpu": 32,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": 1.0,
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.01, "torch_adam": True}},
        "steps_per_print": 1_000_000,
        "zero_optimization": {"stage": args.zero_stage},
        "bf16": {"enabled": args.bf16},
    }
    model = nn.Sequential(nn.Linear(8, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 1))
    engine, _, loader, _ = deepspeed.initialize(
        model=model, model_parameters=model.parameters(), training_data=houses(1024, fixed), config=ds_config)

    dtype = torch.bfloat16 if args.bf16 else torch.float32
    for epoch in range(args.epochs):
        loader.data_sampler.set_epoch(epoch)  # DeepSpeed's loader reshuffles only when told to
        for x, y in loader:
            loss = F.mse_loss(engine(x.to(dtype)).float(), y)
            engine.backward(loss)
            engine.step()
        print(f"epoch {epoch}: loss {loss.item():.4g}")
    if args.save:
        torch.save(engine.module.state_dict(), args.save)


if __name__ == "__main__":
    main()
