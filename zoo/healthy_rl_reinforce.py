"""Healthy REINFORCE on a hand-written, batched CartPole: no_grad rollouts, one update per batch.

The policy-gradient loop of pytorch/examples' reinforcement_learning/reinforce.py, in the batched
form most RL code uses (Spinning Up's VPG, CleanRL): no gym, the classic cart-pole dynamics are
written out in torch for 32 environments at once. Each iteration collects one batch of
episodes with the policy under torch.no_grad() (observations and sampled actions are stored,
no graph is kept), computes discounted returns-to-go (gamma 0.99), normalizes them over the
batch (mean 0, std 1, as the example does), then runs the policy once more on the stored
observations with gradients and takes a single Adam step on -(log_prob * return).mean().
The "loss" of policy gradient is not an objective that falls: with normalized returns it
hovers around 0 and changes sign; progress shows as the mean episode length (the reward),
which climbs from ~24 to the 100-step cap within 20 updates.

traindoc-expect:
"""

import argparse
import math

import torch
import torch.nn as nn
from torch.distributions import Categorical


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=30, help="policy updates (one per episode batch)")
    p.add_argument("--envs", type=int, default=32, help="episodes per batch")
    p.add_argument("--max-steps", type=int, default=100, help="episode length cap")
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--log-every", type=int, default=5)
    p.add_argument("--save", type=str, default=None, help="write policy.state_dict() here")
    return p.parse_args()


class CartPole:
    """Batched cart-pole (Barto, Sutton & Anderson 1983; the constants of gym's CartPole-v1)."""

    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    theta_limit, x_limit = 12 * 2 * math.pi / 360, 2.4

    def __init__(self, n: int) -> None:
        self.n = n
        self.state = torch.zeros(n, 4)

    def reset(self) -> torch.Tensor:
        self.state = torch.empty(self.n, 4).uniform_(-0.05, 0.05)
        return self.state.clone()

    def step(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Advance every env; returns (next observation, done)."""
        x, x_dot, theta, theta_dot = self.state.unbind(1)
        force = torch.where(action == 1, self.force_mag, -self.force_mag)
        total_mass = self.masscart + self.masspole
        polemass_length = self.masspole * self.length
        cos, sin = torch.cos(theta), torch.sin(theta)
        temp = (force + polemass_length * theta_dot ** 2 * sin) / total_mass
        theta_acc = (self.gravity * sin - cos * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * cos ** 2 / total_mass))
        x_acc = temp - polemass_length * theta_acc * cos / total_mass
        x = x + self.tau * x_dot
        x_dot = x_dot + self.tau * x_acc
        theta = theta + self.tau * theta_dot
        theta_dot = theta_dot + self.tau * theta_acc
        self.state = torch.stack([x, x_dot, theta, theta_dot], dim=1)
        done = (x.abs() > self.x_limit) | (theta.abs() > self.theta_limit)
        return self.state.clone(), done


class Policy(nn.Module):
    def __init__(self, hidden: int = 64) -> None:
        super().__init__()
        self.affine1 = nn.Linear(4, hidden)
        self.affine2 = nn.Linear(hidden, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.affine2(torch.tanh(self.affine1(x)))  # action logits


@torch.no_grad()
def rollout(policy: Policy, env: CartPole, max_steps: int):
    """One episode per env. Returns obs (T, N, 4), actions (T, N), rewards (T, N), alive (T, N)."""
    obs_buf, act_buf, rew_buf, alive_buf = [], [], [], []
    obs = env.reset()
    alive = torch.ones(env.n, dtype=torch.bool)
    for _ in range(max_steps):
        action = Categorical(logits=policy(obs)).sample()
        next_obs, done = env.step(action)
        obs_buf.append(obs)
        act_buf.append(action)
        rew_buf.append(alive.float())  # +1 for every step the pole is still up
        alive_buf.append(alive)
        alive = alive & ~done
        obs = next_obs
        if not alive.any():
            break
    return torch.stack(obs_buf), torch.stack(act_buf), torch.stack(rew_buf), torch.stack(alive_buf)


def returns_to_go(rewards: torch.Tensor, gamma: float) -> torch.Tensor:
    returns = torch.zeros_like(rewards)
    running = torch.zeros(rewards.size(1))
    for t in reversed(range(rewards.size(0))):
        running = rewards[t] + gamma * running
        returns[t] = running
    return returns


def main() -> None:
    args = get_args()
    torch.manual_seed(0)

    env = CartPole(args.envs)
    policy = Policy()
    optimizer = torch.optim.Adam(policy.parameters(), lr=args.lr)
    eps = torch.finfo(torch.float32).eps

    for i in range(args.iters):
        obs, actions, rewards, alive = rollout(policy, env, args.max_steps)
        ep_len = rewards.sum(0)  # (N,)

        returns = returns_to_go(rewards, args.gamma)[alive]  # only steps inside an episode
        returns = (returns - returns.mean()) / (returns.std() + eps)

        log_prob = Categorical(logits=policy(obs[alive])).log_prob(actions[alive])
        policy_loss = -(log_prob * returns).mean()

        optimizer.zero_grad()
        policy_loss.backward()
        optimizer.step()

        if i % args.log_every == 0 or i == args.iters - 1:
            print(f"iter {i:3d} | loss {policy_loss.item():+.4f}"
                  f" | mean episode length {ep_len.mean().item():6.1f} | max {ep_len.max().item():4.0f}")

    if args.save:
        torch.save(policy.state_dict(), args.save)


if __name__ == "__main__":
    main()
