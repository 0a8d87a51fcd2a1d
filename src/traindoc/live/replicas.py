"""Which tensors every rank should hold alike, and their fingerprint (for ``live/ranks.py``).

A tensor is compared across ranks only when something keeps it alike on every rank:

- DDP: the parameters of a ``DistributedDataParallel`` module among the training loop's
  variables (less its ``parameters_to_ignore``): DDP broadcasts them at wrap time and averages
  their gradients;
- the script: a parameter whose storage, or its gradient's, the script passed to
  ``dist.all_reduce`` or ``dist.broadcast`` (a hand-written data-parallel loop, the replicated
  norm of a hand-written tensor-parallel layer; seen by ``live/collectives.py``);
- a DTensor whose placements are all ``Replicate``, and the plain parameters of a model whose
  other parameters are DTensors (``parallelize_module`` leaves the layers it does not split,
  a LayerNorm, a head, as plain tensors that every rank computes from the same inputs);
- a copy of one of those (an EMA or averaged model): another module of the loop's variables
  whose floating-point parameters have the same shapes, in order, as a compared module's.

Everything else differs per rank by design or may: DTensor shards (FSDP2, tensor parallelism),
the plain-tensor shards of a hand-written tensor-parallel layer, a model each rank trains on
its own. Those are counted (``sharded``, ``unsynced``), never compared.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from traindoc.events import RankParams
from traindoc.live import measure
from traindoc.live.objects import ObjectMap

K = 4  # elements sampled per tensor
MAX_TENSORS = 4096


def fingerprint(session: Any, step: int, rank: int, size: int, synced: ObjectMap | None = None) -> RankParams:
    """Sum, sum of magnitudes and ``K`` strided elements of every compared floating-point
    tensor, read back with one transfer per device. Replicas run the same reduction on the
    same values, so a healthy job gives bit-identical fingerprints. ``synced``: the parameters
    the script synchronises itself (see the module docstring)."""
    names, tensors, sharded, unsynced = replicated(session, synced if synced is not None else ObjectMap())
    by_device: dict[Any, list[int]] = {}
    for i, t in enumerate(tensors):
        by_device.setdefault(t.device, []).append(i)
    rows: list[list[float]] = [[] for _ in tensors]
    with torch.no_grad():
        for idxs in by_device.values():
            parts = []
            for i in idxs:
                flat = tensors[i].detach().reshape(-1)
                n = flat.numel()
                picks = flat[torch.linspace(0, n - 1, K, device=flat.device).long()] if n else flat.new_zeros(K)
                # float32 accumulation (float64 for float64 tensors): a float64 reduction costs
                # 14 ns per element on a CPU core, 0.6 s per sampled step for 21M parameters.
                acc = torch.float64 if flat.dtype == torch.float64 else torch.float32
                parts.append(torch.cat([flat.sum(dtype=acc).reshape(1).double(),
                                        flat.abs().sum(dtype=acc).reshape(1).double(),
                                        picks.to(torch.float64)]))
            values = torch.stack(parts).tolist()  # the sync point: one per device per sampled step
            for i, row in zip(idxs, values):
                rows[i] = row
    return RankParams(step=step, rank=rank, world_size=size, names=tuple(names),
                      sums=tuple(r[0] for r in rows), scales=tuple(r[1] for r in rows),
                      samples=tuple(v for r in rows for v in r[2:]), sharded=sharded, unsynced=unsynced)


def replicated(session: Any, synced: ObjectMap) -> tuple[list[str], list[torch.Tensor], int, int]:
    """(names, local tensors, sharded count, unsynced count): the compared parameters of the
    optimizers, then those of the copies among the loop's modules, each tensor once."""
    from torch.nn.parallel import DistributedDataParallel

    loop = _loop_modules()
    kept = ObjectMap()  # parameter -> True: DDP keeps it alike
    for _, module in loop:
        if isinstance(module, DistributedDataParallel):
            ignore = set(getattr(module, "parameters_to_ignore", ()) or ())
            for name, p in module.module.named_parameters():
                if name not in ignore:
                    kept[p] = True
    params = [p for opt in session.optimizers() for group in opt.param_groups for p in group["params"]]
    dtensors = any(hasattr(p, "placements") for p in params)  # a DTensor-parallel model: plain ones replicated
    seen = ObjectMap()
    compared = ObjectMap()
    names: list[str] = []
    tensors: list[torch.Tensor] = []
    sharded = unsynced = 0

    def add(name: str, p: Any, copy: bool = False) -> None:
        nonlocal sharded, unsynced
        if p in seen or len(tensors) >= MAX_TENSORS or not p.is_floating_point():
            return
        seen[p] = True
        if is_shard(p):
            sharded += 1
        elif not (copy or dtensors or p in kept or p in synced or hasattr(p, "placements")):
            unsynced += 1
        else:
            local = measure.local(p).detach()
            if local.numel():
                compared[p] = True
                names.append(name)
                tensors.append(local)

    for p in params:
        add(session.model.param_name(p), p)
    # The shapes of the modules whose every parameter is compared: a module with the same
    # shapes is a copy of one of them (an EMA), meant to stay alike as well.
    mirrored = set()
    for _, module in loop:
        params = [p for p in module.parameters() if p.is_floating_point()]
        if params and all(p in compared for p in params):
            mirrored.add(tuple(tuple(p.shape) for p in params))
    for var, module in loop:
        params = [(n, p) for n, p in module.named_parameters() if p.is_floating_point()]
        copy = bool(params) and tuple(tuple(p.shape) for _, p in params) in mirrored
        for name, p in params:
            add(f"{var}.{name}", p, copy)
    return names, tensors, sharded, unsynced


def is_shard(p: Any) -> bool:
    """Is ``p`` a DTensor that is not replicated on every rank (an FSDP2 or tensor-parallel
    shard)? Cheap for plain tensors: one attribute lookup."""
    placements = getattr(p, "placements", None)
    return placements is not None and not all(type(pl).__name__ == "Replicate" for pl in placements)


def _loop_modules() -> list[tuple[str, Any]]:
    """(variable name, module) of the nn.Modules in the user's frames: their local variables and
    the attributes of their objects one level down (``self.ema``, ``trainer.model``)."""
    from traindoc.live.objects import is_user_file

    found: list[tuple[str, Any]] = []
    ids: set[int] = set()

    def take(name: str, value: Any) -> None:
        if isinstance(value, torch.nn.Module) and id(value) not in ids:
            ids.add(id(value))
            found.append((name, value))

    frame: Any = sys._getframe(1)
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            for name, value in list(frame.f_locals.items()):
                if isinstance(value, torch.nn.Module):
                    take(name, value)
                elif hasattr(value, "__dict__") and not isinstance(value, type) and name == "self":
                    for attr, sub in list(vars(value).items()):
                        take(f"{name}.{attr}", sub)
        frame = frame.f_back
    return found


def synced_params(session: Any, storages: set[int], into: ObjectMap) -> None:
    """Mark in ``into`` the optimizers' parameters whose storage or gradient's storage is one of
    ``storages`` (those the script passed to an all-reduce or a broadcast)."""
    if not storages:
        return
    for opt in session.optimizers():
        for group in opt.param_groups:
            for p in group["params"]:
                if p in into:
                    continue
                for t in (p, p.grad):
                    if t is not None and _storage(t) in storages:
                        into[p] = True
                        break


def _storage(t: torch.Tensor) -> int:
    try:
        return int(t.untyped_storage().data_ptr())
    except Exception:  # a DTensor or a tensor without storage
        return -1


__all__ = ["fingerprint", "is_shard", "replicated", "synced_params"]
