"""Healthy VAE whose evaluation samples its latent code: the reparameterization trick is not gated by `model.eval()`, on purpose.

Written after the loop of pytorch/examples' ``vae/main.py``: an MLP encoder gives the mean and
log-variance of a 16-dimensional latent code, ``reparameterize`` draws ``z = mu + eps * std``
with ``eps = torch.randn_like(std)``, the decoder maps it back to 28x28 pixels, and the loss is
the negative ELBO (summed BCE plus KL). Each epoch, ``test`` runs the held-out images in eval
mode under ``no_grad`` and reports the same loss.

The test loss is a Monte-Carlo estimate of the ELBO, so the evaluation draws ``z`` too: two
eval passes on the same images differ, by design. The draw is scaled by ``std``, a tensor the
model computed: it is a sample from the posterior the model predicts, not noise left on by
mistake. A healthy run that must stay quiet.

traindoc-expect:
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--save", type=str, default=None)
args = parser.parse_args()
torch.manual_seed(1)


def strokes(n, generator):
    """Images of one or two bright bars on a dark ground, as floats in [0, 1]."""
    img = torch.zeros(n, 28, 28)
    rows = torch.randint(2, 26, (n, 2), generator=generator)
    for k in range(n):
        img[k, rows[k, 0] - 1:rows[k, 0] + 2, 4:24] = 1.0
        if k % 2:
            img[k, 4:24, rows[k, 1] - 1:rows[k, 1] + 2] = 1.0
    return (img + 0.05 * torch.rand(n, 28, 28, generator=generator)).clamp(0, 1)


gen = torch.Generator().manual_seed(0)
train_loader = torch.utils.data.DataLoader(strokes(1024, gen), batch_size=args.batch_size, shuffle=True, generator=gen)
test_loader = torch.utils.data.DataLoader(strokes(256, gen), batch_size=args.batch_size)


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(784, 200)
        self.mu_head = nn.Linear(200, 16)
        self.logvar_head = nn.Linear(200, 16)
        self.dec1 = nn.Linear(16, 200)
        self.dec2 = nn.Linear(200, 784)

    def encode(self, x):
        h = F.relu(self.enc(x))
        return self.mu_head(h), self.logvar_head(h)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        return torch.sigmoid(self.dec2(F.relu(self.dec1(z))))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 784))
        return self.decode(self.reparameterize(mu, logvar)), mu, logvar


def loss_function(recon, x, mu, logvar):
    bce = F.binary_cross_entropy(recon, x.view(-1, 784), reduction="sum")
    kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return bce + kld


model = VAE()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)


def train(epoch):
    model.train()
    total = 0.0
    for data in train_loader:
        optimizer.zero_grad()
        recon, mu, logvar = model(data)
        loss = loss_function(recon, data, mu, logvar)
        loss.backward()
        total += loss.item()
        optimizer.step()
    print(f"====> Epoch: {epoch} Average loss: {total / len(train_loader.dataset):.4f}")


def test(epoch):
    model.eval()
    total = 0.0
    with torch.no_grad():
        for data in test_loader:
            recon, mu, logvar = model(data)
            total += loss_function(recon, data, mu, logvar).item()
    print(f"====> Test set loss: {total / len(test_loader.dataset):.4f}")


for epoch in range(1, args.epochs + 1):
    train(epoch)
    test(epoch)

if args.save:
    torch.save(model.state_dict(), args.save)
