"""DQN on a small corridor task, its TD loss written target first: `F.mse_loss(td_target, q)`.

In the style of single-file RL implementations (CleanRL's dqn.py): an epsilon-greedy policy
with a linearly decaying epsilon, a replay buffer of transitions, a target network refreshed
by a soft update every few steps, and the TD target computed under `torch.no_grad()`. The loss
names its arguments the other way round from most code, `mse_loss(td_target, old_val)`: the
mean squared error is symmetric, so this trains exactly as `mse_loss(old_val, td_target)`. The
initial-loss probe must judge the argument that trains as the prediction (the untrained
network's Q-values, near 0) and the TD targets (rewards of 1 plus the discounted bootstrap)
as the target: the first loss is about what predicting 0 costs, which is healthy.

preflight-expect: initial-loss:pass
"""

import argparse
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

LENGTH = 8  # corridor cells; the agent starts at 0 and is rewarded 1 for each step it survives


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--total-timesteps", type=int, default=1500)
    p.add_argument("--learning-rate", type=float, default=2.5e-4)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--gamma", type=float, default=0.9)
    p.add_argument("--tau", type=float, default=0.5)
    p.add_argument("--learning-starts", type=int, default=200)
    p.add_argument("--train-frequency", type=int, default=4)
    p.add_argument("--target-network-frequency", type=int, default=50)
    p.add_argument("--seed", type=int, default=1)
    return p.parse_args()


class Corridor:
    """Move left or right; stepping off the left end ends the episode, the right end wraps."""

    def reset(self) -> int:
        self.pos = 0
        return self.pos

    def step(self, action: int) -> tuple[int, float, bool]:
        self.pos += 1 if action == 1 else -1
        if self.pos < 0:
            return 0, 0.0, True
        self.pos %= LENGTH
        return self.pos, 1.0, False


def one_hot(state: int) -> torch.Tensor:
    return F.one_hot(torch.tensor(state), LENGTH).float()


class QNetwork(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.network = nn.Sequential(nn.Linear(LENGTH, 64), nn.ReLU(), nn.Linear(64, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.network(x)


def linear_schedule(start_e: float, end_e: float, duration: int, t: int) -> float:
    return max(end_e, start_e + (end_e - start_e) * t / duration)


def main() -> None:
    args = get_args()
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    env = Corridor()
    q_network, target_network = QNetwork(), QNetwork()
    target_network.load_state_dict(q_network.state_dict())
    optimizer = torch.optim.Adam(q_network.parameters(), lr=args.learning_rate)
    buffer: list[tuple[int, int, float, int, bool]] = []
    obs = env.reset()
    for global_step in range(args.total_timesteps):
        epsilon = linear_schedule(1.0, 0.05, args.total_timesteps // 2, global_step)
        if random.random() < epsilon:
            action = random.randrange(2)
        else:
            with torch.no_grad():
                action = int(q_network(one_hot(obs)).argmax())
        next_obs, reward, done = env.step(action)
        buffer = (buffer + [(obs, action, reward, next_obs, done)])[-5000:]
        obs = env.reset() if done else next_obs
        if global_step > args.learning_starts and global_step % args.train_frequency == 0:
            batch = random.sample(buffer, args.batch_size)
            states = torch.stack([one_hot(b[0]) for b in batch])
            actions = torch.tensor([b[1] for b in batch])
            rewards = torch.tensor([b[2] for b in batch])
            next_states = torch.stack([one_hot(b[3]) for b in batch])
            dones = torch.tensor([float(b[4]) for b in batch])
            with torch.no_grad():
                target_max, _ = target_network(next_states).max(dim=1)
                td_target = rewards + args.gamma * target_max * (1 - dones)
            old_val = q_network(states).gather(1, actions.unsqueeze(1)).squeeze(1)
            loss = F.mse_loss(td_target, old_val)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if global_step % args.target_network_frequency == 0:
                for target_param, q_param in zip(target_network.parameters(), q_network.parameters()):
                    target_param.data.copy_(args.tau * q_param.data + (1.0 - args.tau) * target_param.data)
            if global_step % 200 == 0:
                print(f"step {global_step} td_loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
