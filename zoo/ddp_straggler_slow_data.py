"""DDP where one rank waits on its data: its shard is text that its DataLoader parses per batch.

Each rank reads its own shard (rows rank::world of the table). The job that converted the
shards to tensors failed for shard 1, which was left as CSV lines, so rank 1's Dataset parses
text on every sample while rank 0 indexes a tensor. The model and the batch size are the same
on both ranks; rank 1's forward is no slower, but each of its steps starts late, and DDP's
all-reduce makes rank 0 wait for it every step. Rank 1's own loop waits on its DataLoader for
nearly all of each step (256 rows parsed per batch for a small model): the wait is several times
data-starvation's 10 ms and several times the rest of the step, where the 50% share that
data-starvation asks on a CPU needs it only as long as the rest, so a loaded machine, which
stretches the rest (and traindoc's own sampled steps) too, does not bring it near the bar.
That is data-starvation on that rank, on its own evidence. Two gloo CPU ranks; with plain
`python` it spawns its two ranks itself.

traindoc-expect: straggler-rank data-starvation
"""

import argparse
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, TensorDataset

TEXT_SHARDS = {1}  # shards the conversion job left as CSV text


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--save", type=str, default=None)
    return p.parse_args()


class CsvRows(Dataset):
    """One sample per CSV line: 256 features and the target, parsed on access."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines

    def __len__(self) -> int:
        return len(self.lines)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        values = [float(v) for v in self.lines[i].split(",")]
        return torch.tensor(values[:-1]), torch.tensor(values[-1:])


def load_shard(rank: int, world: int) -> Dataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4096, 256, generator=g)
    y = torch.tanh(x[:, :16].sum(1, keepdim=True) / 4)
    xs, ys = x[rank::world], y[rank::world]
    if rank in TEXT_SHARDS:
        return CsvRows([",".join(f"{v:.6f}" for v in row.tolist()) for row in torch.cat([xs, ys], 1)])
    return TensorDataset(xs, ys)


def worker(rank: int, world: int, args: argparse.Namespace) -> None:
    dist.init_process_group("gloo", rank=rank, world_size=world)
    loader = DataLoader(load_shard(rank, world), batch_size=256, shuffle=False)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(256, 64), nn.ReLU(), nn.Linear(64, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    step = 0
    while step < args.steps:
        for xb, yb in loader:
            loss = F.mse_loss(model(xb), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if rank == 0 and step % 20 == 0:
                print(f"step {step} loss {loss.item():.4f}")
            step += 1
            if step == args.steps:
                break
    if args.save and rank == 0:
        torch.save(model.module.state_dict(), args.save)
    dist.barrier()  # both ranks done before the group goes (gloo can abort at exit otherwise)
    dist.destroy_process_group()


def main() -> None:
    args = get_args()
    if "RANK" in os.environ:  # torchrun
        worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    mp.spawn(worker, args=(2, args), nprocs=2)


if __name__ == "__main__":
    main()
