"""GPT speedrun-style training: Muon on hidden matrices, AdamW on embeddings/head/gains."""
import os
import time

import torch
import torch.nn.functional as F

from gpt import GPT, GPTConfig
from loader import DistributedTokenLoader

device = "cuda"
torch.manual_seed(0)
config = GPTConfig(vocab_size=50304, n_layer=12, n_head=6, n_embd=768)
model = GPT(config).to(device)
model = torch.compile(model)

hidden_matrices = [p for n, p in model.named_parameters() if p.ndim >= 2 and "embed" not in n and "lm_head" not in n]
embeddings = [p for n, p in model.named_parameters() if "embed" in n]
head = [model.lm_head.weight]
gains_and_biases = [p for p in model.parameters() if p.ndim < 2]

adam_lr = 3e-4
muon_lr = 0.02
adam = torch.optim.AdamW(
    [dict(params=embeddings, lr=0.6), dict(params=head, lr=0.008), dict(params=gains_and_biases, lr=0.04)],
    betas=(0.8, 0.95), eps=1e-10, weight_decay=0.0, fused=True,
)
muon = torch.optim.Muon(hidden_matrices, lr=muon_lr, momentum=0.95, weight_decay=0.0)
optimizers = [adam, muon]
for opt in optimizers:
    for group in opt.param_groups:
        group["initial_lr"] = group["lr"]

num_iterations = 1750
cooldown_frac = 0.4


def lr_multiplier(step):
    x = step / num_iterations
    return 1.0 if x < 1 - cooldown_frac else (1 - x) / cooldown_frac


train_loader = DistributedTokenLoader("data/fineweb_train_*.bin", batch_tokens=8 * 64 * 1024, rank=0, world_size=1)
val_loader = DistributedTokenLoader("data/fineweb_val_*.bin", batch_tokens=8 * 64 * 1024, rank=0, world_size=1)
t0 = time.perf_counter()
for step in range(num_iterations + 1):
    if step % 125 == 0 or step == num_iterations:
        model.eval()
        val_loss = 0.0
        with torch.no_grad():
            for _ in range(10):
                x, y = val_loader.next_batch()
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    val_loss += F.cross_entropy(model(x).float().flatten(0, 1), y.flatten()).item()
        print(f"step {step} val loss {val_loss / 10:.4f} time {time.perf_counter() - t0:.0f}s")
        model.train()
    if step == num_iterations:
        break
    x, y = train_loader.next_batch()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(x)
    loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
    loss.backward()
    for opt in optimizers:
        for group in opt.param_groups:
            group["lr"] = group["initial_lr"] * lr_multiplier(step)
    for group in muon.param_groups:
        frac = min(step / 300, 1)
        group["momentum"] = (1 - frac) * 0.85 + frac * 0.95
    for opt in optimizers:
        opt.step()
    model.zero_grad(set_to_none=True)

os.makedirs("logs", exist_ok=True)
torch.save(dict(model=model.state_dict(), optimizers=[o.state_dict() for o in optimizers], step=step),
           f"logs/state_step{step:06d}.pt")
