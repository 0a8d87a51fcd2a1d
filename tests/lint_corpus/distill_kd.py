"""Distil a large teacher LM into a small student with a learnable temperature."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader
from transformers import AutoModelForCausalLM, AutoTokenizer

from data import PackedDataset


class DistillLoss(nn.Module):
    def __init__(self, init_temperature=2.0, alpha=0.5):
        super().__init__()
        self.log_t = nn.Parameter(torch.tensor(math.log(init_temperature)))
        self.alpha = alpha

    def forward(self, s_logits, t_logits, labels):
        T = self.log_t.exp()
        kd = F.kl_div(
            F.log_softmax(s_logits / T, dim=-1),
            F.log_softmax(t_logits / T, dim=-1),
            reduction="batchmean",
            log_target=True,
        ) * T * T
        ce = F.cross_entropy(s_logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        return self.alpha * kd + (1 - self.alpha) * ce


def main():
    device = "cuda"
    tok = AutoTokenizer.from_pretrained("gpt2-large")
    teacher = AutoModelForCausalLM.from_pretrained("gpt2-large", torch_dtype=torch.bfloat16).to(device)
    teacher.eval()
    teacher.config.use_cache = False
    for p in teacher.parameters():
        p.requires_grad_(False)
    student = AutoModelForCausalLM.from_pretrained("distilgpt2").to(device)
    student.gradient_checkpointing_enable()

    criterion = DistillLoss().to(device)
    params = list(student.parameters()) + list(criterion.parameters())
    optimizer = torch.optim.AdamW(params, lr=3e-4, weight_decay=0.01, fused=True)
    total_steps = 3000
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / 50) * 0.5 * (1 + math.cos(math.pi * min(s, total_steps) / total_steps))
    )
    loader = DataLoader(PackedDataset("train", tok, block_size=512), batch_size=8, shuffle=True, num_workers=4)
    val_loader = DataLoader(PackedDataset("validation", tok, block_size=512), batch_size=16)
    accum = 2

    step = 0
    student.train()
    optimizer.zero_grad(set_to_none=True)
    for i, batch in enumerate(loader):
        ids = batch["input_ids"].to(device)
        labels = batch["labels"].to(device)
        with torch.no_grad():
            t_logits = teacher(ids).logits.float()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            s_logits = student(ids).logits
        loss = criterion(s_logits.float(), t_logits, labels) / accum
        loss.backward()
        if (i + 1) % accum == 0:
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            if step % 300 == 0:
                student.eval()
                with torch.no_grad():
                    nll = [F.cross_entropy(student(b["input_ids"].to(device)).logits.flatten(0, 1),
                                           b["labels"].to(device).flatten()).item() for b in val_loader]
                student.train()
                ppl = math.exp(sum(nll) / len(nll))
                print(f"step {step} ppl {ppl:.1f} T {criterion.log_t.exp().item():.2f}")
            if step >= total_steps:
                break
    student.save_pretrained("out/student")


if __name__ == "__main__":
    main()
