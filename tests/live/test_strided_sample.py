"""The elements a sampled step measures stand for the whole tensor: a 3x3 convolution on a 1x1
feature map (a ResNet's last stage on 32x32 images) applies only its centre tap to data, the
other eight to padding, and a sample that strides in step with the kernel sees only taps that
never move. Such a network trains and must not be called frozen."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

import traindoc
from traindoc.live import measure


def test_a_conv_weight_sample_takes_every_kernel_tap() -> None:
    w = torch.zeros(64, 64, 3, 3)
    w[:, :, 1, 1] = 1.0  # the centre taps only
    sample = measure.strided(w)
    assert 3000 < sample.numel() <= measure.SAMPLE
    assert abs(float(sample.mean()) - 1 / 9) < 0.01  # each tap as often as the others


def test_a_conv_on_a_one_pixel_map_is_not_frozen() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 64, 3, stride=2, padding=1), nn.ReLU(),  # 2x2 -> 1x1
                        nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(64, 4))
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    with traindoc.watch(announce=False) as doc:
        for _ in range(40):
            x, y = torch.randn(32, 3, 2, 2), torch.randint(0, 4, (32,))
            loss = F.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert [f.id for f in doc.findings if f.severity != "info"] == []
