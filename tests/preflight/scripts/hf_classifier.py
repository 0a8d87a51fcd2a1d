"""A small Hugging Face Trainer script: a BERT sequence classifier built from a config in code,
trained on synthetic token sequences (CPU, nothing downloaded). It checkpoints every 20 steps
into out/ and resumes from the last checkpoint there, as the Trainer examples (run_glue.py) do.

The label of a sequence is which of 4 marker tokens it holds most often.

--bug tiny_lr     TrainingArguments(learning_rate=1e-6): an Adam epsilon pasted into the LR
"""

import argparse
import os

import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint

VOCAB, SEQ, N_LABELS = 96, 24, 4


class MarkerDataset(torch.utils.data.Dataset):
    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(N_LABELS + 1, VOCAB, (n, SEQ), generator=g)
        self.labels = torch.randint(0, N_LABELS, (n,), generator=g)
        marks = torch.rand(n, SEQ, generator=g) < 0.3
        self.ids[marks] = (1 + self.labels).unsqueeze(1).expand(n, SEQ)[marks]
        self.ids[:, 0] = 0  # [CLS]

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "attention_mask": torch.ones(SEQ, dtype=torch.long),
                "labels": self.labels[i]}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--bug", default="", choices=["", "tiny_lr"])
    p.add_argument("--output-dir", default="out")
    p.add_argument("--max-steps", type=int, default=300)
    args = p.parse_args()
    config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=SEQ, num_labels=N_LABELS)
    torch.manual_seed(0)
    model = BertForSequenceClassification(config)
    targs = TrainingArguments(
        output_dir=args.output_dir, max_steps=args.max_steps, per_device_train_batch_size=16,
        learning_rate=1e-6 if args.bug == "tiny_lr" else 1e-3, warmup_steps=10, weight_decay=0.01,
        logging_steps=10, save_strategy="steps", save_steps=20, save_total_limit=2, eval_strategy="no",
        report_to="none", use_cpu=True, seed=0, dataloader_num_workers=0, disable_tqdm=True,
    )
    trainer = Trainer(model=model, args=targs, train_dataset=MarkerDataset(2048, 0),
                      eval_dataset=MarkerDataset(256, 1))
    last = get_last_checkpoint(args.output_dir) if os.path.isdir(args.output_dir) else None
    trainer.train(resume_from_checkpoint=last)
    print(trainer.evaluate())


if __name__ == "__main__":
    main()
