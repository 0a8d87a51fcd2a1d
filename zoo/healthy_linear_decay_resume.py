"""Healthy resume near the end of a linear-decay-to-zero schedule, in a Trainer-class style.

A small text classifier (mean of token embeddings, LayerNorm, linear head) trained by a
`Trainer` written the way Hugging Face's is, in plain PyTorch: a `TrainingArguments`
dataclass, AdamW with decay / no-decay groups (no weight decay on biases and LayerNorm
gains), a linear warmup then a linear decay of the LR to zero over `max_steps`
(`get_linear_schedule_with_warmup` as a LambdaLR), and checkpoint folders
`checkpoint-<step>/` holding the model, optimizer, scheduler, RNG state and
`trainer_state.json`, each file written atomically. The job was preempted: its first launch
(a separate process, as an earlier job would be) stopped at step 138 of 160. This launch
runs `trainer.train(resume_from_checkpoint=True)` with the same arguments and finishes the
last 22 steps, where the LR goes from 15% of its peak to zero: the updates shrink because the
schedule says so, and the loss has converged. The output folder is a temporary directory.

traindoc-expect:
"""

from __future__ import annotations

import glob
import json
import math
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, fields

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class TrainingArguments:
    output_dir: str = ""
    learning_rate: float = 2e-3
    weight_decay: float = 0.01
    warmup_steps: int = 10
    max_steps: int = 160
    per_device_train_batch_size: int = 128
    save_steps: int = 25
    logging_steps: int = 25
    seed: int = 42
    stop_at: int = 0  # this launch ends (is preempted) at this step; 0: never
    resume_from_checkpoint: bool = True
    save: str = ""  # write the final model.state_dict() here (the zoo's --save)

    @classmethod
    def from_argv(cls, argv: list[str]) -> TrainingArguments:
        """``--name=value`` or ``--name value`` for each field, as HfArgumentParser takes them."""
        parse = {"str": str, "int": int, "float": float, "bool": lambda v: v == "True"}
        kinds = {f.name: parse[str(f.type)] for f in fields(cls)}
        values: dict[str, object] = {}
        while argv:
            key, eq, value = argv.pop(0)[2:].partition("=")
            values[key.replace("-", "_")] = kinds[key.replace("-", "_")](value if eq else argv.pop(0))
        return cls(**values)  # type: ignore[arg-type]


class BagOfEmbeddings(nn.Module):
    def __init__(self, vocab_size: int = 64, dim: int = 32, num_labels: int = 4) -> None:
        super().__init__()
        self.embeddings = nn.EmbeddingBag(vocab_size, dim, mode="mean")
        self.layer_norm = nn.LayerNorm(dim, bias=False)
        self.dense = nn.Linear(dim, dim, bias=False)
        self.out_norm = nn.LayerNorm(dim, bias=False)
        self.classifier = nn.Linear(dim, num_labels, bias=False)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.layer_norm(self.embeddings(input_ids))
        logits = self.classifier(self.out_norm(h + F.gelu(self.dense(h))))
        return F.cross_entropy(logits, labels), logits


def make_dataset(n: int, seq_len: int = 12, vocab_size: int = 64, num_labels: int = 4,
                 seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Token sequences whose label is the class most of their 'keyword' tokens belong to."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(num_labels, (n,), generator=g)
    ids = torch.randint(num_labels * 4, vocab_size, (n, seq_len), generator=g)  # filler tokens
    keywords = labels[:, None] * 4 + torch.randint(4, (n, 4), generator=g)  # 4 keywords per class
    ids[:, :4] = torch.where(torch.rand(n, 4, generator=g) < 0.5, keywords, ids[:, :4])
    return ids, labels


def get_linear_schedule_with_warmup(optimizer: torch.optim.Optimizer, warmup: int, total: int):  # type: ignore[no-untyped-def]
    def lr_lambda(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total - step) / max(1, total - warmup))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)


class Trainer:
    def __init__(self, model: nn.Module, args: TrainingArguments, train_dataset: tuple[torch.Tensor, torch.Tensor]) -> None:
        self.model, self.args, self.train_dataset = model, args, train_dataset
        no_decay = ("bias", "norm.weight")
        named = list(model.named_parameters())
        groups = [
            {"params": [p for n, p in named if not n.endswith(no_decay)], "weight_decay": args.weight_decay},
            {"params": [p for n, p in named if n.endswith(no_decay)], "weight_decay": 0.0},
        ]
        self.optimizer = torch.optim.AdamW(groups, lr=args.learning_rate)
        self.lr_scheduler = get_linear_schedule_with_warmup(self.optimizer, args.warmup_steps, args.max_steps)
        self.global_step = 0
        self.generator = torch.Generator().manual_seed(args.seed)

    def train(self, resume_from_checkpoint: bool = False) -> None:
        if resume_from_checkpoint:
            found = sorted(glob.glob(os.path.join(self.args.output_dir, "checkpoint-*")),
                           key=lambda p: int(p.rsplit("-", 1)[1]))
            if found:
                self._load_checkpoint(found[-1])
        ids, labels = self.train_dataset
        self.model.train()
        while self.global_step < self.args.max_steps:
            idx = torch.randint(len(ids), (self.args.per_device_train_batch_size,), generator=self.generator)
            loss, _ = self.model(ids[idx], labels[idx])
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.optimizer.step()
            self.lr_scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.global_step += 1
            if self.global_step % self.args.logging_steps == 0:
                print(json.dumps({"step": self.global_step, "loss": round(loss.item(), 4),
                                  "learning_rate": self.lr_scheduler.get_last_lr()[0]}))
            if self.global_step % self.args.save_steps == 0 or self.global_step == self.args.stop_at:
                self._save_checkpoint()
            if self.global_step == self.args.stop_at:
                return

    def _save_checkpoint(self) -> None:
        folder = os.path.join(self.args.output_dir, f"checkpoint-{self.global_step}")
        os.makedirs(folder, exist_ok=True)
        _save(self.model.state_dict(), os.path.join(folder, "model.pt"))
        _save(self.optimizer.state_dict(), os.path.join(folder, "optimizer.pt"))
        _save(self.lr_scheduler.state_dict(), os.path.join(folder, "scheduler.pt"))
        _save({"generator": self.generator.get_state()}, os.path.join(folder, "rng_state.pth"))
        with open(os.path.join(folder, "trainer_state.json"), "w") as f:
            json.dump({"global_step": self.global_step}, f)

    def _load_checkpoint(self, folder: str) -> None:
        self.model.load_state_dict(torch.load(os.path.join(folder, "model.pt")))
        self.optimizer.load_state_dict(torch.load(os.path.join(folder, "optimizer.pt")))
        self.lr_scheduler.load_state_dict(torch.load(os.path.join(folder, "scheduler.pt")))
        self.generator.set_state(torch.load(os.path.join(folder, "rng_state.pth"))["generator"])
        with open(os.path.join(folder, "trainer_state.json")) as f:
            self.global_step = json.load(f)["global_step"]
        print(f"resumed from {folder} at step {self.global_step}")


def _save(obj: object, path: str) -> None:
    torch.save(obj, path + ".tmp")
    os.replace(path + ".tmp", path)  # a preemption mid-write never leaves a torn file


def main() -> None:
    args = TrainingArguments.from_argv(sys.argv[1:])
    with tempfile.TemporaryDirectory() as tmp:
        if not args.output_dir:  # the earlier launch of this job, in its own process
            args.output_dir = tmp
            subprocess.run([sys.executable, __file__, f"--output_dir={tmp}", "--stop_at=138"], check=True)
        torch.manual_seed(args.seed)
        model = BagOfEmbeddings()
        trainer = Trainer(model, args, make_dataset(4096))
        trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
