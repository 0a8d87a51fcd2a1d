"""A research-style script that reads and writes under relative paths, as nanoGPT's train.py
does: `exec(open('config_overrides.py').read())` for its settings, a raw token file read with
np.memmap under data/, a vocabulary one folder up (pygcn's `../data/cora/`), a log it appends to
under logs/, a checkpoint under out/ that it resumes from, and samples written with np.save."""

import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

steps, lr = 100, 0.05
exec(open("config_overrides.py").read())  # nanoGPT's configurator: settings as Python
vocab = open("../vocab.txt").read().split()
tokens = torch.from_numpy(np.memmap("data/train.bin", dtype=np.uint16, mode="r").astype(np.int64))

torch.manual_seed(0)
model = nn.Sequential(nn.Embedding(len(vocab), 16), nn.Flatten(), nn.Linear(3 * 16, len(vocab)))
opt = torch.optim.AdamW(model.parameters(), lr=lr)
start = 0
if os.path.exists("out/ckpt.pt"):
    ck = torch.load("out/ckpt.pt")
    model.load_state_dict(ck["model"])
    opt.load_state_dict(ck["optimizer"])
    torch.set_rng_state(ck["rng"])
    start = ck["step"]
log = open("logs/train.log", "a")
for step in range(start, steps):
    i = torch.randint(0, len(tokens) - 4, (32,))
    x = torch.stack([tokens[j:j + 3] for j in i.tolist()])
    y = tokens[i + 3]
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    log.write(f"step {step} loss {loss.item():.4f}\n")
    if step % 10 == 9:
        os.makedirs("out/samples", exist_ok=True)
        np.save(f"out/samples/{step}.npy", model(x[:2]).argmax(-1).numpy())
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step + 1,
                    "rng": torch.get_rng_state()}, "out/ckpt.pt")
