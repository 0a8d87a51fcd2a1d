"""A character-level MLP trained by hand in the makemore style: a list of raw parameters, `p.grad = None`, `p.data += -lr * p.grad`.

An embedding table `C`, a hidden layer with batch-norm-free tanh, and an output layer, all kept
in `parameters = [C, W1, b1, W2, b2]`; each step sets every gradient to None, backpropagates,
and updates by hand with a step decay of the LR halfway through. No torch.optim anywhere:
traindoc still sees every step, and nothing is wrong.

traindoc-expect:
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--save", default="")
    args = p.parse_args()
    g = torch.Generator().manual_seed(2147483647)
    vocab, block, emb, hidden = 27, 3, 10, 64
    text = torch.randint(0, vocab, (4000,), generator=g)
    text[1::2] = (text[::2] * 7 + 3) % vocab  # every other character follows from the previous
    X = torch.stack([text[i:i + block] for i in range(len(text) - block)])
    Y = text[block:]
    C = torch.randn((vocab, emb), generator=g)
    W1 = torch.randn((block * emb, hidden), generator=g) * (5 / 3) / (block * emb) ** 0.5
    b1 = torch.randn(hidden, generator=g) * 0.01
    W2 = torch.randn((hidden, vocab), generator=g) * 0.01
    b2 = torch.zeros(vocab)
    parameters = [C, W1, b1, W2, b2]
    for q in parameters:
        q.requires_grad = True
    for i in range(args.steps):
        ix = torch.randint(0, X.shape[0], (32,), generator=g)
        h = torch.tanh(C[X[ix]].view(-1, block * emb) @ W1 + b1)
        loss = F.cross_entropy(h @ W2 + b2, Y[ix])
        for q in parameters:
            q.grad = None
        loss.backward()
        lr = 0.1 if i < args.steps // 2 else 0.01
        for q in parameters:
            q.data += -lr * q.grad
        if i % 40 == 0:
            print(f"{i:4d} loss {loss.item():.4f}")
    if args.save:
        torch.save({f"p{i}": q.detach() for i, q in enumerate(parameters)}, args.save)


if __name__ == "__main__":
    main()
