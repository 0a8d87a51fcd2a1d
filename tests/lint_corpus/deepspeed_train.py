import argparse
import os

import deepspeed
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader
from transformers import AutoModelForCausalLM, AutoTokenizer

from data import get_dataset


def parse():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="EleutherAI/pythia-410m")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--save_dir", default="ckpts")
    parser.add_argument("--local_rank", type=int, default=-1)
    parser = deepspeed.add_config_arguments(parser)
    return parser.parse_args()


def main():
    args = parse()
    deepspeed.init_distributed()
    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model)
    model.gradient_checkpointing_enable()
    train_set = get_dataset("train", tok)
    model_engine, optimizer, train_loader, lr_scheduler = deepspeed.initialize(
        args=args, model=model, model_parameters=model.parameters(), training_data=train_set
    )
    _, client_state = model_engine.load_checkpoint(args.save_dir)
    start_step = client_state["step"] if client_state else 0

    val_loader = DataLoader(get_dataset("validation", tok), batch_size=8)
    for epoch in range(args.epochs):
        model_engine.train()
        for step, batch in enumerate(train_loader, start=start_step):
            batch = {k: v.to(model_engine.device) for k, v in batch.items()}
            outputs = model_engine(**batch)
            loss = outputs.loss
            model_engine.backward(loss)
            model_engine.step()
            if step % 50 == 0 and dist.get_rank() == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f} lr {lr_scheduler.get_last_lr()[0]:.2e}")
            if step > 0 and step % 1000 == 0:
                model_engine.save_checkpoint(args.save_dir, client_state={"step": step})

        model_engine.eval()
        total, count = torch.zeros((), device=model_engine.device), 0
        with torch.no_grad():
            for batch in val_loader:
                batch = {k: v.to(model_engine.device) for k, v in batch.items()}
                total += model_engine(**batch).loss.float()
                count += 1
        dist.all_reduce(total)
        if dist.get_rank() == 0:
            print(f"epoch {epoch} val loss {total.item() / count / dist.get_world_size():.4f}")


if __name__ == "__main__":
    main()
