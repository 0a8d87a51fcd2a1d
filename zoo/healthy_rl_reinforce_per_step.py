"""Healthy REINFORCE stepping one observation at a time, dropout before the ReLU: no finding.

The loop of pytorch/examples' reinforcement_learning/reinforce.py, written out on a cart-pole
simulated here in plain Python (no gym): at each environment step the policy
(Linear 4-128, Dropout(0.6), ReLU, Linear 128-2, softmax) runs on one observation with
gradients and the log-probability of the sampled action is kept; at the episode's end the
discounted returns (gamma 0.99) are normalized and one Adam step (lr 1e-2) is taken on
sum(-log_prob * return). Each forward sees a single row, and the dropout zeroes 60% of the
hidden units on each, so over a handful of forwards from one episode many live units are
silent by chance: a dead-ReLU judgement needs many rows, not many calls. The episode length
climbs from about 10 to 100-200 steps by episodes 100-120. Its loss changes sign from episode to
episode (the returns are normalized to mean 0) and grows with the episode's length: a long
episode after short ones is not a loss spike.

traindoc-expect:
"""

import argparse
import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Categorical


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--episodes", type=int, default=120)
    p.add_argument("--max-steps", type=int, default=200, help="episode length cap")
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--save", type=str, default=None, help="write policy.state_dict() here")
    return p.parse_args()


class CartPole:
    """One cart-pole (the constants of gym's CartPole-v1), its state a list of four floats."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.state = [0.0] * 4

    def reset(self) -> list[float]:
        self.state = [self.rng.uniform(-0.05, 0.05) for _ in range(4)]
        return list(self.state)

    def step(self, action: int) -> tuple[list[float], bool]:
        x, x_dot, theta, theta_dot = self.state
        force = 10.0 if action == 1 else -10.0
        cos, sin = math.cos(theta), math.sin(theta)
        temp = (force + 0.05 * theta_dot ** 2 * sin) / 1.1
        theta_acc = (9.8 * sin - cos * temp) / (0.5 * (4.0 / 3.0 - 0.1 * cos ** 2 / 1.1))
        x_acc = temp - 0.05 * theta_acc * cos / 1.1
        x, x_dot = x + 0.02 * x_dot, x_dot + 0.02 * x_acc
        theta, theta_dot = theta + 0.02 * theta_dot, theta_dot + 0.02 * theta_acc
        self.state = [x, x_dot, theta, theta_dot]
        return list(self.state), abs(x) > 2.4 or abs(theta) > 12 * 2 * math.pi / 360


class Policy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.affine1 = nn.Linear(4, 128)
        self.dropout = nn.Dropout(p=0.6)
        self.affine2 = nn.Linear(128, 2)
        self.saved_log_probs: list[torch.Tensor] = []
        self.rewards: list[float] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.dropout(self.affine1(x)))
        return F.softmax(self.affine2(x), dim=1)


def main() -> None:
    args = get_args()
    torch.manual_seed(543)
    env = CartPole(random.Random(543))
    policy = Policy()
    optimizer = torch.optim.Adam(policy.parameters(), lr=args.lr)
    eps = torch.finfo(torch.float32).eps
    running = 10.0
    for episode in range(args.episodes):
        state, length = env.reset(), 0
        for length in range(1, args.max_steps + 1):
            probs = policy(torch.tensor(state).unsqueeze(0))
            m = Categorical(probs)
            action = m.sample()
            policy.saved_log_probs.append(m.log_prob(action))
            state, done = env.step(action.item())
            policy.rewards.append(1.0)
            if done:
                break
        running = 0.05 * length + 0.95 * running

        returns, R = [], 0.0
        for r in reversed(policy.rewards):
            R = r + args.gamma * R
            returns.insert(0, R)
        ret = torch.tensor(returns)
        ret = (ret - ret.mean()) / (ret.std() + eps)
        loss = torch.cat([-lp * R for lp, R in zip(policy.saved_log_probs, ret)]).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        del policy.rewards[:], policy.saved_log_probs[:]
        if episode % args.log_every == 0 or episode == args.episodes - 1:
            print(f"episode {episode:3d} | length {length:3d} | running length {running:6.1f}")
    if args.save:
        torch.save(policy.state_dict(), args.save)


if __name__ == "__main__":
    main()
