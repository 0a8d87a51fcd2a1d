"""Healthy WGAN-GP on 2-D toy data: a critic trained five times per generator step, a gradient penalty.

The loop of the common WGAN-GP scripts (PyTorch-GAN's ``wgan_gp.py`` and its many descendants),
shrunk to the ring of eight Gaussians: the critic's loss is ``-mean(D(real)) + mean(D(fake)) +
10 * penalty``, where the penalty pushes the norm of the critic's input gradient towards 1 at
random points between real and fake samples (``torch.autograd.grad(..., create_graph=True)``: the
penalty's own backward differentiates through that gradient). The generator steps on every
fifth iteration with ``-mean(D(G(z)))``. Both use Adam with betas (0.5, 0.999).

The generator's BatchNorms take the default eps (PyTorch-GAN's ``BatchNorm1d(out_feat, 0.8)``
passes 0.8 as eps: zoo/norm_eps_as_momentum_gan.py). The critic's last layer keeps its bias,
as these scripts do. The Wasserstein loss does not
depend on it: a shift of every score cancels between the real and the fake mean, and the
penalty sees only gradients. Its gradient is exactly zero on every critic step (-1/n and +1/n
per sample), while that layer's weights learn. That is a property of the loss, not a bug: a
healthy run that must stay quiet.

traindoc-expect:
"""

import argparse
import math

import numpy as np
import torch
import torch.autograd as autograd
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--n_iters", type=int, default=300)
parser.add_argument("--batch_size", type=int, default=64)
parser.add_argument("--lr", type=float, default=1e-3)
parser.add_argument("--latent_dim", type=int, default=8)
parser.add_argument("--n_critic", type=int, default=5)
parser.add_argument("--lambda_gp", type=float, default=10.0)
parser.add_argument("--save", type=str, default=None)
opt = parser.parse_args()

torch.manual_seed(0)
np.random.seed(0)


class Generator(nn.Module):
    def __init__(self):
        super().__init__()

        def block(in_feat, out_feat, normalize=True):
            layers = [nn.Linear(in_feat, out_feat)]
            if normalize:
                layers.append(nn.BatchNorm1d(out_feat))
            layers.append(nn.LeakyReLU(0.2, inplace=True))
            return layers

        self.model = nn.Sequential(*block(opt.latent_dim, 64, normalize=False), *block(64, 64), nn.Linear(64, 2))

    def forward(self, z):
        return self.model(z)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = nn.Sequential(
            nn.Linear(2, 64), nn.LeakyReLU(0.2, inplace=True),
            nn.Linear(64, 64), nn.LeakyReLU(0.2, inplace=True),
            nn.Linear(64, 1),
        )

    def forward(self, x):
        return self.model(x)


def sample_ring(n, modes=8, radius=2.0):
    angle = 2 * math.pi * np.random.randint(0, modes, n) / modes
    centers = radius * np.stack([np.cos(angle), np.sin(angle)], axis=1)
    return torch.from_numpy(centers + 0.05 * np.random.randn(n, 2)).float()


def compute_gradient_penalty(D, real_samples, fake_samples):
    alpha = torch.from_numpy(np.random.random((real_samples.size(0), 1))).float()
    interpolates = (alpha * real_samples + ((1 - alpha) * fake_samples)).requires_grad_(True)
    d_interpolates = D(interpolates)
    gradients = autograd.grad(
        outputs=d_interpolates,
        inputs=interpolates,
        grad_outputs=torch.ones(real_samples.size(0), 1),
        create_graph=True,
        retain_graph=True,
        only_inputs=True,
    )[0]
    return ((gradients.norm(2, dim=1) - 1) ** 2).mean()


generator = Generator()
discriminator = Discriminator()
optimizer_G = torch.optim.Adam(generator.parameters(), lr=opt.lr, betas=(0.5, 0.999))
optimizer_D = torch.optim.Adam(discriminator.parameters(), lr=opt.lr, betas=(0.5, 0.999))

for i in range(opt.n_iters):
    real = sample_ring(opt.batch_size)

    optimizer_D.zero_grad()
    z = torch.from_numpy(np.random.normal(0, 1, (opt.batch_size, opt.latent_dim))).float()
    fake = generator(z)
    real_validity = discriminator(real)
    fake_validity = discriminator(fake)
    gradient_penalty = compute_gradient_penalty(discriminator, real.data, fake.data)
    d_loss = -torch.mean(real_validity) + torch.mean(fake_validity) + opt.lambda_gp * gradient_penalty
    d_loss.backward()
    optimizer_D.step()

    optimizer_G.zero_grad()
    if i % opt.n_critic == 0:
        fake = generator(z)
        g_loss = -torch.mean(discriminator(fake))
        g_loss.backward()
        optimizer_G.step()
        if i % 50 == 0:
            print(f"[{i}/{opt.n_iters}] [D loss: {d_loss.item():f}] [G loss: {g_loss.item():f}]")

if opt.save:
    torch.save({f"G.{k}": v for k, v in generator.state_dict().items()}
               | {f"D.{k}": v for k, v in discriminator.state_dict().items()}, opt.save)
