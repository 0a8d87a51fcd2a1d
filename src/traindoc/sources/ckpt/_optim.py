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
from typing import TYPE_CHECKING, Mapping, Sequence

from traindoc.sources.ckpt._tensors import CHUNK, Store, _dontneed

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
    for gi, g in enumerate(sd.get("param_groups") or []):  # type: ignore[union-attr]
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
        return float(value)  # type: ignore[arg-type]
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
    """The optimizer's typical |update| per element for this parameter: the RMS over elements.

    Adam-family: lr * m_hat / (sqrt(v_hat) + eps) from the stored moments; SGD-family:
    lr * momentum_buffer. None for other optimizers (Muon's update is orthogonalized).
    """
    import torch

    st = opt.state.get(slot.pid) or {}
    g = opt.groups[slot.group].raw if slot.group < len(opt.groups) else {}
    lr = _num(g.get("lr"))
    if not math.isfinite(lr):
        return None
    if opt.cls == "Adam-family" and isinstance(st.get("exp_avg"), torch.Tensor) and isinstance(
            st.get("exp_avg_sq"), torch.Tensor):
        m, v = st["exp_avg"], st["exp_avg_sq"]
        if m.shape != v.shape or m.numel() == 0:
            return None
        t = max(_num(st.get("step", 1)), 1.0)
        betas = g.get("betas", (0.9, 0.999))
        b1, b2 = _num(betas[0]), _num(betas[1])  # type: ignore[index]
        eps = _num(g.get("eps", 1e-8))
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
        ss, n = 0.0, 0
        mf, vf = m.reshape(-1), v.reshape(-1)
        for i in range(0, mf.numel(), CHUNK):
            mc = mf[i:i + CHUNK].to(torch.float64) / bc1
            vc = vf[i:i + CHUNK].to(torch.float64) / bc2
            u = mc / (vc.sqrt() + eps)
            ss += float(torch.dot(u, u))
            n += u.numel()
        if mapped:
            _dontneed(m)
            _dontneed(v)
        return lr * math.sqrt(ss / n) if n and math.isfinite(ss) else None
    buf = st.get("momentum_buffer")
    if opt.cls == "SGD-family" and isinstance(buf, torch.Tensor) and buf.numel():
        ss = 0.0
        bf = buf.reshape(-1)
        for i in range(0, bf.numel(), CHUNK):
            c = bf[i:i + CHUNK].to(torch.float64)
            ss += float(torch.dot(c, c))
        if mapped:
            _dontneed(buf)
        return lr * math.sqrt(ss / bf.numel()) if math.isfinite(ss) else None
    return None


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
