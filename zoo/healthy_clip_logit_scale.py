"""Two-tower CLIP-style contrastive training with a learnable logit scale: its first loss is high by design.

An image tower (MLP over 32-d "image" vectors) and a text tower (EmbeddingBag over 12-token
captions) are trained to match pairs, written after the training loop of mlfoundations/open_clip
(src/open_clip_train/train.py): the model returns both unit-norm feature sets and
`logit_scale.exp()`, with `logit_scale = nn.Parameter(torch.ones([]) * log(1 / 0.07))`; the loss
is the symmetric cross-entropy of `logit_scale * img @ txt.T` against the diagonal; AdamW with no
weight decay on biases, gains and the scale; a warmup-then-cosine LR set by a function every
step; the scale clamped to ln(100) after each step; an evaluation in eval mode under
inference_mode that reports retrieval recall@1. With the scale at 14.3 and 16-d unit features,
random features already give logits spread over several units, so the first loss (8.1 for 64
pairs in a batch) is far above ln(64) = 4.16 without anything being wrong; it falls to 3.0 in 120
steps. bad-initial-loss must stay quiet: the learnable scale accounts for it (up to ln(64) +
2 x 14.3 for similarities in [-1, 1]).

traindoc-expect:
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, CAPTION_LEN, IMG_DIM, EMBED = 200, 12, 32, 16


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--wd", type=float, default=0.1)
    p.add_argument("--eval-every", type=int, default=40)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    return p.parse_args()


class TwoTower(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.visual = nn.Sequential(nn.Linear(IMG_DIM, 64), nn.GELU(), nn.Linear(64, EMBED))
        self.text = nn.EmbeddingBag(VOCAB, 64, mode="mean")
        self.text_proj = nn.Linear(64, EMBED)
        self.logit_scale = nn.Parameter(torch.ones([]) * math.log(1 / 0.07))

    def forward(self, images: torch.Tensor, texts: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"image_features": F.normalize(self.visual(images), dim=-1),
                "text_features": F.normalize(self.text_proj(self.text(texts)), dim=-1),
                "logit_scale": self.logit_scale.exp()}


def clip_loss(image_features: torch.Tensor, text_features: torch.Tensor, logit_scale: torch.Tensor) -> torch.Tensor:
    logits_per_image = logit_scale * image_features @ text_features.T
    labels = torch.arange(len(image_features))
    return (F.cross_entropy(logits_per_image, labels) + F.cross_entropy(logits_per_image.T, labels)) / 2


def paired_data(n: int, concepts: torch.Tensor, words: torch.Tensor,
                gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Each pair shows one of 256 concepts: a noisy image vector and a caption of its words."""
    c = torch.randint(0, len(concepts), (n,), generator=gen)
    images = concepts[c] + 0.3 * torch.randn(n, IMG_DIM, generator=gen)
    pick = torch.randint(0, words.size(1), (n, CAPTION_LEN), generator=gen)
    return images, words[c].gather(1, pick)


def lr_at(step: int, args: argparse.Namespace) -> float:
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    progress = (step - args.warmup) / max(1, args.steps - args.warmup)
    return 0.5 * (1 + math.cos(math.pi * progress)) * args.lr


def main() -> None:
    args = get_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    concepts = torch.randn(256, IMG_DIM, generator=gen)
    words = torch.randint(0, VOCAB, (256, 6), generator=gen)
    images, texts = paired_data(8192, concepts, words, gen)
    val_images, val_texts = paired_data(256, concepts, words, gen)

    model = TwoTower()
    exclude = [p for n, p in model.named_parameters() if p.ndim < 2 or "logit_scale" in n]
    include = [p for n, p in model.named_parameters() if p.ndim >= 2 and "logit_scale" not in n]
    optimizer = torch.optim.AdamW([{"params": exclude, "weight_decay": 0.0},
                                   {"params": include, "weight_decay": args.wd}], lr=args.lr, betas=(0.9, 0.98))

    for step in range(args.steps):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, args)
        model.train()
        idx = torch.randint(0, len(images), (args.batch_size,), generator=gen)
        loss = clip_loss(**model(images[idx], texts[idx]))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        with torch.no_grad():  # as CLIP: the temperature may not go below 1/100
            model.logit_scale.clamp_(0, math.log(100))

        if (step + 1) % args.eval_every == 0:
            model.eval()
            with torch.inference_mode():
                out = model(val_images, val_texts)
                sims = out["image_features"] @ out["text_features"].T
                recall = float((sims.argmax(dim=1) == torch.arange(len(sims))).float().mean())
            print(f"step {step + 1:4d} | loss {loss.item():.4f} | logit scale {model.logit_scale.exp().item():.2f}"
                  f" | val i2t recall@1 {recall:.3f}")
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
