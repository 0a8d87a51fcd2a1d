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

Any record missing or not as described (another version, another optimizer) gives no pieces:
the flat tensors are then measured whole, as before."""

from __future__ import annotations

from typing import Any

import torch

# (name, offset in the flat tensor, elements)
Piece = tuple[str, int, int]


def zero_pieces(engine: Any) -> list[tuple[torch.Tensor, tuple[Piece, ...]]]:
    """Per flat fp32 partition the ZeRO optimizer of ``engine`` steps, the pieces it holds,
    named as the engine names its parameters (``module.`` and the model's names)."""
    inner = engine.optimizer
    names = {p: f"module.{n}" for n, p in engine.module.named_parameters()}
    try:
        if hasattr(inner, "fp32_partitioned_groups_flat"):
            return _stage3(inner, names)
        if hasattr(inner, "single_partition_of_fp32_groups"):
            return _stages12(inner, names)
    except (AttributeError, IndexError, TypeError, ValueError, RuntimeError):
        pass  # records of another shape: measured whole
    return []


def zero_params(engine: Any) -> list[torch.Tensor] | None:
    """The model's parameters the ZeRO optimizer of ``engine`` steps, on every rank (those
    trainable when it was built); None when it is no ZeRO optimizer."""
    inner = engine.optimizer
    if hasattr(inner, "fp32_partitioned_groups_flat"):
        groups = getattr(inner, "fp16_groups", None)
    elif hasattr(inner, "single_partition_of_fp32_groups"):
        groups = getattr(inner, "bit16_groups", None)
    else:
        return None
    return [p for g in groups for p in g] if isinstance(groups, list) else None


def zero_groups(engine: Any) -> tuple[Any, list[tuple[Any, list[torch.Tensor]]]]:
    """The torch optimizer a ZeRO optimizer steps one parameter group at a time (with only that
    group in view: stages 1 and 2 hand it a one-group list, stage 3 empties the other groups),
    and its whole groups: (the group's dict, the flat partitions it steps) each. Read before a
    step, when all the groups are in place; (None, []) for anything else."""
    inner = engine.optimizer
    opt: Any = getattr(inner, "optimizer", None)
    try:
        if hasattr(inner, "fp32_partitioned_groups_flat"):
            owner = inner.sub_group_to_group_id
            flats = list(inner.fp32_partitioned_groups_flat)
            return opt, [(g, [f for s, f in enumerate(flats) if owner[s] == i]) for i, g in enumerate(opt.param_groups)]
        if hasattr(inner, "single_partition_of_fp32_groups"):
            return opt, [(g, list(g["params"])) for g in opt.param_groups]
    except (AttributeError, KeyError, TypeError):
        pass
    return None, []


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
                return []  # not a view of the buffer: the layout is not known
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
                return []
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
