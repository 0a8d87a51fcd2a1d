"""One-step actor-critic whose policy collapses to one action: an update at every environment step.

The one-step actor-critic of Sutton and Barto (2nd ed., section 13.5), as tutorials and
course code write it: at each environment step the actor (Linear 4-64, ReLU, Linear 64-2,
softmax) runs on the one state vector, the critic (its own Linear 4-64-1) on the state and,
without gradients, on the next one; the TD error r + 0.99 V(s') - V(s) weighs -log_prob of the
action taken and its square trains the critic, and both Adam optimizers step. With the actor's
lr at 3e-2 its softmax runs to probability ~1 on one action for every state within ~700 steps:
the pole falls in about 9 steps every episode, and -log_prob ~0 leaves the actor no gradient
to leave with (its Adam updates shrink to ~1e-5 of its weights: tiny-updates). Each sampled
step sees one row of the actor's output, so its spread across inputs is read over the rows of
several sampled steps (a step's one row alone was never judged: no finding of the collapse).
Its twin at lr 1e-3 learns (healthy_rl_td_actor_critic.py).

traindoc-expect: saturated-outputs tiny-updates@0
"""

import argparse
import math
import random

import torch
import torch.nn as nn
from torch.distributions import Categorical


def get_args(lr: float) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=3000, help="environment steps, one update each")
    p.add_argument("--lr", type=float, default=lr, help="the actor's learning rate")
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--save", type=str, default=None, help="write the actor's state_dict() here")
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


def main(lr: float = 3e-2) -> None:
    args = get_args(lr)
    torch.manual_seed(0)
    env = CartPole(random.Random(0))
    actor = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 2), nn.Softmax(dim=-1))
    critic = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 1))
    actor_opt = torch.optim.Adam(actor.parameters(), lr=args.lr)
    critic_opt = torch.optim.Adam(critic.parameters(), lr=1e-3)
    state = torch.tensor(env.reset())
    lengths, length = [], 0
    for t in range(args.steps):
        dist = Categorical(actor(state))
        action = dist.sample()
        observation, done = env.step(int(action))
        next_state = torch.tensor(observation)
        value = critic(state).squeeze()
        with torch.no_grad():
            target = 1.0 + (0.0 if done else args.gamma * critic(next_state).squeeze())
        td_error = target - value
        loss = -dist.log_prob(action) * td_error.detach() + td_error.pow(2)
        actor_opt.zero_grad()
        critic_opt.zero_grad()
        loss.backward()
        actor_opt.step()
        critic_opt.step()
        length += 1
        if done or length == 500:
            lengths.append(length)
            length, state = 0, torch.tensor(env.reset())
        else:
            state = next_state
        if (t + 1) % 500 == 0:
            recent = lengths[-10:] or [length]
            print(f"step {t + 1}: {len(lengths)} episodes, last 10 average {sum(recent) / len(recent):.1f} steps")
    if args.save:
        torch.save(actor.state_dict(), args.save)


if __name__ == "__main__":
    main()
