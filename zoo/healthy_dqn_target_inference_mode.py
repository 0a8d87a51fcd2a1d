"""DQN on a corridor MDP whose bootstrap targets come from the online network under inference_mode: healthy.

An agent on an 8-cell corridor (one-hot state, actions left/right, reward 1 at the right end
plus 0.1 per cell gained, gamma 0.9) learns Q-values with a small MLP, a replay buffer and epsilon-greedy acting. There is
no separate target network: the bootstrap target r + gamma * max_a Q(s', a) is computed by the
online network itself inside `torch.inference_mode()` (and cloned, since smooth_l1_loss saves
its target for backward), and actions are chosen under inference_mode too. The network, which
the optimizer trains, does run under inference_mode during the step, but it also runs with
gradients for Q(s, a), so every parameter gets its gradient: no finding. The greedy policy walks
right from every cell after training.

traindoc-expect:
"""

from __future__ import annotations

import argparse
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

N_CELLS, N_ACTIONS = 8, 2


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300, help="environment steps (one update each)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--gamma", type=float, default=0.9)
    p.add_argument("--save", type=str, default=None, help="write q_net.state_dict() here")
    return p.parse_args()


def one_hot(cell: int) -> torch.Tensor:
    s = torch.zeros(N_CELLS)
    s[cell] = 1.0
    return s


def env_step(cell: int, action: int) -> tuple[int, float, bool]:
    nxt = max(0, min(N_CELLS - 1, cell + (1 if action == 1 else -1)))
    done = nxt == N_CELLS - 1
    return nxt, float(done) + 0.1 * (nxt - cell), done  # +0.1 per cell gained: a dense signal


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    rng = random.Random(0)
    q_net = nn.Sequential(nn.Linear(N_CELLS, 32), nn.ReLU(), nn.Linear(32, N_ACTIONS))
    optimizer = torch.optim.Adam(q_net.parameters(), lr=args.lr)
    buffer: list[tuple[torch.Tensor, int, float, torch.Tensor, float]] = []
    cell, episode_return, returns = 0, 0.0, []

    for step in range(args.steps):
        eps = max(0.05, 1.0 - step / 150)
        if rng.random() < eps:
            action = rng.randrange(N_ACTIONS)
        else:
            with torch.inference_mode():
                action = int(q_net(one_hot(cell)).argmax())
        nxt, reward, done = env_step(cell, action)
        buffer.append((one_hot(cell), action, reward, one_hot(nxt), float(done)))
        episode_return += reward
        cell = 0 if done else nxt
        if done:
            returns.append(episode_return)
            episode_return = 0.0

        batch = [buffer[rng.randrange(len(buffer))] for _ in range(args.batch_size)]
        s = torch.stack([b[0] for b in batch])
        a = torch.tensor([b[1] for b in batch])
        r = torch.tensor([b[2] for b in batch])
        s2 = torch.stack([b[3] for b in batch])
        d = torch.tensor([b[4] for b in batch])
        with torch.inference_mode():
            target = r + args.gamma * q_net(s2).max(dim=1).values * (1 - d)
        q = q_net(s).gather(1, a[:, None]).squeeze(1)
        loss = F.smooth_l1_loss(q, target.clone())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 60 == 0 or step == args.steps - 1:
            print(f"step {step:4d} | td loss {loss.item():.4f} | episodes {len(returns)} | eps {eps:.2f}")

    with torch.no_grad():
        greedy = q_net(torch.eye(N_CELLS)).argmax(dim=1).tolist()
    print("greedy actions per cell:", greedy)
    if args.save:
        torch.save(q_net.state_dict(), args.save)


if __name__ == "__main__":
    main()
