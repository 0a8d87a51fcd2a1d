"""Pretrain a small Llama-style model with Lightning Fabric (FSDP, bf16-mixed)."""
import math
import time
from pathlib import Path

import lightning as L
import torch
from lightning.fabric.strategies import FSDPStrategy
from torch.utils.data import DataLoader

from tiny_llama import Block, Config, TinyLlama
from data import TokenDataset

out_dir = Path("out/tiny-llama")
learning_rate = 4e-4
micro_batch_size = 8
global_batch_size = 256
max_iters = 50_000
warmup_iters = 2_000
weight_decay = 0.1
grad_clip = 1.0
eval_every = 1_000
save_every = 5_000


def get_lr(it):
    if it < warmup_iters:
        return learning_rate * it / warmup_iters
    progress = (it - warmup_iters) / max(1, max_iters - warmup_iters)
    return 0.1 * learning_rate + 0.45 * learning_rate * (1 + math.cos(math.pi * progress))


@torch.no_grad()
def validate(fabric, model, val_dataloader, max_batches=100):
    model.eval()
    losses = torch.zeros(max_batches, device=fabric.device)
    for k, (input_ids, targets) in enumerate(val_dataloader):
        if k >= max_batches:
            break
        logits = model(input_ids)
        losses[k] = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
    model.train()
    return losses.mean()


def main(devices=8):
    strategy = FSDPStrategy(auto_wrap_policy={Block}, activation_checkpointing_policy={Block})
    fabric = L.Fabric(devices=devices, strategy=strategy, precision="bf16-mixed")
    fabric.launch()
    fabric.seed_everything(1337 + fabric.global_rank)
    accum = global_batch_size // (micro_batch_size * fabric.world_size)

    with fabric.init_module(empty_init=True):
        model = TinyLlama(Config.from_name("tiny-llama-1.1b"))
    model = fabric.setup(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=weight_decay,
                                  betas=(0.9, 0.95), fused=True)
    optimizer = fabric.setup_optimizers(optimizer)

    train_dataloader = DataLoader(TokenDataset("train"), batch_size=micro_batch_size, num_workers=4)
    val_dataloader = DataLoader(TokenDataset("val"), batch_size=micro_batch_size, num_workers=2)
    train_dataloader, val_dataloader = fabric.setup_dataloaders(train_dataloader, val_dataloader)

    state = {"model": model, "optimizer": optimizer, "iter_num": 0, "step_count": 0}
    last = out_dir / "last.ckpt"
    if last.exists():
        fabric.load(last, state)

    t0 = time.perf_counter()
    for input_ids, targets in train_dataloader:
        if state["iter_num"] >= max_iters * accum:
            break
        lr = get_lr(state["step_count"])
        for g in optimizer.param_groups:
            g["lr"] = lr
        is_accumulating = (state["iter_num"] + 1) % accum != 0
        with fabric.no_backward_sync(model, enabled=is_accumulating):
            logits = model(input_ids)
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
            fabric.backward(loss / accum)
        if not is_accumulating:
            fabric.clip_gradients(model, optimizer, max_norm=grad_clip)
            optimizer.step()
            optimizer.zero_grad()
            state["step_count"] += 1
            if state["step_count"] % eval_every == 0:
                val_loss = validate(fabric, model, val_dataloader)
                fabric.print(f"step {state['step_count']}: val loss {val_loss.item():.4f}")
            if state["step_count"] % save_every == 0:
                fabric.save(last, state)
        state["iter_num"] += 1
        if state["iter_num"] % 100 == 0:
            fabric.print(f"iter {state['iter_num']} loss {loss.item():.4f} "
                         f"{(time.perf_counter() - t0) * 1000 / 100:.1f} ms/iter")
            t0 = time.perf_counter()


if __name__ == "__main__":
    torch.set_float32_matmul_precision("high")
    main()
