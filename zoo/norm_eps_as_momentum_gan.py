"""A DCGAN whose BatchNorm layers get 0.8 as eps: `nn.BatchNorm2d(C, 0.8)` meant as a Keras momentum.

Written as the one-file GAN scripts of the PyTorch-GAN collection are: a module-level
``opt`` from argparse, a generator that upsamples from a linear projection, a discriminator
made of ``discriminator_block``s, every conv initialised with N(0, 0.02), a sigmoid output and
BCELoss, Adam(0.5, 0.999). The data are 16x16 images of a bar, horizontal or vertical.

Every BatchNorm is built as ``nn.BatchNorm2d(out_filters, 0.8)``. PyTorch's second positional
argument is ``eps``, not ``momentum``: each layer divides by sqrt(var + 0.8). Behind
N(0, 0.02) convolutions the discriminator's activations have a variance near 1e-4, so each of
its BatchNorms shrinks them about 90-fold instead of scaling them up. Its logits stay within
0.01 of 0, D(x) is 0.5 for every image, and the losses sit at ln 2. Nothing fails loudly: the
generator simply gets no signal. The damped discriminator (saturated-outputs) and the loss
that never moves (stalled-loss) are the consequences; zoo/healthy_bn_momentum_keyword_gan.py
is the same script with the momentum passed by keyword, whose discriminator learns.

traindoc-expect: norm-eps-too-large@0 saturated-outputs stalled-loss
"""

import argparse

import numpy as np
import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--n_iters", type=int, default=100)
parser.add_argument("--batch_size", type=int, default=32)
parser.add_argument("--lr", type=float, default=0.0002)
parser.add_argument("--b1", type=float, default=0.5)
parser.add_argument("--b2", type=float, default=0.999)
parser.add_argument("--latent_dim", type=int, default=16)
parser.add_argument("--img_size", type=int, default=16)
parser.add_argument("--save", type=str, default=None)
opt = parser.parse_args()

torch.manual_seed(0)
np.random.seed(0)


def weights_init_normal(m):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        torch.nn.init.normal_(m.weight.data, 0.0, 0.02)
    elif classname.find("BatchNorm2d") != -1:
        torch.nn.init.normal_(m.weight.data, 1.0, 0.02)
        torch.nn.init.constant_(m.bias.data, 0.0)


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.init_size = opt.img_size // 4
        self.l1 = nn.Sequential(nn.Linear(opt.latent_dim, 128 * self.init_size ** 2))
        self.conv_blocks = nn.Sequential(
            nn.BatchNorm2d(128),
            nn.Upsample(scale_factor=2),
            nn.Conv2d(128, 128, 3, stride=1, padding=1),
            nn.BatchNorm2d(128, 0.8),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Upsample(scale_factor=2),
            nn.Conv2d(128, 64, 3, stride=1, padding=1),
            nn.BatchNorm2d(64, 0.8),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(64, 1, 3, stride=1, padding=1),
            nn.Tanh(),
        )

    def forward(self, z):
        out = self.l1(z)
        out = out.view(out.shape[0], 128, self.init_size, self.init_size)
        return self.conv_blocks(out)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()

        def discriminator_block(in_filters, out_filters, bn=True):
            block = [nn.Conv2d(in_filters, out_filters, 3, 2, 1), nn.LeakyReLU(0.2, inplace=True)]
            if bn:
                block.append(nn.BatchNorm2d(out_filters, 0.8))
            return block

        self.model = nn.Sequential(
            *discriminator_block(1, 16, bn=False),
            *discriminator_block(16, 32),
            *discriminator_block(32, 64),
        )
        ds_size = opt.img_size // 2 ** 3
        self.adv_layer = nn.Sequential(nn.Linear(64 * ds_size ** 2, 1), nn.Sigmoid())

    def forward(self, img):
        out = self.model(img)
        out = out.view(out.shape[0], -1)
        return self.adv_layer(out)


def bars(n):
    img = -np.ones((n, 1, opt.img_size, opt.img_size), dtype=np.float32)
    pos = np.random.randint(1, opt.img_size - 1, n)
    for k in range(n):
        if np.random.rand() < 0.5:
            img[k, 0, :, pos[k]] = 1.0
        else:
            img[k, 0, pos[k], :] = 1.0
    return torch.from_numpy(img + 0.05 * np.random.randn(*img.shape).astype(np.float32))


adversarial_loss = torch.nn.BCELoss()
generator = Generator()
discriminator = Discriminator()
generator.apply(weights_init_normal)
discriminator.apply(weights_init_normal)
optimizer_G = torch.optim.Adam(generator.parameters(), lr=opt.lr, betas=(opt.b1, opt.b2))
optimizer_D = torch.optim.Adam(discriminator.parameters(), lr=opt.lr, betas=(opt.b1, opt.b2))

for i in range(opt.n_iters):
    imgs = bars(opt.batch_size)
    valid = torch.ones(imgs.size(0), 1)
    fake = torch.zeros(imgs.size(0), 1)

    optimizer_G.zero_grad()
    z = torch.from_numpy(np.random.normal(0, 1, (imgs.shape[0], opt.latent_dim)).astype(np.float32))
    gen_imgs = generator(z)
    g_loss = adversarial_loss(discriminator(gen_imgs), valid)
    g_loss.backward()
    optimizer_G.step()

    optimizer_D.zero_grad()
    real_loss = adversarial_loss(discriminator(imgs), valid)
    fake_loss = adversarial_loss(discriminator(gen_imgs.detach()), fake)
    d_loss = (real_loss + fake_loss) / 2
    d_loss.backward()
    optimizer_D.step()

    if i % 40 == 0:
        print(f"[Iter {i}/{opt.n_iters}] [D loss: {d_loss.item():f}] [G loss: {g_loss.item():f}]")

if opt.save:
    torch.save({f"G.{k}": v for k, v in generator.state_dict().items()}
               | {f"D.{k}": v for k, v in discriminator.state_dict().items()}, opt.save)
