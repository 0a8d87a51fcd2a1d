"""A DQN in a LightningModule whose TD loss grows as its values grow: healthy, no finding.

The DQN template of Lightning's examples, on a cart-pole (gym's CartPole-v1, simulated in plain
Python): `training_step` plays one environment step with the network under `torch.no_grad()`
(epsilon-greedy), appends it to a replay buffer that an IterableDataset samples batches from,
and returns the MSE between Q(s, a) and r + 0.99 max_a Q_target(s', a), the target network
computed under `torch.no_grad()` and refreshed from the network with `load_state_dict` every 10
steps; Adam at lr 1e-2, a reward of 1 per step. The loss starts near 0 (every value near 0)
and grows by two orders of magnitude as the values climb towards 1 / (1 - 0.99) while the
agent learns to balance the pole: a bootstrapped target moves with the model, so the loss's
size against its own past says nothing about divergence (before traindoc knew that:
`divergence` at step 32).

traindoc-expect:
"""

from __future__ import annotations

import argparse
import random
from collections import deque

import torch
import torch.nn as nn
from lightning.pytorch import LightningModule, Trainer
from torch.utils.data import DataLoader, IterableDataset

from rl_actor_critic_collapse import CartPole  # gym's CartPole-v1, simulated in plain Python


class Replay(IterableDataset):
    def __init__(self, buffer: deque, size: int, rng: random.Random) -> None:
        self.buffer, self.size, self.rng = buffer, size, rng

    def __iter__(self):
        for s, a, r, done, s2 in self.rng.sample(list(self.buffer), self.size):
            yield torch.tensor(s), a, torch.tensor(r), done, torch.tensor(s2)


class DQNModule(LightningModule):
    def __init__(self, lr: float = 1e-2, gamma: float = 0.99, sync_every: int = 10) -> None:
        super().__init__()
        self.lr, self.gamma, self.sync_every = lr, gamma, sync_every
        self.net = nn.Sequential(nn.Linear(4, 128), nn.ReLU(), nn.Linear(128, 2))
        self.target_net = nn.Sequential(nn.Linear(4, 128), nn.ReLU(), nn.Linear(128, 2))
        self.target_net.load_state_dict(self.net.state_dict())
        self.rng = random.Random(0)
        self.env = CartPole(random.Random(0))
        self.buffer: deque = deque(maxlen=1000)
        self.state, self.episode, self.lengths = self.env.reset(), 0, []
        for _ in range(200):
            self.play(epsilon=1.0)

    @torch.no_grad()
    def play(self, epsilon: float) -> None:
        if self.rng.random() < epsilon:
            action = self.rng.randrange(2)
        else:
            action = int(self.net(torch.tensor(self.state)).argmax())
        nxt, done = self.env.step(action)
        self.buffer.append((self.state, action, 1.0, done, nxt))
        self.episode += 1
        if done or self.episode >= 500:
            self.lengths.append(self.episode)
            nxt, self.episode = self.env.reset(), 0
        self.state = nxt

    def training_step(self, batch, batch_idx):
        self.play(epsilon=max(0.01, 1.0 - self.global_step / 300))
        s, a, r, done, s2 = batch
        q = self.net(s).gather(1, a[:, None]).squeeze(1)
        with torch.no_grad():
            best_next = self.target_net(s2).max(1).values
            best_next[done] = 0.0
        loss = nn.functional.mse_loss(q, r + self.gamma * best_next)
        if self.global_step % self.sync_every == 0:
            self.target_net.load_state_dict(self.net.state_dict())
        if self.global_step % 100 == 0:
            recent = self.lengths[-10:]
            print(f"step {self.global_step}: loss {loss.item():.4f}, mean episode "
                  f"{sum(recent) / max(len(recent), 1):.1f}")
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.net.parameters(), lr=self.lr)

    def train_dataloader(self):
        return DataLoader(Replay(self.buffer, 64, self.rng), batch_size=16)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=800)
    p.add_argument("--save", type=str, default=None, help="write the network's state_dict() here")
    args = p.parse_args()
    torch.manual_seed(0)
    model = DQNModule()
    trainer = Trainer(accelerator="cpu", devices=1, max_steps=args.steps, logger=False,
                      enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model)
    if args.save:
        torch.save(model.net.state_dict(), args.save)


if __name__ == "__main__":
    main()
