"""A Stable-Baselines3 user's script: one of its algorithms on a classic-control task, as its
documentation starts, with the few settings a quick experiment changes. CPU, seconds.

    python train.py --algo ppo --save policy.pt
    python train.py --algo ppo --bug dropout_features   # a custom extractor, F.dropout in eval
    python train.py --algo sac --bug tiny_lr       # Adam at 1e-9
"""

from __future__ import annotations

import argparse

import gymnasium as gym
import torch
import torch.nn as nn
import torch.nn.functional as F
from stable_baselines3 import A2C, DQN, PPO, SAC
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor


class DropoutFeatures(BaseFeaturesExtractor):
    """A features extractor with dropout written as a function: F.dropout's training flag
    defaults to True, so it drops units while SB3 collects rollouts in eval mode too."""

    def __init__(self, observation_space: gym.spaces.Box, features_dim: int = 64) -> None:
        super().__init__(observation_space, features_dim)
        self.linear = nn.Linear(observation_space.shape[0], features_dim)

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return F.dropout(torch.relu(self.linear(observations)), p=0.2)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--algo", choices=("ppo", "a2c", "dqn", "sac"), default="ppo")
    parser.add_argument("--bug", choices=("none", "dropout_features", "tiny_lr"), default="none")
    parser.add_argument("--save", default="")
    args = parser.parse_args()

    lr = {"tiny_lr": 1e-9}.get(args.bug)
    policy_kwargs = dict(features_extractor_class=DropoutFeatures) if args.bug == "dropout_features" else None
    common = dict(seed=0, device="cpu", policy_kwargs=policy_kwargs)
    if args.algo == "ppo":
        model = PPO("MlpPolicy", "CartPole-v1", n_steps=128, batch_size=32, n_epochs=4,
                    learning_rate=lr or 3e-4, **common)
        steps = 1024
    elif args.algo == "a2c":
        model = A2C("MlpPolicy", "CartPole-v1", learning_rate=lr or 7e-4, **common)
        steps = 2500
    elif args.algo == "dqn":
        model = DQN("MlpPolicy", "CartPole-v1", learning_starts=500, train_freq=4,
                    target_update_interval=250, exploration_fraction=0.3, learning_rate=lr or 1e-3, **common)
        steps = 3000
    else:
        model = SAC("MlpPolicy", "Pendulum-v1", learning_starts=100, batch_size=64,
                    learning_rate=lr or 3e-4, **common)
        steps = 300
    model.learn(total_timesteps=steps)
    if args.save:
        torch.save(model.policy.state_dict(), args.save)


if __name__ == "__main__":
    main()
