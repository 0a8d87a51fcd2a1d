"""Healthy actor-critic stepping one unbatched state at a time: no finding.

The loop of pytorch/examples' reinforcement_learning/actor_critic.py at its own learning rate
(Adam, 3e-2), on a cart-pole simulated here in plain Python: one network with an action head
(softmax) and a value head runs on one state vector of shape (4,) per environment step; at
the episode's end one Adam step on the sum over the episode of -log_prob * advantage and the
smooth-L1 value loss. The episode length climbs from about 20 to 130-200 steps. Its loss is
a sum over the episode's steps: it grows from about 10 to a few hundred as episodes get longer
and changes sign now and then, which is the policy getting better, not a divergence or a
spike. Its twin with lr 0.1 collapses (rl_actor_critic_collapse.py).

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
    p.add_argument("--episodes", type=int, default=150)
    p.add_argument("--lr", type=float, default=3e-2)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--max-steps", type=int, default=200)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


class CartPole:
    """One cart-pole (the constants of gym's CartPole-v1)."""

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


class ActorCritic(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.affine1 = nn.Linear(4, 128)
        self.action_head = nn.Linear(128, 2)
        self.value_head = nn.Linear(128, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = F.relu(self.affine1(x))
        return F.softmax(self.action_head(x), dim=-1), self.value_head(x)


def main() -> None:
    args = get_args()
    torch.manual_seed(543)
    env = CartPole(random.Random(543))
    model = ActorCritic()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    eps = torch.finfo(torch.float32).eps
    for episode in range(args.episodes):
        state, saved, rewards = env.reset(), [], []
        for t in range(1, args.max_steps + 1):
            probs, value = model(torch.tensor(state))  # one state, no batch dimension
            m = Categorical(probs)
            action = m.sample()
            saved.append((m.log_prob(action), value))
            state, done = env.step(action.item())
            rewards.append(1.0)
            if done:
                break
        returns, R = [], 0.0
        for r in reversed(rewards):
            R = r + args.gamma * R
            returns.insert(0, R)
        ret = torch.tensor(returns)
        ret = (ret - ret.mean()) / (ret.std() + eps)
        policy_losses, value_losses = [], []
        for (log_prob, value), R in zip(saved, ret):
            policy_losses.append(-log_prob * (R - value.item()))
            value_losses.append(F.smooth_l1_loss(value, torch.tensor([R])))
        optimizer.zero_grad()
        loss = torch.stack(policy_losses).sum() + torch.stack(value_losses).sum()
        loss.backward()
        optimizer.step()
        if episode % args.log_every == 0 or episode == args.episodes - 1:
            p_left = probs[0].item()
            print(f"episode {episode:3d} | length {t:3d} | p(left) {p_left:.4f} | loss {loss.item():.4f}")
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
