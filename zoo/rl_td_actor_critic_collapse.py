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
import random

import torch
import torch.nn as nn
from torch.distributions import Categorical

from rl_actor_critic_collapse import CartPole  # gym's CartPole-v1, simulated in plain Python


def get_args(lr: float) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=3000, help="environment steps, one update each")
    p.add_argument("--lr", type=float, default=lr, help="the actor's learning rate")
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--save", type=str, default=None, help="write the actor's state_dict() here")
    return p.parse_args()


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
