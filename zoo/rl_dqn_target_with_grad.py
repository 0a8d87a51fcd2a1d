"""DQN whose target network runs with autograd on: every backward also goes through it.

Deep Q-learning on a cart-pole (gym's CartPole-v1, simulated in plain Python) as compact RL
code writes it: a replay buffer (a deque of transitions), epsilon-greedy acting, ten Adam
updates of the Q-network (Linear 4-64-64-2) per episode once the buffer holds 200 transitions,
and a target network, a second instance of the same class, refreshed from the online one with
`load_state_dict` every 10 episodes. The bootstrap target r + gamma * max_a Q_target(s', a) is
computed outside `torch.no_grad()` and the target network's parameters still require grad, so
each backward also runs through the target network and fills its .grad, which no optimizer
uses and nothing clears (its norm grows for the whole run). The online network's update is
unchanged (the target depends on none of its parameters): the run learns, at the price of a
second backward per update. Catalog `target-not-detached`; its twin computes the target under
`torch.no_grad()` (healthy_rl_dqn.py).

traindoc-expect: target-not-detached@0
"""

import argparse
import collections
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

from rl_actor_critic_collapse import CartPole  # gym's CartPole-v1, simulated in plain Python


class QNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(4, 64), nn.Linear(64, 64), nn.Linear(64, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--episodes", type=int, default=100)
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--gamma", type=float, default=0.98)
    p.add_argument("--save", type=str, default=None, help="write the Q-network's state_dict() here")
    return p.parse_args()


def update(q: QNet, q_target: QNet, memory: collections.deque, optimizer: torch.optim.Optimizer,
           gamma: float, rng: random.Random, detach: bool) -> float:
    for _ in range(10):
        batch = rng.sample(list(memory), 32)
        s, a, r, s2, alive = (torch.tensor(col) for col in zip(*batch))
        q_a = q(s.float()).gather(1, a[:, None]).squeeze(1)
        if detach:
            with torch.no_grad():
                best_next = q_target(s2.float()).max(1).values
        else:
            best_next = q_target(s2.float()).max(1).values
        target = r.float() + gamma * best_next * alive.float()
        loss = F.smooth_l1_loss(q_a, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss.item()


def main(detach: bool = False) -> None:
    args = get_args()
    torch.manual_seed(0)
    rng = random.Random(0)
    env = CartPole(random.Random(0))
    q, q_target = QNet(), QNet()
    q_target.load_state_dict(q.state_dict())
    optimizer = torch.optim.Adam(q.parameters(), lr=args.lr)
    memory: collections.deque = collections.deque(maxlen=10000)
    score = 0.0
    for episode in range(args.episodes):
        epsilon = max(0.01, 0.1 - 0.1 * episode / args.episodes)
        s, done, length = env.reset(), False, 0
        while not done and length < 500:
            with torch.no_grad():
                greedy = int(q(torch.tensor(s)).argmax())
            a = rng.randrange(2) if rng.random() < epsilon else greedy
            s2, done = env.step(a)
            memory.append((s, a, 0.01, s2, 0.0 if done else 1.0))
            s, length = s2, length + 1
        score += length
        if len(memory) > 200:
            loss = update(q, q_target, memory, optimizer, args.gamma, rng, detach)
        if episode % 10 == 9:
            q_target.load_state_dict(q.state_dict())
            print(f"episode {episode + 1}: mean length {score / 10:.1f}, buffer {len(memory)}"
                  + (f", td loss {loss:.5f}" if len(memory) > 200 else ""))
            score = 0.0
    if args.save:
        torch.save(q.state_dict(), args.save)


if __name__ == "__main__":
    main()
