"""REINFORCE with one backward() per time step of the episode, summed on purpose: no finding.

Monte-Carlo policy gradient on a cart-pole (gym's CartPole-v1, simulated in plain Python) as
compact RL code writes it: the policy (Linear 4-128, ReLU, Linear 128-2, softmax) runs on each
state of an episode, keeping the probability of the action taken; after the episode, walking
back from the last step, each step's return G_t weighs -log pi(a_t|s_t) and that term's
backward() adds its gradient, then one Adam step. The per-step backward() calls are the terms
of one objective (the REINFORCE estimator is their sum over the episode), not micro-batches
whose mean was forgotten: each came with no forward of the policy since the previous one.
Episodes grow from about 30 to 95 steps.

traindoc-expect:
"""

import argparse
import random

import torch
import torch.nn as nn
from torch.distributions import Categorical

from rl_actor_critic_collapse import CartPole  # gym's CartPole-v1, simulated in plain Python


class Policy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 128), nn.ReLU(), nn.Linear(128, 2))

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.body(state), dim=-1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--episodes", type=int, default=150)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--gamma", type=float, default=0.98)
    p.add_argument("--save", type=str, default=None, help="write the policy's state_dict() here")
    args = p.parse_args()
    torch.manual_seed(0)
    env, policy = CartPole(random.Random(0)), Policy()
    optimizer = torch.optim.Adam(policy.parameters(), lr=args.lr)
    lengths = []
    for episode in range(args.episodes):
        state, done, trajectory = env.reset(), False, []
        while not done and len(trajectory) < 500:
            probs = policy(torch.tensor(state))
            action = Categorical(probs).sample()
            state, done = env.step(int(action))
            trajectory.append((0.01, probs[action]))  # reward 1 a step, scaled as the update expects
        ret = 0.0
        optimizer.zero_grad()
        for reward, prob in reversed(trajectory):
            ret = reward + args.gamma * ret
            (-torch.log(prob) * ret).backward()
        optimizer.step()
        lengths.append(len(trajectory))
        if episode % 50 == 49:
            print(f"episode {episode + 1}: mean length {sum(lengths[-50:]) / 50:.1f}")
    if args.save:
        torch.save(policy.state_dict(), args.save)


if __name__ == "__main__":
    main()
