"""Healthy DP-SGD written functionally: per-sample gradients by `vmap(grad(...))` over detached parameters, clipped, noised and assigned to `.grad`.

The JAX-like style of differential-privacy and per-sample-gradient code in PyTorch: the model's
parameters live in a dict of detached tensors (requires_grad=False) that the script owns; each
step ``vmap(grad(loss_fn), in_dims=(None, 0, 0))`` gives one gradient per sample, each is clipped
to norm 1, the mean gets Gaussian noise (sigma 0.5, from the script's own generator), and the
result is assigned to each tensor's ``.grad`` before ``optimizer.step()`` (SGD with momentum 0.9).
The task is a logistic regression on two Gaussian blobs through a small MLP.

Autograd never fills ``.grad`` of these tensors: the script writes a fresh gradient at every
step. They are not frozen parameters that an optimizer moves by mistake, and traindoc measures
nothing inside the transforms. A healthy run that must stay quiet.

traindoc-expect:
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--sigma", type=float, default=0.5)
    ap.add_argument("--save", default=None)
    args = ap.parse_args()

    torch.manual_seed(0)
    noise_gen = torch.Generator().manual_seed(1)
    model = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 1))
    params = {k: v.detach() for k, v in model.named_parameters()}
    optimizer = torch.optim.SGD(list(params.values()), lr=0.1, momentum=0.9)

    labels = torch.randint(0, 2, (2048,)).float()
    points = torch.randn(2048, 2) + 2.0 * (labels[:, None] * 2 - 1)

    def loss_fn(p, x, y):
        logit = functional_call(model, p, (x[None],)).squeeze()
        return F.binary_cross_entropy_with_logits(logit, y)

    per_sample_grads = vmap(grad(loss_fn), in_dims=(None, 0, 0))

    for step in range(args.steps):
        idx = torch.randint(0, len(points), (64,))
        grads = per_sample_grads(params, points[idx], labels[idx])
        norms = torch.sqrt(sum(g.flatten(1).pow(2).sum(1) for g in grads.values()))
        factor = (args.clip / (norms + 1e-6)).clamp(max=1.0)
        for name, p in params.items():
            clipped = (grads[name] * factor.view(-1, *[1] * (grads[name].dim() - 1))).mean(0)
            noise = torch.randn(clipped.shape, generator=noise_gen) * args.sigma * args.clip / len(idx)
            p.grad = clipped + noise
        optimizer.step()
        if step % 50 == 0 or step == args.steps - 1:
            with torch.no_grad():
                logits = functional_call(model, params, (points,)).squeeze()
                acc = ((logits > 0).float() == labels).float().mean()
            print(f"step {step}: accuracy {acc:.3f}")

    if args.save:
        torch.save(dict(params), args.save)


if __name__ == "__main__":
    main()
