"""A Hugging Face Trainer script for traindoc's real-client tests: a tiny GPT-2 on a token stream.

The model is built from a config in code (nothing is downloaded): GPT2Config(n_layer=2,
n_embd=32, n_head=2, vocab_size=64, n_positions=32) and GPT2LMHeadModel(config). The data is a
synthetic streaming dataset (an IterableDataset, as `datasets` streaming gives): windows of 32
tokens from a sparse random Markov chain, learnable but not trivially so, with labels = input_ids
(the model shifts them). Trainer runs 60 steps on the CPU with report_to=[] and
save_strategy="no"; output_dir is a temporary folder.

`--bug NAME` injects one mistake as a user would write it:

  tiny_lr           TrainingArguments(learning_rate=1e-6)
  bf16_model        `model = model.to(torch.bfloat16)` before the Trainer is built (no bf16=True)
  unfreeze_late     the token embedding (tied to the LM head) is frozen "for the first 10 steps"
                    and a TrainerCallback sets requires_grad=True again at step 10; but Trainer
                    built its optimizer at the start from the parameters that required grad, so
                    the embedding and head get gradients from step 10 on and never move
  nan_labels        a run of 8 stream examples whose labels are all -100 (prompts whose answer was
                    cut off by the max length) lands in one batch at step 20: its loss is 0/0 =
                    NaN, which Trainer's default logging_nan_inf_filter=True keeps out of the logs

`--grad-accum N` sets gradient_accumulation_steps (a healthy variant); `--save PATH` writes the
final model.state_dict() (the bit-identity check).
"""

import argparse
import random
import tempfile

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

VOCAB, SEQ = 64, 32


def get_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bug", default="", choices=["", "tiny_lr", "bf16_model", "unfreeze_late", "nan_labels"])
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--max-steps", type=int, default=60)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--save", default=None, help="write the final model.state_dict() here")
    return p.parse_args()


class TokenStream(torch.utils.data.IterableDataset):
    """Endless windows from a Markov chain whose every token has 3 likely successors."""

    def __init__(self, seed, masked=range(0)):
        rng = random.Random(seed)
        self.succ = [[rng.randrange(VOCAB) for _ in range(3)] for _ in range(VOCAB)]
        self.seed, self.masked = seed, masked

    def __iter__(self):
        rng = random.Random(self.seed + 1)
        i, tok = 0, 0
        while True:
            ids = []
            for _ in range(SEQ):
                tok = rng.randrange(VOCAB) if rng.random() < 0.1 else self.succ[tok][rng.randrange(3)]
                ids.append(tok)
            ids = torch.tensor(ids)
            labels = ids.clone()
            if i in self.masked:
                labels.fill_(-100)  # nothing left to learn from: the answer was truncated away
            yield {"input_ids": ids, "labels": labels}
            i += 1


class UnfreezeEmbeddings(TrainerCallback):
    def __init__(self, at_step):
        self.at_step = at_step

    def on_step_begin(self, args, state, control, model=None, **kwargs):
        if state.global_step == self.at_step:
            model.get_input_embeddings().weight.requires_grad_(True)
            print(f"step {state.global_step}: embeddings unfrozen")


def main():
    args = get_args()
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=SEQ)
    model = GPT2LMHeadModel(config)
    if args.bug == "bf16_model":
        model = model.to(torch.bfloat16)  # "half the memory, and my GPU does bf16"

    callbacks = []
    if args.bug == "unfreeze_late":
        model.get_input_embeddings().weight.requires_grad_(False)  # let the blocks settle first
        callbacks.append(UnfreezeEmbeddings(at_step=10))

    # the batch the Trainer draws at step 20 (no shuffling of a stream, one process)
    first = 20 * args.batch_size * args.grad_accum
    masked = range(first, first + args.batch_size) if args.bug == "nan_labels" else range(0)
    train = TokenStream(seed=0, masked=masked)

    with tempfile.TemporaryDirectory() as out:
        targs = TrainingArguments(
            output_dir=out, max_steps=args.max_steps, logging_steps=5, report_to=[],
            save_strategy="no", use_cpu=True, per_device_train_batch_size=args.batch_size,
            gradient_accumulation_steps=args.grad_accum,
            learning_rate=1e-6 if args.bug == "tiny_lr" else args.lr,
            warmup_steps=6, weight_decay=0.01, seed=0, dataloader_num_workers=0, disable_tqdm=True,
            logging_nan_inf_filter=True,  # the default, written out
        )
        trainer = Trainer(model=model, args=targs, train_dataset=train, callbacks=callbacks)
        result = trainer.train()
        print(f"train_loss {result.training_loss:.4f}")
        for entry in trainer.state.log_history[-4:]:
            print(entry)

    if args.save:
        torch.save(trainer.model.state_dict(), args.save)


if __name__ == "__main__":
    main()
