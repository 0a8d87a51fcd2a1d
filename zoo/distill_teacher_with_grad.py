"""Distillation in a Hugging Face Trainer whose teacher runs with autograd on.

The `DistillationTrainer` pattern of transformers users: a `Trainer` subclass given a
`teacher_model`, whose `compute_loss` mixes the student's cross-entropy with the KL divergence
between the student's and the teacher's temperature-softened logits. Here the teacher's call,
`self.teacher(**inputs)`, is not wrapped in `torch.no_grad()` and the teacher (a BERT in eval
mode, loaded from the state a short pretraining left, as from a checkpoint) still requires grad: every
backward also runs through the teacher, autograd keeps its activations until then, and its
.grad fills up and is never cleared. The student learns as it would anyway (the teacher's
logits depend on none of its parameters). Tiny BERT configs built in code, CPU. Catalog
`target-not-detached`; its twin calls the teacher under `torch.no_grad()`
(healthy_distillation.py).

traindoc-expect: target-not-detached@75
"""

from __future__ import annotations

import argparse
import tempfile

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments
from transformers.utils import logging as hf_logging

VOCAB, LENGTH = 32, 16


class Parity(Dataset):
    """Token sequences labelled by whether token 1 outnumbers token 2."""

    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(3, VOCAB, (n, LENGTH), generator=g)
        marks = torch.randint(0, 3, (n, LENGTH), generator=g)
        self.ids = torch.where(marks == 1, 1, torch.where(marks == 2, 2, self.ids))
        self.labels = ((self.ids == 1).sum(1) > (self.ids == 2).sum(1)).long()

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


def bert(hidden: int, layers: int, seed: int) -> BertForSequenceClassification:
    torch.manual_seed(seed)
    return BertForSequenceClassification(BertConfig(
        vocab_size=VOCAB, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=2,
        intermediate_size=2 * hidden, max_position_embeddings=LENGTH, num_labels=2))


def pretrain_teacher(data: Parity, steps: int) -> dict[str, torch.Tensor]:
    teacher = bert(64, 2, seed=1)
    opt = torch.optim.AdamW(teacher.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        idx = torch.randint(0, len(data), (32,), generator=g)
        loss = teacher(input_ids=data.ids[idx], labels=data.labels[idx]).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    return teacher.state_dict()


class DistillationTrainer(Trainer):
    def __init__(self, *args, teacher_model: torch.nn.Module, temperature: float = 2.0,
                 alpha: float = 0.5, detach: bool = False, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.teacher, self.temperature, self.alpha, self.detach = teacher_model, temperature, alpha, detach
        self.teacher.eval()  # no dropout in the targets

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        student = model(**inputs)
        if self.detach:
            with torch.no_grad():
                teacher_logits = self.teacher(**inputs).logits
        else:
            teacher_logits = self.teacher(**inputs).logits
        t = self.temperature
        kd = F.kl_div(F.log_softmax(student.logits / t, -1), F.softmax(teacher_logits / t, -1),
                      reduction="batchmean") * t * t
        loss = self.alpha * student.loss + (1 - self.alpha) * kd
        return (loss, student) if return_outputs else loss


def main(detach: bool = False) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--save", type=str, default=None, help="write the student's state_dict() here")
    args = p.parse_args()
    hf_logging.set_verbosity_error()
    data = Parity(2048, seed=0)
    teacher = bert(64, 2, seed=1)
    teacher.load_state_dict(pretrain_teacher(data, steps=60))  # as from a checkpoint
    student = bert(32, 1, seed=2)
    with tempfile.TemporaryDirectory() as out:
        trainer = DistillationTrainer(
            model=student, teacher_model=teacher, detach=detach, train_dataset=data,
            args=TrainingArguments(output_dir=out, max_steps=args.steps, per_device_train_batch_size=32,
                                   learning_rate=2e-3, logging_steps=20, save_strategy="no", report_to=[],
                                   use_cpu=True, seed=0, disable_tqdm=True),
        )
        trainer.train()
    for entry in trainer.state.log_history:
        if "loss" in entry:
            print(f"step {entry['step']}: loss {entry['loss']:.4f}")
    if args.save:
        torch.save(student.state_dict(), args.save)


if __name__ == "__main__":
    main()
