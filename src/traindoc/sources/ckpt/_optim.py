"""Stored optimizer states: their class, groups, step count, and which parameter is which.

A torch optimizer ``state_dict`` knows its parameters only by position (``params: [0, 1, ...]``)
unless it was built from named parameters (``param_names``). We name them from the model's
state_dict only when that is unambiguous: the same number of trainable tensors in the same
order, and every stored moment has its parameter's shape. Otherwise names stay unknown, and
nothing downstream pretends otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence, SupportsFloat, cast

from traindoc.sources.ckpt._tensors import Store, _dontneed, _dontneed_range

if TYPE_CHECKING:
    import torch

# State-dict entries that are buffers, not parameters (never trained by an optimizer).
BUFFER_SUFFIXES = ("running_mean", "running_var", "num_batches_tracked", "inv_freq", "position_ids",
                   "n_averaged", "masked_bias", "_float_tensor", "_extra_state")


@dataclass
class Group:
    index: int
    lr: float
    initial_lr: float | None
    weight_decay: float
    momentum: float  # SGD momentum or Adam beta1
    params: list[object]
    names: list[str] | None  # ``param_names`` when the optimizer stored them
    raw: Mapping[str, object]


@dataclass
class Opt:
    index: int
    cls: str
    groups: list[Group]
    state: Mapping[object, Mapping[str, object]]
    steps: int | None  # the optimizer's own step count (max over parameters)
    where: dict[object, int] = field(default_factory=dict)  # param id -> group index

    def moment(self, pid: object) -> torch.Tensor | None:
        """The per-parameter tensor whose dtype and shape are the parameter's own."""
        import torch

        st = self.state.get(pid) or {}
        for key in ("exp_avg", "momentum_buffer", "square_avg", "sum", "exp_avg_sq", "exp_inf"):
            value = st.get(key)
            if isinstance(value, torch.Tensor) and value.dim() > 0:
                return value
        return None


def parse(sd: Mapping[str, object], index: int) -> Opt:
    import torch

    state = sd.get("state") or {}
    state = state if isinstance(state, Mapping) else {}
    groups: list[Group] = []
    raw_groups = sd.get("param_groups") or []
    for gi, g in enumerate(raw_groups if isinstance(raw_groups, Iterable) else []):
        if not isinstance(g, Mapping):
            continue
        betas = g.get("betas")
        beta1 = betas[0] if isinstance(betas, (list, tuple)) and betas else g.get("momentum", 0.0)
        names = g.get("param_names")
        groups.append(Group(
            index=gi, lr=_num(g.get("lr")), initial_lr=_num(g["initial_lr"]) if "initial_lr" in g else None,
            weight_decay=_num(g.get("weight_decay", 0.0)), momentum=_num(beta1 or 0.0),
            params=list(g.get("params") or []),
            names=[str(n) for n in names] if isinstance(names, (list, tuple)) else None, raw=g,
        ))
    keys = {k for st in state.values() if isinstance(st, Mapping) for k in st}
    raw_keys = {k for g in groups for k in g.raw}
    if "exp_avg_sq" in keys or (not keys and "betas" in raw_keys):
        cls = "Adam-family"
    elif "ns_steps" in raw_keys:
        cls = "Muon"
    elif "momentum_buffer" in keys or (not keys and {"momentum", "dampening"} <= raw_keys):
        cls = "SGD-family"
    elif "square_avg" in keys:
        cls = "RMSprop"
    elif "sum" in keys:
        cls = "Adagrad"
    else:
        cls = "unknown"
    steps = [int(_num(st["step"])) for st in state.values()
             if isinstance(st, Mapping) and isinstance(st.get("step"), (int, float, torch.Tensor))
             and math.isfinite(_num(st["step"]))]
    opt = Opt(index=index, cls=cls, groups=groups, state=state, steps=max(steps) if steps else None)
    opt.where = {pid: g.index for g in groups for pid in g.params}
    return opt


def _num(value: object) -> float:
    """A float from a number or a one-element tensor (an LR may be a tensor); NaN otherwise."""
    try:
        return float(cast(SupportsFloat, value))  # anything else raises, as the except expects
    except (TypeError, ValueError, RuntimeError):
        return math.nan


def is_param_like(name: str, dtype: str, shape: Sequence[int]) -> bool:
    """Could this state_dict entry be a trained parameter (rather than a buffer)?"""
    if not dtype.startswith(("float", "bfloat")):
        return False
    if name.rsplit(".", 1)[-1] in BUFFER_SUFFIXES:
        return False
    # GPT-2 style causal masks: ``attn.bias`` of shape (1, 1, n, n).
    if name.endswith(".bias") and len(shape) == 4 and shape[0] == shape[1] == 1:
        return False
    return True


@dataclass(frozen=True)
class Slot:
    optimizer: int
    group: int
    pid: object


def map_names(opts: Sequence[Opt], model: Store | None) -> dict[str, Slot]:
    """Model tensor name -> optimizer slot, when it can be known; {} otherwise."""
    if model is None or not opts:
        return {}
    names = model.names()
    out: dict[str, Slot] = {}
    for opt in opts:  # named optimizers (torch >= 2.6 built from named_parameters())
        for g in opt.groups:
            if g.names and len(g.names) == len(g.params):
                for n, pid in zip(g.names, g.params):
                    out[n] = Slot(opt.index, g.index, pid)
    if out:
        return {n: s for n, s in out.items() if n in set(names)}
    params = [n for n in names if is_param_like(n, model.info(n).dtype, model.info(n).shape)]
    slots = [Slot(o.index, g.index, pid) for o in opts for g in o.groups for pid in g.params]
    if len(params) != len(slots) or not slots:
        return {}
    verified = 0
    by_index = {o.index: o for o in opts}
    for n, s in zip(params, slots):
        m = by_index[s.optimizer].moment(s.pid)
        if m is None:
            continue
        if tuple(m.shape) != model.info(n).shape:
            return {}
        verified += 1
    return dict(zip(params, slots)) if verified else {}


def intended_update(opt: Opt, slot: Slot, *, mapped: bool) -> float | None:
    """The optimizer's typical |update| per element for this parameter: an RMS over elements.

    Adam-family: lr * m_hat / (sqrt(v_hat) + eps) from the stored moments; SGD-family:
    lr * momentum_buffer. None for other optimizers (Muon's update is orthogonalized). A typical
    magnitude needs no exactness: at most ``SAMPLE`` elements are read, in contiguous blocks
    spread over the tensor, so a multi-GB optimizer state costs a few MB of reads.
    """
    import torch

    st = opt.state.get(slot.pid) or {}
    g = opt.groups[slot.group].raw if slot.group < len(opt.groups) else {}
    lr = _num(g.get("lr"))
    if not math.isfinite(lr):
        return None
    m, v = st.get("exp_avg"), st.get("exp_avg_sq")
    if opt.cls == "Adam-family" and isinstance(m, torch.Tensor) and isinstance(v, torch.Tensor):
        if m.shape != v.shape or m.numel() == 0:
            return None
        t = max(_num(st.get("step", 1)), 1.0)
        betas = g.get("betas", (0.9, 0.999))
        if not isinstance(betas, (list, tuple)) or len(betas) < 2:
            return None  # no (beta1, beta2) to debias the moments with
        b1, b2 = _num(betas[0]), _num(betas[1])
        eps = _num(g.get("eps", 1e-8))
        mc = _sample(m, mapped).double() / (1 - b1 ** t)
        vc = _sample(v, mapped).double() / (1 - b2 ** t)
        u = mc / (vc.clamp_min(0).sqrt() + eps)
        rms = float(u.pow(2).mean().sqrt())
    elif opt.cls == "SGD-family" and isinstance(buf := st.get("momentum_buffer"), torch.Tensor):
        if buf.numel() == 0:
            return None
        rms = float(_sample(buf, mapped).double().pow(2).mean().sqrt())
    else:
        return None
    return lr * rms if math.isfinite(rms) else None


SAMPLE = 1 << 18  # elements read per state tensor for the intended update
_BLOCKS = 64


def _sample(t: torch.Tensor, mapped: bool) -> torch.Tensor:
    """A copy of up to SAMPLE elements of ``t``: all of them, or _BLOCKS contiguous blocks
    evenly spread. For an mmap'd tensor, readahead is turned off first (it would map megabytes
    around each block) and the pages are dropped after."""
    import torch

    flat = t.reshape(-1)
    n, item = flat.numel(), flat.element_size()
    if n <= SAMPLE:
        out = flat.clone()
    else:
        base, end = flat.data_ptr(), flat.data_ptr() + n * item
        if mapped:
            _dontneed_range(base, end - base, advice=1)  # MADV_RANDOM
        size = SAMPLE // _BLOCKS
        pieces = []
        for i in range(_BLOCKS):
            start = round(i * (n - size) / (_BLOCKS - 1))
            pieces.append(flat[start:start + size].clone())
            if mapped:  # the kernel maps whole folios (up to 2 MiB) around a read: drop them now
                lo = max(base, base + start * item - _FOLIO)
                hi = min(end, base + (start + size) * item + _FOLIO)
                _dontneed_range(lo, hi - lo)
        out = torch.cat(pieces)
    if mapped:
        _dontneed(t)
    return out


_FOLIO = 2 << 20


def stored_dtypes(opt: Opt, group: Group, names: Mapping[object, str], model: Store | None) -> tuple[str, ...]:
    """Per parameter of the group: the dtype the optimizer saw (its moment's), else the model's.

    ``names`` maps this optimizer's parameter ids to model tensor names (may be empty).
    """
    out = []
    for pid in group.params:
        m = opt.moment(pid)
        if m is not None:
            out.append(str(m.dtype))
        elif model is not None and pid in names:
            out.append("torch." + model.info(names[pid]).dtype)
        else:
            out.append("")
    return tuple(out)
