"""A3C whose workers hand their local gradients to the shared model, the healthy twin.

An actor-critic lives in shared memory. Each worker, a process started with the spawn start
method, keeps a local copy, plays a small corridor game with it for a few moves and pushes: the
local copy's gradients cleared, ``backward()`` on it, each shared parameter's ``_grad`` set to
the local one's ``.grad``, the shared optimizer's ``step()``, then the local copy pulls the new
weights. The script starts one worker by default, so that the run is reproducible (several
workers step the shared model in whatever order they finish). Each push applies the gradient of
its own moves only. The twin of a3c_local_grads_accumulate; traindoc follows the workers and
finds nothing.

traindoc-expect:
"""

from __future__ import annotations

import argparse

import torch
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

CELLS = 6  # the corridor's length; the goal is its right end


class ActorCritic(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(CELLS, 32)
        self.pi = nn.Linear(32, 2)  # left, right
        self.v = nn.Linear(32, 1)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.tanh(self.body(obs))
        return F.log_softmax(self.pi(h), dim=-1), self.v(h)


def one_hot(cell: int) -> torch.Tensor:
    return F.one_hot(torch.tensor(cell), CELLS).float()


def worker(rank: int, shared: ActorCritic, optimizer: torch.optim.Optimizer, updates: int,
           horizon: int, gamma: float) -> None:
    torch.manual_seed(10 + rank)
    local = ActorCritic()
    local.load_state_dict(shared.state_dict())
    cell, returns = 0, []
    for update in range(updates):
        logps, values, rewards = [], [], []
        for _ in range(horizon):
            logp, value = local(one_hot(cell))
            action = int(torch.multinomial(logp.exp(), 1))
            cell = max(0, cell + (1 if action == 1 else -1))
            done = cell == CELLS - 1
            logps.append(logp[action])
            values.append(value.squeeze())
            rewards.append(1.0 if done else -0.05)
            if done:
                cell = 0
                break
        with torch.no_grad():
            target = 0.0 if done else float(local(one_hot(cell))[1])
        loss = torch.zeros(())
        for logp, value, reward in zip(reversed(logps), reversed(values), reversed(rewards)):
            target = reward + gamma * target
            advantage = target - value
            loss = loss - logp * advantage.detach() + 0.5 * advantage.pow(2)
        local.zero_grad()
        loss.backward()
        for g, l in zip(shared.parameters(), local.parameters()):
            g._grad = l.grad
        optimizer.step()
        local.load_state_dict(shared.state_dict())
        returns.append(sum(rewards))
        if update % 20 == 0:
            print(f"worker {rank} update {update} mean return {sum(returns[-20:]) / len(returns[-20:]):.3f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--updates", type=int, default=60)
    p.add_argument("--horizon", type=int, default=5)
    p.add_argument("--gamma", type=float, default=0.95)
    p.add_argument("--save", default="")
    args = p.parse_args()
    torch.manual_seed(0)
    shared = ActorCritic()
    shared.share_memory()
    optimizer = torch.optim.Adam(shared.parameters(), lr=0.002)
    ctx = mp.get_context("spawn")
    workers = [ctx.Process(target=worker, args=(rank, shared, optimizer, args.updates, args.horizon, args.gamma))
               for rank in range(args.workers)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if args.save:
        torch.save(shared.state_dict(), args.save)


if __name__ == "__main__":
    main()
