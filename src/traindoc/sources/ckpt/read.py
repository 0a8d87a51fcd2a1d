"""Checkpoint readers: one file or folder in, the parts of a training state out.

Formats: ``torch.save`` files (``.pt``/``.pth``/``.bin``, a bare state_dict or a training-state
dict such as ``{"model": ..., "optimizer": ..., "scheduler": ..., "step": ...}``), Lightning
``.ckpt`` files, ``.safetensors`` files, Hugging Face checkpoint folders (``model.safetensors``
or ``pytorch_model.bin``, sharded via ``*.index.json``, with ``optimizer.pt``, ``scheduler.pt``,
``scaler.pt``, ``rng_state*.pth``, ``trainer_state.json``) and Accelerate ``save_state`` folders.
Parts are recognized by content where possible (an optimizer state has ``state`` and
``param_groups``; a GradScaler state has ``scale`` and ``growth_factor``), by key name otherwise.
A step counter under a name no list holds (nanoGPT's ``iter_num``, one of ``steps.counters``)
is recognized by what it is: an integer equal to the optimizer's own step count (``find_step``),
or one that grows between two saves (``find_step_between``).
"""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, TypeGuard, TypeVar

from traindoc.errors import UsageError
from traindoc.sources.ckpt import deepspeed
from traindoc.sources.ckpt._load import check_file, torch_load
from traindoc.sources.ckpt.steps import (
    EPOCH_KEYS, META_KEYS, STEP_KEYS, counters, int_like, is_progress, is_rng_key,
)
from traindoc.sources.ckpt.names import export_name, no_checkpoint_hint, resume_name
from traindoc.sources.ckpt._tensors import MultiStore, SafetensorsStore, Store, TorchStore

if TYPE_CHECKING:
    import torch

K = TypeVar("K")  # a mapping's keys: a state_dict's are str, an arbitrary torch.load dict's anything

PARTS = ("model", "optimizer", "scheduler", "scaler", "step", "rng", "ema")
TRAINING_PARTS = ("optimizer", "scheduler", "scaler", "step", "rng")

_MODEL_KEYS = ("model", "model_state_dict", "state_dict", "model_state", "net", "network",
               "module", "weights", "params", "student")
_EMA_KEYS = ("ema", "ema_model", "model_ema", "ema_state_dict", "state_dict_ema",
             "ema_model_state_dict", "ema_state", "averaged_model", "swa_model", "ema_params")
_EMA_PREFIXES = ("ema_model.", "model_ema.", "ema.")
_SCHEDULER_KEYS = ("scheduler", "lr_scheduler", "scheduler_state_dict", "sched", "lr_schedulers",
                   "schedulers", "param_schedulers", "lr_scheduler_state_dict")
_SCALER_KEYS = ("scaler", "grad_scaler", "scaler_state_dict", "amp", "amp_scaler",
                "native_amp_scaling_state", "MixedPrecision", "MixedPrecisionPlugin")
# Training metadata saved beside the weights: a model config or the run's arguments, and metrics
# of the evaluation (best_val_acc, val_loss, history). With them a dict is a training checkpoint.
_CONFIG_KEYS = ("config", "cfg", "args", "hparams", "hyper_parameters", "hyperparameters", "train_config",
                "training_args", "train_args", "opt", "options", "model_args", "model_config", "settings")
_MODEL_CONFIG_KEYS = ("config", "cfg", "model_args", "model_config")  # also what an export keeps
_METRIC_WORDS = {"best", "val", "valid", "validation", "loss", "acc", "accuracy", "metric", "metrics", "score",
                 "f1", "history", "ppl", "perplexity", "bleu", "map", "auc", "top1"}
_HF_WEIGHTS = ("model.safetensors.index.json", "model.safetensors", "pytorch_model.bin.index.json",
               "pytorch_model.bin", "adapter_model.safetensors", "adapter_model.bin")


@dataclass
class Ckpt:
    """What one checkpoint holds. Stores read tensors lazily; ``close`` releases the files."""

    path: Path
    format: str
    model: Store | None = None
    ema: Store | None = None
    optimizers: list[Mapping[str, object]] = field(default_factory=list)
    schedulers: list[Mapping[str, object]] = field(default_factory=list)
    has: set[str] = field(default_factory=set)
    step: int | None = None
    epoch: float | None = None
    training: bool = False
    notes: list[str] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)  # step counter candidates (``counters``)
    meta: list[str] = field(default_factory=list)  # training metadata keys beside the weights
    file_bytes: int = 0
    mapped: bool = True  # every tensor is mmap'd from a file (pages may be released after use)

    def close(self) -> None:
        for store in (self.model, self.ema):
            if store is not None:
                store.close()


def open_checkpoint(path: str | Path, *, trust: bool = False) -> Ckpt:
    """Open a checkpoint file or folder. UsageError (one line, what to do) when it cannot be."""
    path = Path(path)
    if path.is_dir():
        return _open_folder(path, trust=trust)
    size = check_file(path)
    if path.name.endswith(".index.json"):
        ck = _open_folder(path.parent, trust=trust)
        ck.notes.append(f"read the folder {path.parent} that this index belongs to")
        return ck
    if _looks_like_safetensors(path):
        ck = Ckpt(path=path, format="safetensors", model=_safetensors(path), file_bytes=size)
    else:
        obj, mapped = torch_load(path, trust=trust)
        ck = from_object(obj, path, trust=trust, mapped=mapped)
        ck.file_bytes = size
        if ck.format == "state-dict" and resume_name(path.name):
            # Saved where a resume reads from, so it is meant to resume training: judge it as a
            # training checkpoint (it holds the model and nothing else).
            ck.training = True
            ck.notes.append(f"{path.name} is named like a checkpoint to resume from, but holds only "
                            "the model's weights")
    if ck.format == "deepspeed":
        _deepspeed_siblings(ck, path, trust=trust)
    finish_reading(ck)
    sibling = path.parent / "trainer_state.json"
    if path.name in _HF_WEIGHTS + ("optimizer.pt", "scheduler.pt") and sibling.is_file():
        ck.notes.append(f"this file is one part of the Hugging Face checkpoint folder {path.parent}; "
                        "inspect the folder to see its training state")
    return ck


def _deepspeed_siblings(ck: Ckpt, path: Path, *, trust: bool) -> None:
    """A DeepSpeed model-states file read from disk: its optimizer counts only when its ZeRO
    files are there (read from rank 0's with ``trust``: they pickle DeepSpeed's own objects)."""
    files = deepspeed.optimizer_files(path.parent)
    if not files:
        ck.has.discard("optimizer")
        ck.notes.append(f"no DeepSpeed optimizer file ({deepspeed.OPTIM_STATES}) beside it: "
                        "the optimizer cannot be restored")
    elif trust:
        obj, _ = torch_load(files[0], trust=True)
        base = deepspeed.base_optimizer(obj) if isinstance(obj, Mapping) else None
        if base is not None:
            ck.optimizers.append(base)
            ck.notes.append(f"optimizer state read from {files[0].name} (rank 0's of {len(files)})")
    else:
        ck.notes.append(f"its optimizer state is in {files[0].name} (rank 0's of {len(files)}), not "
                        "read: it pickles DeepSpeed's own objects (--trust reads it)")


# --- files ----------------------------------------------------------------------------------


def _looks_like_safetensors(path: Path) -> bool:
    """A safetensors file starts with a little-endian u64 header length, then '{'."""
    if path.suffix == ".safetensors":
        return True
    with open(path, "rb") as fh:
        head = fh.read(9)
    if len(head) < 9 or head[8:9] != b"{":
        return False
    (n,) = struct.unpack("<Q", head[:8])
    return 0 < n < path.stat().st_size


def _safetensors(path: Path) -> SafetensorsStore:
    check_file(path)
    try:
        import safetensors  # noqa: F401 - an optional dependency; absent, the file is not at fault
    except ImportError:
        raise UsageError(f"{path} is a safetensors file, and reading one needs the safetensors "
                         "package: pip install safetensors") from None
    try:
        store = SafetensorsStore(path)
        for name in store.names():
            store.info(name)  # validates every header entry now, not halfway through the report
        return store
    except Exception as exc:  # noqa: BLE001 - SafetensorError, OSError, ... all mean "bad file"
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"{path}: cannot read it as a safetensors file ({reason[:160]}); the file is "
                         "truncated or corrupt. Re-copy it, or use an earlier checkpoint") from None


# --- folders --------------------------------------------------------------------------------


def _open_folder(folder: Path, *, trust: bool) -> Ckpt:
    states = deepspeed.model_states_file(folder)
    if states is not None:  # DeepSpeed's global_stepN/: the model states, the optimizer beside them
        return open_checkpoint(states, trust=trust)
    files = {p.name: p for p in folder.iterdir() if p.is_file()}
    ck = Ckpt(path=folder, format="hf-folder")
    weights = next((files[n] for n in _HF_WEIGHTS if n in files), None)
    opt = next((files[n] for n in ("optimizer.pt", "optimizer.bin") if n in files), None)
    sched = next((files[n] for n in ("scheduler.pt", "scheduler.bin") if n in files), None)
    rng = sorted(n for n in files if n.startswith(("rng_state", "random_states")))
    state_json = files.get("trainer_state.json")
    if weights is None and opt is None and state_json is None:
        raise UsageError(no_checkpoint_hint(folder, files))
    if "optimizer.bin" in files or any(n.startswith("random_states") for n in files):
        ck.format = "accelerate-folder"
    if weights is not None:
        ck.model = _folder_weights(weights, trust=trust)
    if opt is not None:
        obj, ck.mapped = torch_load(opt, trust=trust)
        if _is_optimizer(obj):
            ck.optimizers.append(obj)
        else:
            ck.notes.append(f"{opt.name} does not hold an optimizer state_dict")
    if sched is not None:
        obj, _ = torch_load(sched, trust=trust)
        if isinstance(obj, Mapping):
            ck.schedulers.append(obj)
        ck.has.add("scheduler")
    if "scaler.pt" in files:
        ck.has.add("scaler")
    if rng:
        ck.has.add("rng")  # presence is what matters; the files are never unpickled
    if state_json is not None:
        try:
            state = json.loads(state_json.read_text(encoding="utf-8"))
            ck.step = int_like(state.get("global_step"))
            epoch = state.get("epoch")
            ck.epoch = float(epoch) if isinstance(epoch, (int, float)) and math.isfinite(epoch) else None
            ck.has.add("step")
        except (OSError, ValueError, AttributeError) as exc:
            ck.notes.append(f"trainer_state.json is unreadable ({exc}); step unknown")
    if "training_args.bin" in files:
        ck.notes.append("training_args.bin is a pickled Python object and was not loaded")
    ck.training = ck.model is not None and bool(opt or sched or rng or state_json)
    ck.file_bytes = sum(p.stat().st_size for p in files.values())
    finish_reading(ck)
    return ck


def _folder_weights(path: Path, *, trust: bool) -> Store:
    if path.name.endswith(".index.json"):
        try:
            index = json.loads(path.read_text(encoding="utf-8"))
            weight_map = dict(index["weight_map"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise UsageError(f"{path}: not a valid shard index ({exc}); re-download the checkpoint") from None
        shards: dict[str, Store] = {}
        parts: dict[str, tuple[Store, str]] = {}
        for name, shard in weight_map.items():
            if shard not in shards:
                shard_path = path.parent / str(shard)
                if not shard_path.is_file():
                    raise UsageError(f"{path} names the shard {shard}, which is missing: the download "
                                     "or copy is incomplete; fetch the missing file")
                shards[shard] = _weights_file(shard_path, trust=trust)
            if name not in shards[shard]:
                raise UsageError(f"{path} maps {name} to {shard}, which does not hold it; the "
                                 "index and shards come from different saves")
            parts[name] = (shards[shard], name)
        return MultiStore(parts)
    return _weights_file(path, trust=trust)


def _weights_file(path: Path, *, trust: bool) -> Store:
    if _looks_like_safetensors(path):
        return _safetensors(path)
    obj, mapped = torch_load(path, trust=trust)
    if not (isinstance(obj, Mapping) and _is_state_dict(obj)):
        raise UsageError(f"{path}: expected a state_dict of tensors, found a {type(obj).__name__}")
    return TorchStore(_tensors_of(obj), mapped=mapped)


# --- objects from torch.load ----------------------------------------------------------------


def from_object(obj: object, path: Path, *, trust: bool, mapped: bool) -> Ckpt:
    import torch

    if trust and hasattr(obj, "state_dict") and callable(obj.state_dict):  # an nn.Module or optimizer
        obj = obj.state_dict()
    if isinstance(obj, torch.Tensor):
        return Ckpt(path=path, format="tensor", model=TorchStore({"tensor": obj}, mapped=mapped),
                    mapped=mapped)
    if not isinstance(obj, Mapping) or not obj:
        what = "an empty dict" if isinstance(obj, Mapping) else f"a {type(obj).__name__}"
        raise UsageError(f"{path} holds {what}, not a checkpoint (a state_dict or a dict with a "
                         "model state_dict); pass the file written by torch.save(model.state_dict())")
    if _is_state_dict(obj):
        return Ckpt(path=path, format="state-dict", model=TorchStore(_tensors_of(obj), mapped=mapped),
                    mapped=mapped)
    if _is_optimizer(obj):
        ck = Ckpt(path=path, format="optimizer", optimizers=[obj], mapped=mapped)
        ck.notes.append("an optimizer state_dict alone: no weights to inspect")
        return ck
    if "state_dict" in obj and ("pytorch-lightning_version" in obj or "optimizer_states" in obj):
        return _lightning(obj, path, mapped)
    if deepspeed.is_optim_states(obj):
        return _deepspeed_optimizer(obj, path, mapped)
    ck = _training_dict(obj, path, mapped)
    apart = deepspeed.optimizer_apart(obj) if deepspeed.is_model_states(obj) else ""
    if apart:  # written by the same save_checkpoint call, beside this file
        ck.format = "deepspeed"
        ck.has.add("optimizer")
        ck.training = ck.model is not None
        ck.notes.append(f"DeepSpeed ({apart}) saves the optimizer's state beside this file, in "
                        f"{deepspeed.OPTIM_STATES}")
    return ck


def _deepspeed_optimizer(obj: Mapping[object, object], path: Path, mapped: bool) -> Ckpt:
    ck = Ckpt(path=path, format="deepspeed-optimizer", mapped=mapped)
    base = deepspeed.base_optimizer(obj)
    if base is not None:
        ck.optimizers.append(base)
    ck.notes.append("a DeepSpeed ZeRO optimizer file: one rank's optimizer state, no weights "
                    f"(they are in {deepspeed.MODEL_STATES} beside it)")
    return ck


def _lightning(obj: Mapping[str, object], path: Path, mapped: bool) -> Ckpt:
    ck = Ckpt(path=path, format="lightning", mapped=mapped)
    sd = obj.get("state_dict")
    if isinstance(sd, Mapping) and _is_state_dict(sd):
        ck.model = TorchStore(_tensors_of(sd), mapped=mapped)
    ck.optimizers = [o for o in _as_list(obj.get("optimizer_states")) if _is_optimizer(o)]
    ck.schedulers = [s for s in _as_list(obj.get("lr_schedulers")) if isinstance(s, Mapping)]
    if ck.schedulers:
        ck.has.add("scheduler")
    if any(_is_scaler(v) or k in _SCALER_KEYS for k, v in obj.items()):
        ck.has.add("scaler")
    ck.step = int_like(obj.get("global_step"))
    ck.epoch = int_like(obj.get("epoch"))
    if ck.step is not None or ck.epoch is not None:
        ck.has.add("step")
    ck.training = bool(ck.optimizers)
    if not ck.optimizers:
        ck.notes.append("Lightning checkpoint without optimizer_states (save_weights_only=True): "
                        "weights only, it cannot resume training")
    return ck


def _training_dict(obj: Mapping[object, object], path: Path, mapped: bool) -> Ckpt:
    ck = Ckpt(path=path, format="torch-dict", mapped=mapped)
    candidates: dict[str, Mapping[str, object]] = {}
    for key, value in obj.items():
        k = str(key)
        if _is_optimizer(value):
            ck.optimizers.append(value)
        elif isinstance(value, (list, tuple)) and value and all(_is_optimizer(v) for v in value):
            ck.optimizers.extend(value)
        elif _is_scaler(value) or (k in _SCALER_KEYS and value is not None):
            ck.has.add("scaler")
        elif _is_scheduler(value) or (k in _SCHEDULER_KEYS and value is not None):
            ck.schedulers.extend(s for s in _as_list(value) if isinstance(s, Mapping))
            ck.has.add("scheduler")
        elif k in STEP_KEYS and int_like(value) is not None:
            ck.step = int_like(value) if ck.step is None else ck.step
        elif k in EPOCH_KEYS and int_like(value) is not None:
            ck.epoch = int_like(value)
        elif is_rng_key(k) and value is not None:
            ck.has.add("rng")
        elif k in _EMA_KEYS and value is not None:
            ck.has.add("ema")
            if isinstance(value, Mapping) and _is_state_dict(value, loose=True):
                ck.ema = TorchStore(_tensors_of(value), mapped=mapped)
            else:
                ck.notes.append(f"the EMA under {k!r} is not a state_dict; its buffers were not checked")
        elif isinstance(value, Mapping) and _is_state_dict(value):
            candidates[k] = value
        elif isinstance(value, Mapping) and (k in META_KEYS or is_progress(value)):
            for mk, mv in value.items():
                if str(mk) in STEP_KEYS and ck.step is None:
                    ck.step = int_like(mv)
                elif str(mk) in EPOCH_KEYS and ck.epoch is None:
                    ck.epoch = int_like(mv)
        elif value is not None and (k in _CONFIG_KEYS or set(re.split(r"[^a-z0-9]+", k.lower())) & _METRIC_WORDS):
            ck.meta.append(k)
    if ck.step is not None or ck.epoch is not None:
        ck.has.add("step")
    chosen = next((k for k in _MODEL_KEYS if k in candidates), None)
    if chosen is None and candidates:
        chosen = max(candidates, key=lambda k: len(candidates[k]))
    if chosen is not None:
        ck.model = TorchStore(_tensors_of(candidates[chosen]), mapped=mapped)
        if len(candidates) > 1:
            others = ", ".join(sorted(set(candidates) - {chosen}))
            ck.notes.append(f"model weights read from {chosen!r}; other state_dicts: {others}")
    elif not ck.optimizers:
        keys = ", ".join(map(str, list(obj)[:8]))
        raise UsageError(f"{path} is a dict without model weights or optimizer state (keys: {keys}); "
                         "pass a checkpoint written with torch.save(model.state_dict()) or "
                         '{"model": model.state_dict(), ...}')
    ck.training = ck.model is not None and bool(ck.optimizers or ck.has & set(TRAINING_PARTS))
    if not ck.training and ck.model is not None and ck.meta and _training_meta(ck.meta, path.name):
        # Weights with the run's config or its best metric beside them: saved by a training loop
        # to resume or to pick up from, not a bare export; it holds no training state.
        ck.training = True
        ck.notes.append(f"holds {', '.join(map(repr, ck.meta[:4]))} beside the weights: a training checkpoint, "
                        "but with no optimizer, scheduler, step or RNG state")
    ck.counters = counters(obj)
    return ck


def _training_meta(keys: list[str], name: str) -> bool:
    """Do metadata ``keys`` beside the weights make a training checkpoint? A model config alone
    in a file named as an export (``model_final.pt``, ``export.pt``) is how exports are saved."""
    only_model_config = all(k in _MODEL_CONFIG_KEYS for k in keys)
    return not (only_model_config and export_name(name))


# An fp16 GradScaler skips steps the optimizer does not count: a few while the scale settles,
# then about one per growth_interval (2000 steps by default).
def _skip_slack(steps: int) -> int:
    return 16 + steps // 1000


def find_step(ck: Ckpt, optimizer_steps: int | None, run_steps: int | None = None) -> str | None:
    """Recognize a step counter under a name no list holds by what it is: one of ``counters``
    equal, up to one (a 0- or 1-based count), to the optimizer's own step count (Adam's
    ``state[..]["step"]``; the steps an fp16 GradScaler skipped may come on top) or to
    ``run_steps`` (the steps a live run took so far). Only in a training checkpoint with an
    optimizer state. Sets ``step``, adds it to ``has`` and returns the key; None if none is."""
    if "step" in ck.has or not ck.optimizers or not ck.counters:
        return None
    refs = [(optimizer_steps, _skip_slack(optimizer_steps) if optimizer_steps else 0, "the optimizer's own step count"),
            (run_steps, 0, "the steps this run took")]
    for key, value in ck.counters.items():
        for n, slack, what in refs:
            if n is not None and n - 1 <= value <= n + 1 + slack:
                _mark_step(ck, key, value, f"matches {what} ({n})")
                return key
    return None


def find_step_between(old: Ckpt, new: Ckpt) -> str | None:
    """A counter both training checkpoints (with optimizer states) hold that grew from OLD to
    NEW counts their steps: marks it in both, returns its key; None if there is none."""
    if not (old.optimizers and new.optimizers) or ("step" in old.has and "step" in new.has):
        return None
    for key, value in new.counters.items():
        before = old.counters.get(key)
        if before is not None and value > before:
            for ck, n in ((old, before), (new, value)):
                if "step" not in ck.has:
                    _mark_step(ck, key, n, f"grows between the two checkpoints ({before} -> {value})")
            return key
    return None


def _mark_step(ck: Ckpt, key: str, value: int, why: str) -> None:
    ck.step = value if ck.step is None else ck.step
    ck.has.add("step")
    ck.notes.append(f"step counter: {key!r} = {value} ({why})")


def finish_reading(ck: Ckpt) -> None:
    """Split an EMA stored inside the model's state_dict; fill ``has``."""
    if ck.model is not None and ck.ema is None:
        names = ck.model.names()
        prefix = next((p for p in _EMA_PREFIXES if any(n.startswith(p) for n in names)), None)
        if prefix is not None and any(not n.startswith(prefix) for n in names):
            ema = {n[len(prefix):]: (ck.model, n) for n in names if n.startswith(prefix)}
            rest = {n: (ck.model, n) for n in names if not n.startswith(prefix)}
            ck.ema, ck.model = MultiStore(ema), MultiStore(rest)
            ck.has.add("ema")
    if ck.model is not None and ck.model.names():
        ck.has.add("model")
    if ck.optimizers:
        ck.has.add("optimizer")
    if ck.ema is not None:
        ck.has.add("ema")


# --- recognizers ----------------------------------------------------------------------------


def _is_state_dict(obj: Mapping[K, object], *, loose: bool = False) -> bool:
    """All values are tensors (``_extra_state`` aside); ``loose`` also allows a few scalars."""
    import torch

    if not obj:
        return False
    tensors = sum(isinstance(v, torch.Tensor) for v in obj.values())
    others = [k for k, v in obj.items() if not isinstance(v, torch.Tensor)
              and not str(k).endswith("_extra_state")]
    if loose:
        return tensors > 0 and len(others) <= max(2, tensors // 10)
    return tensors > 0 and not others and all(isinstance(k, str) for k in obj)


def _tensors_of(obj: Mapping[K, object]) -> dict[str, torch.Tensor]:
    import torch

    return {str(k): v for k, v in obj.items() if isinstance(v, torch.Tensor)}


def _is_optimizer(obj: object) -> TypeGuard[Mapping[str, object]]:
    return isinstance(obj, Mapping) and "state" in obj and isinstance(obj.get("param_groups"), list)


def _is_scheduler(obj: object) -> bool:
    if isinstance(obj, (list, tuple)) and obj:
        return all(_is_scheduler(o) for o in obj)
    return isinstance(obj, Mapping) and ("base_lrs" in obj or "_last_lr" in obj) and "last_epoch" in obj


def _is_scaler(obj: object) -> bool:
    return isinstance(obj, Mapping) and "scale" in obj and "growth_factor" in obj


def _as_list(obj: object) -> list[object]:
    if obj is None:
        return []
    return list(obj) if isinstance(obj, (list, tuple)) else [obj]
