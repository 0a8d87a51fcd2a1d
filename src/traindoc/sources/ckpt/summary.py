"""The summary printed before the findings: what a checkpoint holds, and what changed in a diff.

The data (``Summary``, ``DiffSummary``) is filled by ``produce`` and also written to the JSON
report's ``run.checkpoint``; the ``render_*`` functions draw it with rich.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence, TextIO

from traindoc.report import safe

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


@dataclass
class TensorRow:
    name: str
    dtype: str
    shape: tuple[int, ...]
    numel: int
    nbytes: int
    norm: float | None = None  # None for integer/bool tensors
    nonfinite: int = 0
    role: str = "model"


@dataclass
class GroupRow:
    optimizer: int
    cls: str
    group: int
    lr: float
    initial_lr: float | None
    params: int
    dtypes: str


@dataclass
class Summary:
    """What the inspect table shows (and the JSON report's ``run.checkpoint`` holds)."""

    path: str
    format: str
    training: bool
    step: int | None
    epoch: float | None
    optimizer_steps: int | None
    has: list[str]
    missing: list[str]
    file_bytes: int
    tensors: list[TensorRow] = field(default_factory=list)
    groups: list[GroupRow] = field(default_factory=list)
    sched_last_lrs: list[float] = field(default_factory=list)
    sched_base_lrs: list[float] = field(default_factory=list)
    bn: dict[str, tuple[int, int]] = field(default_factory=dict)  # role -> (modules, at init)
    notes: list[str] = field(default_factory=list)

    def by_dtype(self) -> dict[str, list[int]]:
        """dtype -> [tensors, elements, bytes]."""
        out: dict[str, list[int]] = {}
        for r in self.tensors:
            acc = out.setdefault(r.dtype, [0, 0, 0])
            acc[0] += 1
            acc[1] += r.numel
            acc[2] += r.nbytes
        return out

    def to_json(self, top: int = 10) -> dict[str, object]:
        by_dtype = self.by_dtype()
        largest = sorted(self.tensors, key=lambda r: -r.nbytes)[:top]
        return {
            "path": self.path, "format": self.format, "training": self.training, "step": self.step,
            "epoch": self.epoch, "optimizer_steps": self.optimizer_steps, "has": self.has,
            "missing": self.missing, "file_bytes": self.file_bytes,
            "tensor_bytes": sum(r.nbytes for r in self.tensors),
            "dtypes": {d: {"tensors": a[0], "elements": a[1], "bytes": a[2]} for d, a in by_dtype.items()},
            "largest": [{"name": r.name, "shape": list(r.shape), "dtype": r.dtype, "bytes": r.nbytes,
                         "norm": r.norm} for r in largest],
            "nonfinite": [r.name for r in self.tensors if r.nonfinite],
            "lrs": [{"optimizer": g.optimizer, "class": g.cls, "group": g.group, "lr": g.lr,
                     "initial_lr": g.initial_lr, "params": g.params} for g in self.groups],
            "scheduler_last_lr": self.sched_last_lrs, "scheduler_base_lrs": self.sched_base_lrs,
            "batchnorm": {role: {"modules": n, "at_init": k} for role, (n, k) in self.bn.items()},
            "notes": self.notes,
        }


@dataclass
class DiffRow:
    name: str
    dtype: str
    numel: int
    old_norm: float
    new_norm: float
    update: float | None  # ||new - old|| / ||old||
    moved: float
    unchanged: float
    is_param: bool


@dataclass
class DiffSummary:
    old: Summary
    new: Summary
    steps: int | None  # optimizer steps between the two; 0 at the same step, None when unknown
    rows: list[DiffRow] = field(default_factory=list)
    only_old: list[str] = field(default_factory=list)
    only_new: list[str] = field(default_factory=list)
    reshaped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self, top: int = 10) -> dict[str, object]:
        ranked = _ranked(self.rows)
        row = lambda r: {"name": r.name, "dtype": r.dtype, "numel": r.numel, "update": r.update,  # noqa: E731
                         "update_per_step": (r.update / self.steps) if r.update is not None and self.steps else None,
                         "moved": r.moved, "unchanged": r.unchanged}
        return {
            "old": self.old.to_json(top), "new": self.new.to_json(top), "steps": self.steps,
            "most_changed": [row(r) for r in ranked[:top]],
            "least_changed": [row(r) for r in ranked[::-1][:top]],
            "unchanged": [r.name for r in self.rows if r.is_param and r.moved == 0.0],
            "from_zero": [r.name for r in from_zero(self.rows)],
            "only_old": self.only_old, "only_new": self.only_new, "reshaped": self.reshaped,
            "notes": self.notes,
        }


def _ranked(rows: Sequence[DiffRow]) -> list[DiffRow]:
    """Parameters with a relative change, largest first (those that started from all zeros,
    where it is undefined, are left out: see ``from_zero``)."""
    params = [r for r in rows if r.is_param and r.update is not None and r.update == r.update]
    return sorted(params, key=lambda r: -(r.update or 0.0))


def from_zero(rows: Sequence[DiffRow]) -> list[DiffRow]:
    """Parameters that were all zeros in OLD and moved (zero-initialized biases)."""
    return [r for r in rows if r.is_param and r.update is None]


# --- rendering ------------------------------------------------------------------------------


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


def _count(n: int) -> str:
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return str(n)


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    if x != x or math.isinf(x):
        return str(x)
    if x == 0:
        return "0"
    return f"{x:.2e}" if abs(x) < 1e-2 or abs(x) >= 1e4 else f"{x:.3g}"


def _console(file: TextIO | None, width: int | None) -> Console:
    from rich.console import Console

    # soft_wrap: long lines (paths, name lists) are left to the terminal, not cut or folded
    return Console(file=file or sys.stderr, width=width, highlight=False, soft_wrap=True)


def _table(title: str, columns: tuple[str, ...], left: tuple[str, ...]) -> Table:
    """A rich table with ``columns``, the ``left`` ones left-justified and the rest right."""
    from rich.table import Table

    t = Table(title=title, title_justify="left", box=None, pad_edge=False)
    for col in columns:
        t.add_column(col, justify="left" if col in left else "right")
    return t


def _head(s: Summary) -> str:
    kind = "training checkpoint" if s.training else "weights only"
    bits = [s.format, kind]
    if s.step is not None:
        bits.append(f"step {s.step}")
    if s.epoch is not None:
        bits.append(f"epoch {s.epoch:g}")
    if s.optimizer_steps is not None and s.optimizer_steps != s.step:
        bits.append(f"optimizer steps {s.optimizer_steps}")
    return f"{s.path} ({', '.join(bits)})"


def render_inspect(s: Summary, *, top: int = 10, file: TextIO | None = None, width: int | None = None) -> None:
    escape = _escape
    con = _console(file, width)
    con.rule("[bold]checkpoint[/]")
    con.print(escape(_head(s)))
    missing = ", ".join(s.missing) or "nothing"
    con.print(f"parts: {', '.join(s.has) or 'none'}   [dim]absent:[/] {escape(missing)}"
              + ("" if s.training else "   [dim](bare weights: resume checks do not apply)[/]"))
    model = [r for r in s.tensors if r.role == "model"]
    total = sum(r.nbytes for r in s.tensors)
    con.print(f"size: {_size(s.file_bytes)} on disk; {len(model)} model tensors, "
              f"{_count(sum(r.numel for r in model))} elements, {_size(sum(r.nbytes for r in model))}"
              + (f"; {len(s.tensors) - len(model)} EMA tensors" if len(s.tensors) > len(model) else ""))
    if s.tensors:
        t = _table("tensors by dtype", ("dtype", "tensors", "elements", "bytes", "share"), ("dtype",))
        for dtype, (n, el, b) in sorted(s.by_dtype().items(), key=lambda kv: -kv[1][2]):
            t.add_row(dtype, str(n), _count(el), _size(b), f"{b / total:.0%}" if total else "-")
        con.print(t)
        t = _table(f"largest tensors (of {len(s.tensors)})", ("name", "shape", "dtype", "size", "norm", "rms"),
                   ("name", "shape", "dtype"))
        for r in sorted(s.tensors, key=lambda r: -r.nbytes)[:top]:
            rms = r.norm / math.sqrt(r.numel) if r.norm is not None and r.numel else None
            name = r.name if r.role == "model" else f"{r.role}:{r.name}"
            t.add_row(escape(name), "x".join(map(str, r.shape)) or "scalar", r.dtype, _size(r.nbytes),
                      _num(r.norm), _num(rms))
        con.print(t)
    if s.groups:
        t = _table("optimizer state (a resume restores these)",
                   ("optimizer", "class", "group", "params", "lr", "initial_lr", "state dtype"),
                   ("optimizer", "class", "group", "state dtype"))
        for g in s.groups:
            t.add_row(str(g.optimizer), g.cls, str(g.group), str(g.params), _num(g.lr),
                      _num(g.initial_lr), g.dtypes)
        con.print(t)
    if s.sched_last_lrs or s.sched_base_lrs:
        con.print(f"scheduler: last_lr {', '.join(map(_num, s.sched_last_lrs)) or '-'}; "
                  f"base_lrs {', '.join(map(_num, s.sched_base_lrs)) or '-'}")
    for role, (n, k) in s.bn.items():
        con.print(f"BatchNorm ({role}): {n} modules, {k} with initial running statistics (mean 0, var 1)")
    bad = [r for r in s.tensors if r.nonfinite]
    if bad:
        con.print(f"[bold red]non-finite:[/] {len(bad)} tensors hold NaN/Inf: "
                  + escape(", ".join(f"{r.name} ({r.nonfinite / r.numel:.1%})" for r in bad[:6])))
    for note in s.notes:
        con.print(f"[dim]note:[/] {escape(note)}")


def render_diff(d: DiffSummary, *, top: int = 10, file: TextIO | None = None, width: int | None = None) -> None:
    escape = _escape
    con = _console(file, width)
    steps = (f"{d.steps} optimizer steps apart" if d.steps else
             "same step" if d.steps == 0 else "steps apart unknown")
    con.rule(f"[bold]checkpoint diff[/] ({steps})")
    con.print(f"old: {escape(_head(d.old))}")
    con.print(f"new: {escape(_head(d.new))}")
    ranked = _ranked(d.rows)
    params = sum(r.is_param for r in d.rows)
    con.print(f"{params} parameters compared"
              + (f"; {len(d.rows) - params} buffers" if len(d.rows) > params else "")
              + (f"; only in old: {len(d.only_old)}" if d.only_old else "")
              + (f"; only in new: {len(d.only_new)}" if d.only_new else "")
              + (f"; shape changed: {len(d.reshaped)}" if d.reshaped else ""))

    def table(title: str, rows: list[DiffRow]) -> None:
        t = _table(title, ("name", "dtype", "elements", "rel change", "per step", "max |Δ|", "unchanged"),
                   ("name", "dtype"))
        for r in rows:
            per = r.update / d.steps if r.update is not None and d.steps else None
            t.add_row(escape(r.name), r.dtype, _count(r.numel), _num(r.update), _num(per), _num(r.moved),
                      f"{r.unchanged:.0%}")
        con.print(t)

    if ranked:
        n = min(top, (len(ranked) + 1) // 2)
        table("changed most", ranked[:n])
        if len(ranked) > 1:
            table("changed least", ranked[::-1][: min(top, len(ranked) - n)])
    con.print("[dim]rel change = ||new - old|| / ||old||; per step = rel change / steps apart; "
              "unchanged = share of elements bit-identical[/]")
    zero = from_zero(d.rows)
    if zero:
        con.print("started from all zeros (rel change undefined), moved by max |Δ|: "
                  + escape(", ".join(f"{r.name} ({_num(r.moved)})" for r in zero[:8])))
    frozen = [r.name for r in ranked if r.moved == 0.0]
    if frozen:
        shown = ", ".join(frozen[:12]) + (f" and {len(frozen) - 12} more" if len(frozen) > 12 else "")
        con.print(f"[bold]bit-identical:[/] {len(frozen)} of {params} parameters did not change at all: "
                  + escape(shown))
    for label, names in (("only in old", d.only_old), ("only in new", d.only_new), ("shape changed", d.reshaped)):
        if names:
            con.print(f"[dim]{label}:[/] " + escape(", ".join(names[:8]) + (" ..." if len(names) > 8 else "")))
    for role, (n, k) in d.new.bn.items():
        con.print(f"BatchNorm ({role}, new): {n} modules, {k} with initial running statistics")
    for note in d.notes + d.old.notes + d.new.notes:
        con.print(f"[dim]note:[/] {escape(note)}")


def _escape(text: str) -> str:
    """A name from the checkpoint for a rich console: control characters (a key holding ESC)
    written visibly, then rich's markup (``[bold]``) escaped."""
    from rich.markup import escape

    return escape(safe.terminal(text))
