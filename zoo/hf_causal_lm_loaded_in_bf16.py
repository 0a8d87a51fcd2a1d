"""Causal LM built in bf16 by its loader and fine-tuned with torch's AdamW: nothing moves.

The fine-tuning loop many SFT scripts write around Hugging Face models: the model comes from
`AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)` (as `from_pretrained(...,
torch_dtype=torch.bfloat16)` would load it, to halve the memory), then a plain loop with
`torch.optim.AdamW(model.parameters(), lr=2e-5)`, `model(input_ids=..., labels=...)`,
`out.loss.backward()`. No `.to()` or `.half()` ever runs: the parameters are born bf16. AdamW
moves each element by about 2e-5 a step, and a bf16 weight keeps such a step only below
|w| = 0.0078: the LayerNorm weights (1.0) and the typical GPT-2 weights (init std 0.02) never
change, and the loss only wanders with the batches. A tiny GPT-2 config built in code, CPU.
Seed 002 in another spelling; catalog `bf16-master-weights`, `update-underflow`,
`frozen-parameters`.

traindoc-expect: update-underflow@0 bf16-master-weights@0 frozen-parameters
"""

from __future__ import annotations

import argparse

import torch
from transformers import AutoModelForCausalLM, GPT2Config
from transformers.utils import logging as hf_logging


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--save", default=None, help="write model.state_dict() here")
    args = parser.parse_args()

    hf_logging.set_verbosity_error()
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=2)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    for step in range(args.steps):
        input_ids = torch.randint(0, 64, (4, 16))
        out = model(input_ids=input_ids, labels=input_ids)
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step % 10 == 0:
            print(f"step {step} loss {out.loss.item():.4f}")
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
