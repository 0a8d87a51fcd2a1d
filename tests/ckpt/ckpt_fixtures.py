"""Real checkpoints for the ckpt tests, written with torch.save / safetensors in a temp folder.

Each builder trains a tiny model for a few real optimizer steps, so optimizer states, scheduler
states and BatchNorm buffers are what PyTorch really writes. Layouts of other tools (Hugging Face
Trainer folders, Lightning ``.ckpt``) are written with the same file names and dict keys those
tools use (Lightning 2.x: epoch, global_step, pytorch-lightning_version, state_dict, loops,
callbacks, optimizer_states, lr_schedulers; HF Trainer: model.safetensors, optimizer.pt,
scheduler.pt, rng_state.pth, trainer_state.json, training_args.bin).
"""

from __future__ import annotations

import copy
import json
import pickle
import random
from pathlib import Path

import torch
import torch.nn as nn


class Net(nn.Module):
    """Conv + BatchNorm + Linear + LayerNorm: enough for every checkpoint failure."""

    def __init__(self, bn: bool = True) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.bn = nn.BatchNorm2d(8) if bn else nn.Identity()
        self.fc = nn.Linear(8, 16)
        self.norm = nn.LayerNorm(16)
        self.head = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.bn(self.conv(x)).relu().mean((2, 3))
        return self.head(self.norm(self.fc(h)))


def train(model: nn.Module, opt: torch.optim.Optimizer, sched=None, steps: int = 10,  # type: ignore[no-untyped-def]
          seed: int = 0, ema: nn.Module | None = None, ema_buffers: bool = True) -> None:
    g = torch.Generator().manual_seed(seed)
    dtype = next(model.parameters()).dtype
    model.train()
    for _ in range(steps):
        x = torch.randn(4, 3, 8, 8, generator=g).to(dtype)
        y = torch.randint(0, 4, (4,), generator=g)
        loss = nn.functional.cross_entropy(model(x).float(), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
        if ema is not None:
            with torch.no_grad():
                for e, p in zip(ema.parameters(), model.parameters()):
                    e.mul_(0.9).add_(p, alpha=0.1)
                if ema_buffers:
                    for e, b in zip(ema.buffers(), model.buffers()):
                        e.copy_(b)


def setup(lr: float = 1e-3, bf16: bool = False, bn: bool = True, seed: int = 0, warmup: int = 5):  # type: ignore[no-untyped-def]
    torch.manual_seed(seed)
    model = Net(bn=bn)
    if bf16:
        model = model.to(torch.bfloat16)  # seed 002's mistake
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup))
    return model, opt, sched


def training_state(model, opt, sched, step, **extra):  # type: ignore[no-untyped-def]
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(),
             "scheduler": sched.state_dict() if sched is not None else None, "step": step}
    state.update(extra)
    return {k: v for k, v in state.items() if v is not None}


def complete(folder: Path, steps: int = 12) -> Path:
    """A healthy, complete training checkpoint (model, optimizer, scheduler, scaler, step, rng)."""
    model, opt, sched = setup()
    train(model, opt, sched, steps)
    scaler = torch.amp.GradScaler("cpu", enabled=True)
    path = folder / "complete.pt"
    torch.save(training_state(model, opt, sched, steps, scaler=scaler.state_dict(),
                              rng={"torch": torch.get_rng_state()}), path)
    return path


def weights_only_epoch(folder: Path, steps: int = 300) -> Path:
    """The classic incomplete checkpoint: model weights and an epoch counter, nothing else."""
    model, opt, sched = setup()
    train(model, opt, sched, 3)
    path = folder / "last.pt"
    torch.save({"model": model.state_dict(), "step": steps}, path)
    return path


def no_scheduler_saved(folder: Path, steps: int = 40) -> Path:
    model, opt, sched = setup()
    train(model, opt, sched, 6)
    path = folder / "nosched.pt"
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": steps}, path)
    return path


def nanogpt(folder: Path, iters: int = 12, name: str = "ckpt.pt") -> Path:
    """nanoGPT's own checkpoint dict: its step counter is ``iter_num``, a name no list holds; no
    scheduler (the LR is set by hand from ``get_lr(iter_num)``); no RNG state. AdamW with
    decay / no-decay groups, as nanoGPT's configure_optimizers builds it."""
    torch.manual_seed(0)
    model = Net(bn=False)
    params = list(model.parameters())
    opt = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
                             {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}], lr=6e-4)
    train(model, opt, None, iters)
    config = {"learning_rate": 6e-4, "max_iters": 5000, "eval_interval": 250, "batch_size": 12}
    path = folder / name
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                "model_args": {"n_layer": 2, "n_embd": 16, "block_size": 8, "vocab_size": 4},
                "iter_num": iters, "best_val_loss": torch.tensor(1.25), "config": config}, path)
    return path


def ema_pair(folder: Path, *, copy_buffers: bool, steps: int = 8, name: str = "ema") -> tuple[Path, Path]:
    """Two checkpoints of a run with an EMA copy: at step 0 (after one warm step) and at ``steps``.

    With ``copy_buffers=False`` the EMA averages parameters only (seed 004): its BatchNorm
    buffers stay at the deepcopy's values.
    """
    model, opt, sched = setup()
    ema = copy.deepcopy(model)
    old = folder / f"{name}_old.pt"
    torch.save(training_state(model, opt, sched, 0, ema=ema.state_dict()), old)
    train(model, opt, sched, steps, ema=ema, ema_buffers=copy_buffers)
    new = folder / f"{name}_new.pt"
    torch.save(training_state(model, opt, sched, steps, ema=ema.state_dict()), new)
    return old, new


def ema_copy_after_warmup(folder: Path) -> tuple[Path, Path]:
    """An EMA deep-copied after some training (buffers not at init), then never updated:
    its BatchNorm statistics freeze at a non-initial value while the model's keep moving."""
    model, opt, sched = setup()
    train(model, opt, sched, 5, seed=1)
    ema = copy.deepcopy(model)
    old = folder / "frozen_ema_old.pt"
    torch.save(training_state(model, opt, sched, 100, ema=ema.state_dict()), old)
    train(model, opt, sched, 6, ema=ema, ema_buffers=False, seed=2)
    new = folder / "frozen_ema_new.pt"
    torch.save(training_state(model, opt, sched, 500, ema=ema.state_dict()), new)
    return old, new


def bf16_pair(folder: Path, steps: int = 20) -> tuple[Path, Path]:
    """Seed 002: model cast to bf16, AdamW at lr 1e-3. LayerNorm weights stay exactly 1.0."""
    model, opt, sched = setup(lr=1e-3, bf16=True, warmup=1)
    old = folder / "bf16_step0.pt"
    torch.save(training_state(model, opt, sched, 0), old)
    train(model, opt, sched, steps)
    new = folder / "bf16_step20.pt"
    torch.save(training_state(model, opt, sched, steps), new)
    return old, new


def tiny_lr_pair(folder: Path, steps: int = 30) -> tuple[Path, Path]:
    """Seed 002's second attempt in miniature: fp32, but an LR far too low (AdamW at 1e-7)."""
    model, opt, sched = setup(lr=1e-7, warmup=1)
    old = folder / "tiny_step0.pt"
    torch.save(training_state(model, opt, sched, 0), old)
    train(model, opt, sched, steps)
    new = folder / f"tiny_step{steps}.pt"
    torch.save(training_state(model, opt, sched, steps), new)
    return old, new


def lr_overwritten(folder: Path, steps: int = 120) -> Path:
    """Seed 004's workaround: the LR is reset in param_groups after the scheduler stepped."""
    model, opt, _ = setup()
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.8, total_steps=1000)
    train(model, opt, sched, 3)
    for g in opt.param_groups:
        g["lr"] = 0.8 / 25 * 2  # "manual LR reset after scheduler step"
    path = folder / "onecycle_reset.pt"
    torch.save(training_state(model, opt, sched, steps), path)
    return path


def onecycle(folder: Path) -> Path:
    model, opt, _ = setup()
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.8, total_steps=1000)
    train(model, opt, sched, 3)
    path = folder / "onecycle.pt"
    torch.save(training_state(model, opt, sched, 3), path)
    return path


def fresh_bn(folder: Path) -> Path:
    """An untrained model saved at step 0: initial BatchNorm statistics are expected."""
    model, opt, sched = setup()
    path = folder / "fresh.pt"
    torch.save(training_state(model, opt, sched, 0), path)
    return path


def nonfinite(folder: Path) -> Path:
    model, opt, sched = setup()
    train(model, opt, sched, 2)
    with torch.no_grad():
        model.fc.weight[0, :3] = float("nan")
    path = folder / "nan.pt"
    torch.save(training_state(model, opt, sched, 2), path)
    return path


def safetensors_file(folder: Path, dtype: torch.dtype = torch.bfloat16) -> Path:
    from safetensors.torch import save_file

    model, opt, sched = setup()
    train(model, opt, sched, 3)
    path = folder / "model.safetensors"
    save_file({k: v.to(dtype) if v.is_floating_point() else v for k, v in model.state_dict().items()},
              str(path), metadata={"format": "pt"})
    return path


class TrainingArgs:  # stands in for transformers.TrainingArguments in training_args.bin
    learning_rate = 1e-3


def hf_folder(folder: Path, *, steps: int = 6, sharded: bool = False, bin_weights: bool = False,
              optimizer: bool = True, name: str = "checkpoint-6") -> Path:
    """The folder Hugging Face's Trainer writes at each save_steps."""
    from safetensors.torch import save_file

    model, opt, sched = setup()
    train(model, opt, sched, steps)
    out = folder / name
    out.mkdir(parents=True)
    sd = model.state_dict()
    if bin_weights:
        torch.save(sd, out / "pytorch_model.bin")
    elif sharded:
        names = list(sd)
        half = len(names) // 2
        shards = {"model-00001-of-00002.safetensors": names[:half],
                  "model-00002-of-00002.safetensors": names[half:]}
        weight_map = {}
        for shard, keys in shards.items():
            save_file({k: sd[k].contiguous() for k in keys}, str(out / shard), metadata={"format": "pt"})
            weight_map.update({k: shard for k in keys})
        total = sum(t.numel() * t.element_size() for t in sd.values())
        (out / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))
    else:
        save_file({k: v.contiguous() for k, v in sd.items()}, str(out / "model.safetensors"),
                  metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps({"model_type": "tiny"}))
    if optimizer:
        torch.save(opt.state_dict(), out / "optimizer.pt")
        torch.save(sched.state_dict(), out / "scheduler.pt")
        import numpy as np

        torch.save({"python": random.getstate(), "numpy": np.random.get_state(),
                    "cpu": torch.random.get_rng_state()}, out / "rng_state.pth")
    (out / "trainer_state.json").write_text(json.dumps(
        {"global_step": steps, "epoch": 0.5, "log_history": [{"loss": 1.3, "step": steps}]}))
    with open(out / "training_args.bin", "wb") as fh:
        pickle.dump(TrainingArgs(), fh)
    return out


def lightning_ckpt(folder: Path, *, steps: int = 6, weights_only: bool = False) -> Path:
    """The dict Lightning 2.x's Trainer.save_checkpoint writes (keys as in lightning 2.6)."""
    model, opt, sched = setup()
    train(model, opt, sched, steps)
    ckpt = {
        "epoch": 1, "global_step": steps, "pytorch-lightning_version": "2.6.6",
        "state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
        "loops": {"fit_loop": {"state_dict": {}, "epoch_loop.state_dict": {"_batches_that_stepped": steps}}},
        "callbacks": {}, "hparams_name": "kwargs", "hyper_parameters": {"lr": 1e-3},
    }
    if not weights_only:
        ckpt["optimizer_states"] = [opt.state_dict()]
        ckpt["lr_schedulers"] = [sched.state_dict()]
    path = folder / ("weights.ckpt" if weights_only else "epoch=1-step=6.ckpt")
    torch.save(ckpt, path)
    return path


def bare_state_dict(folder: Path, name: str = "model.pt", seed: int = 0) -> Path:
    model, opt, sched = setup(seed=seed)
    train(model, opt, sched, 2)
    path = folder / name
    torch.save(model.state_dict(), path)
    return path


def legacy_format(folder: Path) -> Path:
    model, opt, sched = setup()
    path = folder / "legacy.pt"
    torch.save(training_state(model, opt, sched, 0), path, _use_new_zipfile_serialization=False)
    return path


class Evil:
    """A pickle whose loading creates a marker file (harmless, but proves code execution)."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (open, (self.marker, "w"))


def malicious(folder: Path, marker: Path) -> tuple[Path, Path]:
    """A torch.save zip holding the payload next to real weights, and a raw pickle of it."""
    zipped = folder / "evil.pt"
    torch.save({"model": nn.Linear(2, 2).state_dict(), "payload": Evil(marker)}, zipped)
    raw = folder / "evil.pkl"
    with open(raw, "wb") as fh:
        pickle.dump({"payload": Evil(marker)}, fh)
    return zipped, raw


def pickled_module(folder: Path) -> Path:
    path = folder / "whole_model.pt"
    torch.save(Net(), path)
    return path


# --- pytest: one folder of checkpoints per session, each built on first use ------------------

import functools  # noqa: E402

import pytest  # noqa: E402


class Made:
    """``made.complete``, ``made.hf`` ... : each checkpoint is built once, on first access."""

    def __init__(self, folder: Path) -> None:
        self.dir = folder

    def _sub(self, name: str) -> Path:
        sub = self.dir / name
        sub.mkdir(exist_ok=True)
        return sub

    complete = functools.cached_property(lambda self: complete(self._sub("complete")))
    weights_only_epoch = functools.cached_property(lambda self: weights_only_epoch(self._sub("woe")))
    no_scheduler = functools.cached_property(lambda self: no_scheduler_saved(self._sub("nosched")))
    lr_overwritten = functools.cached_property(lambda self: lr_overwritten(self._sub("lrover")))
    onecycle = functools.cached_property(lambda self: onecycle(self._sub("onecycle")))
    fresh = functools.cached_property(lambda self: fresh_bn(self._sub("fresh")))
    nan = functools.cached_property(lambda self: nonfinite(self._sub("nan")))
    safetensors = functools.cached_property(lambda self: safetensors_file(self._sub("st")))
    hf = functools.cached_property(lambda self: hf_folder(self._sub("hf")))
    hf_sharded = functools.cached_property(lambda self: hf_folder(self._sub("hfs"), sharded=True))
    hf_bin = functools.cached_property(lambda self: hf_folder(self._sub("hfb"), bin_weights=True))
    hf_model_only = functools.cached_property(lambda self: hf_folder(self._sub("hfm"), optimizer=False))
    lightning = functools.cached_property(lambda self: lightning_ckpt(self._sub("pl")))
    lightning_weights = functools.cached_property(lambda self: lightning_ckpt(self._sub("plw"), weights_only=True))
    bare = functools.cached_property(lambda self: bare_state_dict(self._sub("bare")))
    unrelated = functools.cached_property(lambda self: _unrelated(self._sub("other")))
    legacy = functools.cached_property(lambda self: legacy_format(self._sub("legacy")))
    ema_bad = functools.cached_property(lambda self: ema_pair(self._sub("emabad"), copy_buffers=False))
    ema_good = functools.cached_property(lambda self: ema_pair(self._sub("emagood"), copy_buffers=True))
    ema_frozen = functools.cached_property(lambda self: ema_copy_after_warmup(self._sub("emafrozen")))
    bf16 = functools.cached_property(lambda self: bf16_pair(self._sub("bf16")))
    module = functools.cached_property(lambda self: pickled_module(self._sub("module")))


def _unrelated(folder: Path) -> Path:
    path = folder / "other.pt"
    torch.save(nn.GRU(4, 4).state_dict(), path)
    return path


_MADE: Made | None = None


@pytest.fixture
def made(tmp_path_factory: pytest.TempPathFactory) -> Made:
    global _MADE
    if _MADE is None:
        _MADE = Made(tmp_path_factory.mktemp("ckpts"))
    return _MADE
