"""A DeepSpeed ZeRO-2 multi-task encoder whose auxiliary head is detached: it never learns.

Written the way DeepSpeed's own examples train (its HelloDeepSpeed MLM script): the model's
forward takes the batch's tensors by name and returns the loss, ``deepspeed.initialize`` builds
the engine from a config dict (ZeRO stage, bf16, the optimizer), and the loop is
``loss = engine(**batch)``, ``engine.backward(loss)``, ``engine.step()`` over an endless
iterator of batches.

The bug is in the forward: the author wanted the auxiliary "length" loss not to push the
encoder around and wrote ``self.length_head(pooled).detach()`` instead of
``self.length_head(pooled.detach())``. The auxiliary loss is still summed and printed; the
length head's weight and bias never get a gradient.

ZeRO hides this from anything that looks at what the optimizer holds. DeepSpeed's optimizer
steps one flat fp32 partition per group, holding every parameter end to end, and fills the
length head's share of that partition's gradient with zeros. The flat gradient as a whole is
never zero. traindoc measures the partition as the parameters it holds (live/zero.py), so the
length head is seen with its own name and its gradient of zeros. ``--fixed`` detaches the
head's input instead (the twin `healthy_deepspeed_zero_multitask.py`) and must stay quiet.
Catalog `no-gradient`.

traindoc-expect: no-gradient@0
"""

from __future__ import annotations

import argparse
import os
import socket
from typing import Iterator

import torch
import torch.nn as nn
import torch.nn.functional as F

import deepspeed

VOCAB, PAD, DIM = 64, 0, 32


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TaggerWithLength(nn.Module):
    """Token classification (is the token a "noun": its id is even) plus the sentence's length
    as an auxiliary regression target, from the mean of the token states."""

    def __init__(self, fixed: bool) -> None:
        super().__init__()
        self.fixed = fixed
        self.embed = nn.Embedding(VOCAB, DIM, padding_idx=PAD)
        self.encoder = nn.Sequential(nn.Linear(DIM, DIM), nn.GELU(), nn.Linear(DIM, DIM), nn.GELU())
        self.tag_head = nn.Linear(DIM, 2)
        self.length_head = nn.Linear(DIM, 1)

    def forward(self, tokens: torch.Tensor, tags: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        mask = tokens.ne(PAD)
        states = self.encoder(self.embed(tokens))
        logits = self.tag_head(states)
        tag_loss = F.cross_entropy(logits[mask].float(), tags[mask])
        pooled = (states * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True)
        if self.fixed:
            length = self.length_head(pooled.detach()).squeeze(-1)
        else:
            # keep the auxiliary task from pushing the encoder around
            length = self.length_head(pooled).detach().squeeze(-1)
        length_loss = F.mse_loss(length.float(), lengths / 16)
        return tag_loss + 0.1 * length_loss


def batches(batch_size: int, seed: int = 0) -> Iterator[dict[str, torch.Tensor]]:
    """Sentences of 4 to 16 random tokens, padded, for ever."""
    g = torch.Generator().manual_seed(seed)
    while True:
        lengths = torch.randint(4, 17, (batch_size,), generator=g)
        tokens = torch.randint(1, VOCAB, (batch_size, 16), generator=g)
        tokens[torch.arange(16).expand(batch_size, 16) >= lengths.unsqueeze(1)] = PAD
        yield {"tokens": tokens, "tags": tokens % 2, "lengths": lengths.float()}


def main(fixed: bool = False) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=-1)  # the deepspeed launcher passes it
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--fixed", action="store_true")
    parser.add_argument("--zero-stage", type=int, default=2, choices=(1, 2, 3))
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--offload", action="store_true", help="ZeRO's optimizer state and step on the CPU")
    parser.add_argument("--save", default=None, help="write the model's state_dict here")
    parser.add_argument("--checkpoint-dir", default=None, help="engine.save_checkpoint() here at the end")
    args = parser.parse_args()
    for key, value in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", str(free_port())),
                       ("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1")):
        os.environ.setdefault(key, value)
    torch.manual_seed(0)

    model = TaggerWithLength(fixed or args.fixed)
    ds_config = {
        "train_micro_batch_size_per_gpu": 16,
        "optimizer": {"type": "AdamW", "params": {"lr": 2e-3, "torch_adam": True}},
        "bf16": {"enabled": args.bf16},
        "zero_optimization": {"stage": args.zero_stage,
                              **({"offload_optimizer": {"device": "cpu"}} if args.offload else {})},
        "steps_per_print": 1_000_000,
    }
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config)

    engine.train()
    for step, batch in enumerate(batches(16)):
        if step >= args.steps:
            break
        loss = engine(**batch)
        engine.backward(loss)
        engine.step()
        if step % 10 == 0:
            print(f"step {step}: loss {loss.item():.4f}")
    if args.checkpoint_dir:  # global_step<N>/: the model's states, and ZeRO's optimizer files beside them
        engine.save_checkpoint(args.checkpoint_dir, client_state={"step": args.steps})
    if args.save:
        torch.save(engine.module.state_dict(), args.save)


if __name__ == "__main__":
    main()
