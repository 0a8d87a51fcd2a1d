"""Healthy loop that skips the optimizer step on batches it flags as bad, on purpose, and counts them.

A classifier trained from sharded data (WebDataset-style: records stored in shards of 64, the
shard order reshuffled every epoch, one shard = one batch). Four of the 60 shards were labelled
by a broken annotation job and carry random labels; nobody knows which. The loop guards against
them the way many production loops guard against bad data: after loss.backward() it compares
the batch loss with the running average of the accepted batches (an EMA) and, if it is more
than 2.5x that average after a 20-step warmup, drops the batch: optimizer.zero_grad() throws its
gradients away, optimizer.step() is not called, the skip is counted and printed. 13 of the 240
batches (5.4%, all from the bad shards, from step 59 on, once the model knows enough to tell)
are skipped; the loss of the accepted batches keeps falling and the held-out accuracy reaches
0.92. The skips, and the high losses of the skipped batches, are intended, not a bug.

traindoc-expect:
"""

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--shard-size", type=int, default=64, help="records per shard (= batch)")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--skip-factor", type=float, default=2.5, help="skip if loss > factor * EMA")
    p.add_argument("--warmup", type=int, default=20, help="steps before batches can be skipped")
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


def make_shards(n_shards: int, shard_size: int, in_dim: int, n_classes: int, bad_shards: int):
    """Shards of (x, y); `bad_shards` of them have labels from a broken annotation job."""
    w = torch.randn(in_dim, n_classes) / math.sqrt(in_dim)
    shards = []
    for _ in range(n_shards):
        x = torch.randn(shard_size, in_dim)
        y = (4.0 * x @ w).argmax(dim=1)
        shards.append((x, y))
    for i in torch.randperm(n_shards)[:bad_shards].tolist():
        x, y = shards[i]
        shards[i] = (x, torch.randint(0, n_classes, (shard_size,)))
    return shards, w


def main() -> None:
    args = get_args()
    torch.manual_seed(0)

    in_dim, n_classes = 24, 6
    shards, teacher = make_shards(60, args.shard_size, in_dim, n_classes, bad_shards=4)
    x_val = torch.randn(1024, in_dim)
    y_val = (4.0 * x_val @ teacher).argmax(dim=1)

    model = nn.Sequential(nn.Linear(in_dim, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                          nn.Linear(64, n_classes))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    ema = None
    step, updates, skipped = 0, 0, []
    model.train()
    for epoch in range(args.epochs):
        for shard in torch.randperm(len(shards)).tolist():
            x, y = shards[shard]
            loss = F.cross_entropy(model(x), y)
            loss.backward()

            value = loss.item()
            if step >= args.warmup and value > args.skip_factor * ema:
                optimizer.zero_grad(set_to_none=True)  # drop this batch's gradients, no update
                skipped.append(step)
                print(f"step {step:4d} | loss {value:.4f} > {args.skip_factor} x EMA {ema:.4f}:"
                      f" skipping shard {shard}")
            else:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                updates += 1
                ema = value if ema is None else 0.9 * ema + 0.1 * value

            if step % args.log_every == 0:
                print(f"epoch {epoch} step {step:4d} | loss {value:.4f} | ema {ema:.4f}")
            step += 1

    print(f"{updates} updates, {len(skipped)} of {step} batches skipped"
          f" ({100 * len(skipped) / step:.1f}%) at steps {skipped}")
    model.eval()
    with torch.no_grad():
        acc = (model(x_val).argmax(dim=1) == y_val).float().mean().item()
    print(f"val acc {acc:.3f}")

    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
