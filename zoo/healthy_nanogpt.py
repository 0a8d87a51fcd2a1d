"""Healthy nanoGPT-style train.py whose checkpoints are nanoGPT's own dict.

Written the way karpathy/nanoGPT's train.py is: the config is module-level globals that
`--key=value` arguments override, the loop is `while True` over `iter_num`, and the LR comes
from `get_lr(iter_num)` (linear warmup, cosine decay to `min_lr`) written into every param
group by hand before each step: no LR scheduler object. At every eval it writes `ckpt.pt` as
`{"model", "optimizer", "model_args", "iter_num", "best_val_loss", "config"}`: the step counter
is `iter_num`, a name no list of step keys holds, and there is no scheduler state because
`get_lr(iter_num)` is all the schedule there is. Like nanoGPT it saves no RNG state (a resume
draws other random batches, which changes no result). Unlike nanoGPT the file is written
atomically (ckpt.pt.tmp, then os.replace). The run goes through its last iterations at
`min_lr`. The output folder is a temporary directory; CPU, float32.

traindoc-expect:
"""

import math
import os
import sys
import tempfile
from ast import literal_eval
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F

# -----------------------------------------------------------------------------
# default config values: a tiny character-level GPT on a synthetic corpus
out_dir = ''  # '' -> a temporary directory
eval_interval = 30
eval_iters = 4
log_interval = 20
always_save_checkpoint = True
# data
batch_size = 16
block_size = 16
vocab_size = 32
# model
n_layer = 2
n_head = 2
n_embd = 32
dropout = 0.0
bias = False
# adamw optimizer
learning_rate = 3e-3  # max learning rate
max_iters = 150
weight_decay = 1e-1
beta1 = 0.9
beta2 = 0.99
grad_clip = 1.0
# learning rate decay settings
decay_lr = True
warmup_iters = 10
lr_decay_iters = 135  # the last 15 iterations run at min_lr
min_lr = 3e-4  # ~= learning_rate/10, as nanoGPT advises
save = ''  # write the final model.state_dict() here (the zoo's --save)
# -----------------------------------------------------------------------------
config_keys = [k for k, v in globals().items() if not k.startswith('_') and isinstance(v, (int, float, bool, str))]
args = sys.argv[1:]
while args:  # --key=value (nanoGPT's configurator) or --key value
    arg = args.pop(0)
    key, _, val = arg[2:].partition('=')
    if not _:
        val = args.pop(0)
    assert key in config_keys, f"unknown config key: {key}"
    try:
        val = literal_eval(val)
    except (SyntaxError, ValueError):
        pass  # a string
    globals()[key] = val
config = {k: globals()[k] for k in config_keys}
# -----------------------------------------------------------------------------


@dataclass
class GPTConfig:
    block_size: int
    vocab_size: int
    n_layer: int
    n_head: int
    n_embd: int
    dropout: float
    bias: bool


class LayerNorm(nn.Module):
    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_head = cfg.n_head
        self.ln_1 = LayerNorm(cfg.n_embd, cfg.bias)
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)
        self.attn_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.ln_2 = LayerNorm(cfg.n_embd, cfg.bias)
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.mlp_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (z.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for z in (q, k, v))  # (B, nh, T, hs)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.config = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.h = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)])
        self.ln_f = LayerNorm(cfg.n_embd, cfg.bias)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                torch.nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets):
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate, betas):
        # every 2-D tensor (matmuls, embeddings) decays; LayerNorm gains do not
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [{'params': [p for p in params if p.dim() >= 2], 'weight_decay': weight_decay},
                  {'params': [p for p in params if p.dim() < 2], 'weight_decay': 0.0}]
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas)


# a synthetic corpus: 100 walks of a sparse random Markov chain over the vocabulary, 90/10 split
torch.manual_seed(1337)
chain = torch.softmax(4.0 * torch.randn(vocab_size, vocab_size), dim=1)
walks = torch.empty(100, 200, dtype=torch.long)
walks[:, 0] = torch.randint(vocab_size, (100,))
for t in range(1, walks.size(1)):
    walks[:, t] = torch.multinomial(chain[walks[:, t - 1]], 1).squeeze(1)
tokens = walks.view(-1)
train_data, val_data = tokens[:18000], tokens[18000:]


def get_batch(split):
    data = train_data if split == 'train' else val_data
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([data[i:i + block_size] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + block_size] for i in ix])
    return x, y


@torch.no_grad()
def estimate_loss():
    out = {}
    model.eval()
    for split in ['train', 'val']:
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            X, Y = get_batch(split)
            _, loss = model(X, Y)
            losses[k] = loss.item()
        out[split] = losses.mean()
    model.train()
    return out


def get_lr(it):
    if it < warmup_iters:  # 1) linear warmup
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:  # 2) after the decay, min_lr
        return min_lr
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)  # 3) cosine down to min_lr
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return min_lr + coeff * (learning_rate - min_lr)


tmp = tempfile.TemporaryDirectory()
out_dir = out_dir or tmp.name
model_args = dict(n_layer=n_layer, n_head=n_head, n_embd=n_embd, block_size=block_size,
                  bias=bias, vocab_size=vocab_size, dropout=dropout)
model = GPT(GPTConfig(**model_args))
optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2))
iter_num = 0
best_val_loss = 1e9

X, Y = get_batch('train')
while True:
    # determine and set the learning rate for this iteration
    lr = get_lr(iter_num) if decay_lr else learning_rate
    for param_group in optimizer.param_groups:
        param_group['lr'] = lr

    # evaluate the loss on train/val sets and write checkpoints
    if iter_num % eval_interval == 0:
        losses = estimate_loss()
        print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        if losses['val'] < best_val_loss or always_save_checkpoint:
            best_val_loss = losses['val']
            if iter_num > 0:
                checkpoint = {
                    'model': model.state_dict(),
                    'optimizer': optimizer.state_dict(),
                    'model_args': model_args,
                    'iter_num': iter_num,
                    'best_val_loss': best_val_loss,
                    'config': config,
                }
                path = os.path.join(out_dir, 'ckpt.pt')
                torch.save(checkpoint, path + '.tmp')
                os.replace(path + '.tmp', path)  # a crash mid-write never leaves a torn ckpt.pt

    _, loss = model(X, Y)
    X, Y = get_batch('train')  # the next batch, as nanoGPT prefetches it
    loss.backward()
    if grad_clip != 0.0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)

    if iter_num % log_interval == 0:
        print(f"iter {iter_num}: loss {loss.item():.4f}, lr {lr:.2e}")
    iter_num += 1
    if iter_num > max_iters:
        break

if save:
    torch.save(model.state_dict(), save)
tmp.cleanup()
