"""A scaled residual init overwritten by `post_init()`: every projection starts with the generic spread.

A GPT-2 written in the Hugging Face `PreTrainedModel` style: each `Block` scales the init of its
residual projection (`c_proj`, std 0.02 / sqrt(2 * n_layer), GPT-2's recipe) in its own
`reset_parameters()`, then `GPT2Model.__init__` ends with `self.post_init()`, which applies
`_init_weights` to every module and draws every Linear again with std 0.02; the LM-head model
calls `post_init()` once more (TrainCheck's TF-17877). The scaled init is silently lost; the
model trains, a little worse and less stable at depth.

traindoc-expect: repeated-init@0
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GPT2Config:
    vocab_size: int = 64
    n_positions: int = 32
    n_embd: int = 32
    n_layer: int = 2
    n_head: int = 2
    initializer_range: float = 0.02


class PreTrainedModel(nn.Module):
    def __init__(self, config: GPT2Config) -> None:
        super().__init__()
        self.config = config

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            module.weight.data.normal_(mean=0.0, std=self.config.initializer_range)
            if module.bias is not None:
                module.bias.data.zero_()
        elif isinstance(module, nn.Embedding):
            module.weight.data.normal_(mean=0.0, std=self.config.initializer_range)

    def post_init(self) -> None:
        self.apply(self._init_weights)


class Block(nn.Module):
    def __init__(self, config: GPT2Config) -> None:
        super().__init__()
        self.config = config
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.attn_proj = nn.Linear(config.n_embd, config.n_embd)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        std = self.config.initializer_range / math.sqrt(2 * self.config.n_layer)
        for proj in (self.attn_proj, self.c_proj):  # residual projections: scaled init
            nn.init.normal_(proj.weight, mean=0.0, std=std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        h = self.config.n_head
        q, k, v = (z.view(b, t, h, c // h).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c)
        x = x + self.attn_proj(y)
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x))))


class GPT2Model(PreTrainedModel):
    def __init__(self, config: GPT2Config) -> None:
        super().__init__(config)
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.n_positions, config.n_embd)
        self.h = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.post_init()

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


class GPT2LMHeadModel(PreTrainedModel):
    def __init__(self, config: GPT2Config, fixed: bool = False) -> None:
        super().__init__(config)
        self.transformer = GPT2Model(config)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.post_init()
        if fixed:  # the scaled init last, after every blanket init (nanoGPT's order)
            for block in self.transformer.h:
                block.reset_parameters()

    def forward(self, idx: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = self.lm_head(self.transformer(idx))
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten())


def main(fixed: bool = False) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--save", default="")
    args = p.parse_args()
    torch.manual_seed(0)
    config = GPT2Config()
    model = GPT2LMHeadModel(config, fixed=fixed)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = (torch.arange(4096) * 7 % config.vocab_size)  # a deterministic token stream
    for step in range(args.steps):
        i = torch.randint(0, len(data) - 17, (16,))
        x = torch.stack([data[j:j + 16] for j in i])
        y = torch.stack([data[j + 1:j + 17] for j in i])
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.3f}")
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
