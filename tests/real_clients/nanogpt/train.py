"""A nanoGPT-style train.py for traindoc's real-client tests: a char-level GPT on CPU.

Written after reading karpathy/nanoGPT's train.py (not copied): module-level config globals
overridden by `--key=value` through configurator.py, a memmap `get_batch()` over
data/<dataset>/train.bin and val.bin (uint16 token ids, vocab_size in meta.pkl), gradient
accumulation with `loss / gradient_accumulation_steps`, `get_lr(it)` (linear warmup then cosine)
written into every param group each iteration, `estimate_loss()` under torch.no_grad() between
model.eval() and model.train(), a checkpoint dict (model, optimizer, model_args, iter_num,
best_val_loss, config) and `--init_from=resume`. One deliberate difference from upstream: the
checkpoint is written to ckpt.pt.tmp and moved into place with os.replace (upstream writes
ckpt.pt in place; `--bug=inplace_save` restores that).

The test writes the data (tests/real_clients/test_real_clients.py) and runs this file from its
own temporary folder. `--bug=NAME` injects one mistake as a user would write it:

  unscaled_accum    the `/ gradient_accumulation_steps` is deleted from the micro-step loss
  bf16              `model.to(torch.bfloat16)` before the optimizer is built (no autocast)
  nan_to_num        `loss = torch.nan_to_num(loss, nan=1.0)` after the forward; with
                    --empty_every=N every Nth micro-batch is fully padded (targets all -1, the
                    ignore_index), so its mean cross-entropy is 0/0 = NaN
  spike_guard       `if loss.item() > 3: loss = torch.tensor(3.0, requires_grad=True)`
  eval_train_mode   estimate_loss() without model.eval() (run it with --dropout=0.1)
  inplace_save      torch.save straight over out/ckpt.pt, as upstream nanoGPT does

`--save_checkpoints=False` turns checkpointing off (the variants that test something else);
`--save_params=PATH` writes the final model.state_dict() (the bit-identity check).
"""

import math
import os
import pickle
import time

import numpy as np
import torch

from model import GPT, GPTConfig

# -----------------------------------------------------------------------------
# default config: a tiny char-level model that trains in seconds on one CPU thread
# I/O
out_dir = 'out'
eval_interval = 25
log_interval = 10
eval_iters = 8
always_save_checkpoint = True
save_checkpoints = True  # write out_dir/ckpt.pt at the evaluations (False: never)
init_from = 'scratch'  # 'scratch' or 'resume'
# data
dataset = 'tiny_chars'
gradient_accumulation_steps = 4
batch_size = 8  # the micro-batch size
block_size = 32
# model
n_layer = 2
n_head = 2
n_embd = 32
dropout = 0.0
bias = False
# adamw optimizer
learning_rate = 1e-3
max_iters = 100
weight_decay = 1e-1
beta1 = 0.9
beta2 = 0.99
grad_clip = 1.0  # 0.0 disables clipping
# learning rate decay
decay_lr = True
warmup_iters = 10
lr_decay_iters = 100
min_lr = 1e-4
# system
device = 'cpu'
seed = 1337
# the tests' switches
bug = ''  # see the docstring
empty_every = 0  # every Nth micro-batch is all padding (targets = -1)
save_params = ''  # write the final model.state_dict() here
# -----------------------------------------------------------------------------
config_keys = [k for k, v in globals().items() if not k.startswith('_') and isinstance(v, (int, float, bool, str))]
exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'configurator.py')).read())
config = {k: globals()[k] for k in config_keys}  # stored in the checkpoint
# -----------------------------------------------------------------------------

os.makedirs(out_dir, exist_ok=True)
torch.manual_seed(seed)
tokens_per_iter = gradient_accumulation_steps * batch_size * block_size
print(f"tokens per iteration will be: {tokens_per_iter:,}")

data_dir = os.path.join('data', dataset)
micro_batches = 0  # drawn so far (for --empty_every)


def get_batch(split):
    """Random windows of block_size tokens from the split's memmap: x (B, T) and y = x shifted by one."""
    global micro_batches
    # a fresh memmap per batch, so that its pages are not kept around
    data = np.memmap(os.path.join(data_dir, f'{split}.bin'), dtype=np.uint16, mode='r')
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([torch.from_numpy(data[i:i + block_size].astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + block_size].astype(np.int64)) for i in ix])
    if split == 'train':
        micro_batches += 1
        if empty_every and micro_batches % empty_every == 0:
            y.fill_(-1)  # a window of padding only: every target is the ignore_index
    return x.to(device), y.to(device)


iter_num = 0
best_val_loss = 1e9

meta_path = os.path.join(data_dir, 'meta.pkl')
with open(meta_path, 'rb') as f:
    meta_vocab_size = pickle.load(f)['vocab_size']
print(f"found vocab_size = {meta_vocab_size} (inside {meta_path})")

model_args = dict(n_layer=n_layer, n_head=n_head, n_embd=n_embd, block_size=block_size,
                  bias=bias, vocab_size=meta_vocab_size, dropout=dropout)
if init_from == 'scratch':
    print("Initializing a new model from scratch")
    model = GPT(GPTConfig(**model_args))
elif init_from == 'resume':
    print(f"Resuming training from {out_dir}")
    ckpt = torch.load(os.path.join(out_dir, 'ckpt.pt'), map_location=device)
    for k in ['n_layer', 'n_head', 'n_embd', 'block_size', 'bias', 'vocab_size']:
        model_args[k] = ckpt['model_args'][k]  # the architecture must match the weights
    model = GPT(GPTConfig(**model_args))
    state_dict = ckpt['model']
    for k in list(state_dict):  # a checkpoint of a torch.compile'd model carries this prefix
        if k.startswith('_orig_mod.'):
            state_dict[k[len('_orig_mod.'):]] = state_dict.pop(k)
    model.load_state_dict(state_dict)
    iter_num = ckpt['iter_num']
    best_val_loss = ckpt['best_val_loss']
else:
    raise ValueError(f"init_from must be 'scratch' or 'resume', got {init_from!r}")
model.to(device)
if bug == 'bf16':
    model.to(torch.bfloat16)  # "bf16 halves the memory"

optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2), device)
if init_from == 'resume':
    optimizer.load_state_dict(ckpt['optimizer'])
ckpt = None  # free the memory


@torch.no_grad()
def estimate_loss():
    out = {}
    if bug != 'eval_train_mode':
        model.eval()
    for split in ['train', 'val']:
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            X, Y = get_batch(split)
            logits, loss = model(X, Y)
            losses[k] = loss.item()
        out[split] = losses.mean()
    model.train()
    return out


def get_lr(it):
    # 1) linear warmup for warmup_iters steps
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    # 2) past lr_decay_iters, the minimum
    if it > lr_decay_iters:
        return min_lr
    # 3) in between, cosine decay down to min_lr
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))  # 1 -> 0
    return min_lr + coeff * (learning_rate - min_lr)


def save_checkpoint(ckpt, path):
    if bug == 'inplace_save':
        torch.save(ckpt, path)
    else:
        torch.save(ckpt, path + '.tmp')
        os.replace(path + '.tmp', path)  # a crash mid-write never leaves a corrupt ckpt.pt


X, Y = get_batch('train')  # the first batch
t0 = time.time()
while True:

    # the learning rate of this iteration, into every param group
    lr = get_lr(iter_num) if decay_lr else learning_rate
    for param_group in optimizer.param_groups:
        param_group['lr'] = lr

    if iter_num % eval_interval == 0:
        losses = estimate_loss()
        print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        if losses['val'] < best_val_loss or always_save_checkpoint:
            best_val_loss = losses['val']
            if iter_num > 0 and save_checkpoints:
                ckpt = {
                    'model': model.state_dict(),
                    'optimizer': optimizer.state_dict(),
                    'model_args': model_args,
                    'iter_num': iter_num,
                    'best_val_loss': best_val_loss,
                    'config': config,
                }
                print(f"saving checkpoint to {out_dir}")
                save_checkpoint(ckpt, os.path.join(out_dir, 'ckpt.pt'))

    # forward, backward over the micro-batches: their gradients add up in .grad
    for micro_step in range(gradient_accumulation_steps):
        logits, loss = model(X, Y)
        if bug == 'nan_to_num':
            loss = torch.nan_to_num(loss, nan=1.0)  # "the odd NaN batch should not kill the run"
        if bug == 'spike_guard' and loss.item() > 3:
            loss = torch.tensor(3.0, requires_grad=True)  # "clip loss spikes"
        if bug != 'unscaled_accum':
            loss = loss / gradient_accumulation_steps  # the mean over the micro-batches, not their sum
        X, Y = get_batch('train')  # the next batch, drawn while this one's backward runs on a GPU
        loss.backward()
    if grad_clip != 0.0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)

    t1 = time.time()
    dt, t0 = t1 - t0, t1
    if iter_num % log_interval == 0:
        # loss.item() is a CPU-GPU sync point; times the micro-steps to undo the division
        lossf = loss.item() * gradient_accumulation_steps
        print(f"iter {iter_num}: loss {lossf:.4f}, lr {lr:.2e}, time {dt * 1000:.2f}ms")
    iter_num += 1

    if iter_num > max_iters:
        break

if save_params:
    torch.save(model.state_dict(), save_params)
