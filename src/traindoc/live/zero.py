"""Where each of the model's parameters lies in the flat partitions a DeepSpeed ZeRO optimizer
steps. ZeRO's torch optimizer holds one flat fp32 tensor per group (this rank's partition of
every parameter of the group, end to end), so a measurement of what it holds names nothing the
user wrote and sums a layer that gets no gradient into the rest. Cut into pieces, the flat
tensor is measured as the parameters it holds, under their own names.

Read from the ZeRO optimizer's own records, as they stand after ``deepspeed.initialize``:
- stages 1 and 2 flatten each group's 16-bit parameters into one buffer (``bit16_groups_flat``)
  whose ``parallel_partitioned_bit16_groups`` are the ranks' partitions; the model's
  parameters are views into that buffer, so where each lies is read from its storage offset,
  whatever the order (round-robin) and padding;
- stage 3 keeps each parameter's partition on this rank (``ds_tensor``, ``partition_numel()``
  elements, padded on the last rank by ``groups_padding``) end to end in
  ``fp32_partitioned_groups_flat``, in ``fp16_groups``' order.

The same records say which of the model's parameters ZeRO steps (those trainable when it was
built) and its optimizer's whole parameter groups, which ZeRO hands torch's optimizer one at a
time. Any record missing or not as described (another version, another optimizer) gives
nothing: the flat tensors are then measured whole and every parameter of the engine counts as
held, as before."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

# (name, offset in the flat tensor, elements)
Piece = tuple[str, int, int]


@dataclass(frozen=True)
class Zero:
    """What a ZeRO optimizer steps, read before a step (when all its groups are in place)."""

    optimizer: Any  # torch's optimizer, stepped one parameter group at a time, that group alone in view
    groups: list[tuple[Any, list[torch.Tensor]]]  # its whole groups: (the group's dict, its flat partitions)
    params: list[torch.Tensor]  # the model's parameters it steps, on every rank (trainable when built)
    pieces: list[tuple[torch.Tensor, tuple[Piece, ...]]]  # per flat partition, the parameters it holds


def read_zero(engine: Any) -> Zero | None:
    """The ZeRO optimizer of a DeepSpeed ``engine``, its parameters named as the engine names
    them (``module.`` and the model's names); None for another optimizer or other records."""
    inner = engine.optimizer
    opt: Any = getattr(inner, "optimizer", None)
    names = {p: f"module.{n}" for n, p in engine.module.named_parameters()}
    try:
        if hasattr(inner, "fp32_partitioned_groups_flat"):
            owner, flats = inner.sub_group_to_group_id, list(inner.fp32_partitioned_groups_flat)
            groups = [(g, [f for s, f in enumerate(flats) if owner[s] == i]) for i, g in enumerate(opt.param_groups)]
            return Zero(opt, groups, [p for g in inner.fp16_groups for p in g], _stage3(inner, names))
        if hasattr(inner, "single_partition_of_fp32_groups"):
            groups = [(g, list(g["params"])) for g in opt.param_groups]
            return Zero(opt, groups, [p for g in inner.bit16_groups for p in g], _stages12(inner, names))
    except (AttributeError, IndexError, KeyError, TypeError, ValueError, RuntimeError):
        pass  # records of another shape: the flat partitions are measured whole
    return None


def _stages12(inner: Any, names: dict[Any, str]) -> list[tuple[torch.Tensor, tuple[Piece, ...]]]:
    import torch.distributed as dist

    out = []
    for i, flat in enumerate(inner.bit16_groups_flat):
        rank = dist.get_rank(group=inner.real_dp_process_group[i])
        part = inner.parallel_partitioned_bit16_groups[i][rank]
        start = part.storage_offset() - flat.storage_offset()
        end = start + part.numel()
        storage = flat.untyped_storage().data_ptr()
        pieces = []
        for p in inner.bit16_groups[i]:
            if p not in names or p.untyped_storage().data_ptr() != storage:
                raise ValueError("not a view of the group's buffer: the layout is not known")
            at = p.storage_offset() - flat.storage_offset()
            lo, hi = max(at, start), min(at + p.numel(), end)
            if lo < hi:
                pieces.append((names[p], lo - start, hi - lo))
        fp32 = inner.single_partition_of_fp32_groups[i]
        out.append((fp32, _checked(pieces, fp32)))
    return out


def _stage3(inner: Any, names: dict[Any, str]) -> list[tuple[torch.Tensor, tuple[Piece, ...]]]:
    out = []
    for i, flat in enumerate(inner.fp32_partitioned_groups_flat):
        pieces, at = [], 0
        for p, padding in zip(inner.fp16_groups[i], inner.groups_padding[i], strict=True):
            if p not in names:
                raise ValueError("a parameter the engine's model does not hold")
            n = int(p.partition_numel())
            if n - padding > 0:  # a small parameter may lie wholly on other ranks
                pieces.append((names[p], at, n - int(padding)))
            at += n
        out.append((flat, _checked(pieces, flat)))
    return out


def _checked(pieces: list[Piece], flat: torch.Tensor) -> tuple[Piece, ...]:
    """The pieces, when they lie within ``flat`` without overlapping."""
    end = 0
    for _, at, n in sorted(pieces, key=lambda piece: piece[1]):
        if at < end or n <= 0:
            raise ValueError("overlapping pieces")
        end = at + n
    if end > flat.numel():
        raise ValueError("pieces past the partition's end")
    return tuple(pieces)
