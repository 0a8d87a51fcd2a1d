"""A tiny Hugging Face Trainer script (GPT-2 built from a config in code, a synthetic token
stream, CPU) run with ``--callback`` (traindoc.hf.TraindocCallback) or under ``traindoc run``.

--bug tiny_lr      TrainingArguments(learning_rate=1e-6)
--bug unfreeze_late  the token embedding (tied to the head) is frozen "for the first steps" and
                   unfrozen at step 5, after Trainer built its optimizer without it
--bug nan_labels   a batch whose labels are all -100 at step 12: a NaN loss that
                   logging_nan_inf_filter=True (the default) keeps out of the logs
--grad-accum N     gradient_accumulation_steps (healthy: Trainer scales by num_items_in_batch)
--deepspeed STAGE  TrainingArguments(deepspeed=...): a ZeRO config of that stage, Trainer's
                   "auto" values, one process (the rendezvous variables the launcher would set)
"""

import argparse
import json
import os
import random
import tempfile

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

VOCAB, SEQ = 64, 32


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
                labels.fill_(-100)
            yield {"input_ids": ids, "labels": labels}
            i += 1


class UnfreezeAt(TrainerCallback):
    def __init__(self, step):
        self.step = step

    def on_step_begin(self, args, state, control, model=None, **kwargs):
        if state.global_step == self.step:
            model.get_input_embeddings().weight.requires_grad_(True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bug", default="", choices=["", "tiny_lr", "unfreeze_late", "nan_labels"])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--callback", metavar="JSON", help="add traindoc.hf.TraindocCallback(json=JSON)")
    p.add_argument("--export", default="", help="comma-separated trackers for the callback's export=")
    p.add_argument("--report-to", default="none")
    p.add_argument("--fail-on", default=None)
    p.add_argument("--deepspeed", type=int, choices=(1, 2, 3), default=None)
    args = p.parse_args()
    deepspeed = None
    if args.deepspeed:
        for key, value in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", os.environ.get("TEST_PORT", "29591")),
                           ("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1")):
            os.environ.setdefault(key, value)
        deepspeed = {"zero_optimization": {"stage": args.deepspeed}, "train_micro_batch_size_per_gpu": "auto",
                     "train_batch_size": "auto", "gradient_accumulation_steps": "auto", "gradient_clipping": "auto"}
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=SEQ))
    callbacks = []
    if args.bug == "unfreeze_late":
        model.get_input_embeddings().weight.requires_grad_(False)
        callbacks.append(UnfreezeAt(5))
    batch = 8
    first = 12 * batch * args.grad_accum
    masked = range(first, first + batch) if args.bug == "nan_labels" else range(0)
    if args.callback:
        import traindoc.hf

        export = [n for n in args.export.split(",") if n] or False
        callbacks.append(traindoc.hf.TraindocCallback(json=args.callback, export=export, fail_on=args.fail_on))
    with tempfile.TemporaryDirectory() as out:
        targs = TrainingArguments(
            output_dir=out, max_steps=args.steps, logging_steps=5, report_to=args.report_to.split(","),
            save_strategy="no", use_cpu=deepspeed is None, per_device_train_batch_size=batch, deepspeed=deepspeed,
            gradient_accumulation_steps=args.grad_accum,
            learning_rate=1e-6 if args.bug == "tiny_lr" else 1e-3, warmup_steps=4, seed=0,
            dataloader_num_workers=0, disable_tqdm=True,
        )
        trainer = Trainer(model=model, args=targs, train_dataset=TokenStream(0, masked), callbacks=callbacks)
        trainer.train()
    print(json.dumps({"logged_losses": [e["loss"] for e in trainer.state.log_history if "loss" in e]}))


if __name__ == "__main__":
    main()
