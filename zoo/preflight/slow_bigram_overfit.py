"""A character bigram language model (one embedding table of next-character logits), trained
with AdamW at 1e-2 on random windows of a text, as lecture-style language-model scripts are.

On one repeated batch its loss falls steadily but slowly: each step moves a logit of the
table by about the LR, and the untrained logits need to move by units, so halving the loss
takes longer than the probe's 150 steps. The overfit probe must not call that "cannot overfit":
the loss is still falling at a steady pace when the probe's steps run out, so the probe says
what it measured and that it needs more steps (`n/a`), and the lr probe (a larger LR falls
faster) passes.

preflight-expect: overfit:n/a lr:pass
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

WORDS = ("anna", "bob", "carla", "dave", "emma", "frank", "grace", "henry", "iris", "jack", "kate",
         "leo", "mia", "nora", "oscar", "paula", "quinn", "rosa", "sam", "tina")


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--max-iters", type=int, default=3000)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--block-size", type=int, default=8)
    p.add_argument("--learning-rate", type=float, default=1e-2)
    return p.parse_args()


class BigramLanguageModel(nn.Module):
    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.token_embedding_table = nn.Embedding(vocab_size, vocab_size)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = self.token_embedding_table(idx)
        b, t, c = logits.shape
        return F.cross_entropy(logits.view(b * t, c), targets.view(b * t))


def main() -> None:
    args = get_args()
    torch.manual_seed(1337)
    g = torch.Generator().manual_seed(0)
    text = " ".join(WORDS[int(i)] for i in torch.randint(0, len(WORDS), (4000,), generator=g))
    chars = sorted(set(text))
    data = torch.tensor([chars.index(c) for c in text])

    def get_batch() -> tuple[torch.Tensor, torch.Tensor]:
        ix = torch.randint(len(data) - args.block_size, (args.batch_size,))
        x = torch.stack([data[i:i + args.block_size] for i in ix])
        y = torch.stack([data[i + 1:i + args.block_size + 1] for i in ix])
        return x, y

    model = BigramLanguageModel(len(chars))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
    for it in range(args.max_iters):
        xb, yb = get_batch()
        loss = model(xb, yb)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if it % 500 == 0:
            print(f"step {it}: loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
