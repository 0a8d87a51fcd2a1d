"""Overhead of live observation: the same loop bare and under traindoc, in one process.

Blocks of steps alternate between bare and observed (probes installed); one Session lives
across all observed blocks, so its step counter and sampling schedule are those of a real run
(a fresh watch per block would sample every step of its dense start; that start is observed
once, untimed, before the blocks). The first steps after each switch are not counted, in
either condition: switching probes on or off leaves the next steps' code and data out of the
caches (measured: +280, +106, +76 us over the steady state for the first three observed
steps, +93 us for the first bare one), a cost a real run pays once, when traindoc installs,
not every hundred steps. Reported: the median step time of each condition and their ratio,
per level; the same for this thread's CPU time per step (steadier on a shared machine, where
preemption inflates wall times); the mean ratio, which includes the sampled steps' extra work;
and the memory traindoc holds. A level that samples less often later in a run (``standard``,
from step 1,000) is timed in both stretches: the early one, too short for enough blocks in one
run, in several runs with a fresh model and session each.

    OMP_NUM_THREADS=2 python benchmarks/overhead.py            # both models, all levels
    python benchmarks/overhead.py --model mlp --rounds 40
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from traindoc.live.probes import Probes
from traindoc.live.levels import LEVELS
from traindoc.live.session import Session


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab: int = 8192, d: int = 512, layers: int = 6, block: int = 128) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.blocks = nn.ModuleList(Block(d, 8) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def make(kind: str) -> tuple[nn.Module, torch.optim.Optimizer, callable]:  # type: ignore[valid-type]
    torch.manual_seed(0)
    if kind == "gpt":
        model = GPT()
        data = torch.randint(0, 8192, (4, 129))

        def loss_fn() -> torch.Tensor:
            logits = model(data[:, :-1])
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), data[:, 1:].reshape(-1))
    else:
        model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
        x, y = torch.randn(64, 32), torch.randint(0, 10, (64,))

        def loss_fn() -> torch.Tensor:
            return F.cross_entropy(model(x), y)

    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    return model, opt, loss_fn


SETTLE = 4  # steps after a switch between bare and observed that are not counted


def steps(model: nn.Module, opt: torch.optim.Optimizer, loss_fn: callable, n: int,  # type: ignore[valid-type]
          cpu: list[float] | None = None, settle: int = 0) -> list[float]:
    """Wall time of each of ``n`` steps after ``settle`` uncounted ones; with ``cpu``, also
    this thread's CPU time per step (which a busy machine's preemptions do not inflate)."""
    times = []
    wall, thread = time.perf_counter, time.thread_time
    for i in range(settle + n):
        c0, t0 = thread(), wall()
        loss = loss_fn()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if i < settle:
            continue
        times.append(wall() - t0)
        if cpu is not None:
            cpu.append(thread() - c0)
    return times


def held_bytes(session: Session) -> int:
    """What traindoc keeps between steps: sampled elements, snapshots, ReLU activity."""
    return session.model.held_bytes()


def measure(kind: str, level: str, rounds: int, block: int, start: int = 0,
            sessions: int = 1) -> dict[str, float]:
    """Observed blocks from step ``start`` on (at least the end of the dense start), in
    ``sessions`` runs of ``rounds`` blocks each (a stretch too short for enough blocks in one run
    is timed in several, each with its own model and session)."""
    bare: list[float] = []
    watched: list[float] = []
    bare_cpu: list[float] = []
    watched_cpu: list[float] = []
    for _ in range(sessions):
        model, opt, loss_fn = make(kind)
        steps(model, opt, loss_fn, 3)  # warm up allocator and kernels
        session = Session(level=level)
        session.start("benchmark", [])
        probes = Probes(session)
        # A long run spends a negligible share of its steps in the dense start (every step
        # sampled): observe it once, untimed, so the blocks below see the steady state of a run.
        probes.install()
        steps(model, opt, loss_fn, max(start, LEVELS[level].dense + 1))
        probes.uninstall()
        for _ in range(rounds):
            bare += steps(model, opt, loss_fn, block, bare_cpu, SETTLE)
            probes.install()
            watched += steps(model, opt, loss_fn, block, watched_cpu, SETTLE)
            probes.uninstall()
        report = session.finish()
    nparams = sum(p.numel() for p in model.parameters())
    b, w = statistics.median(bare), statistics.median(watched)
    # The mean includes the sampled steps' extra work: the honest per-step cost over a run.
    mb, mw = statistics.fmean(bare), statistics.fmean(watched)
    cpu_ratio = statistics.median(watched_cpu) / statistics.median(bare_cpu)
    return {"params": nparams, "bare_ms": b * 1e3, "watched_ms": w * 1e3, "median_ratio": w / b,
            "cpu_ratio": cpu_ratio,
            "mean_ratio": mw / mb, "held_kb": held_bytes(session) / 1024,
            "findings": len([f for f in report.findings if f.severity != "info"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("gpt", "mlp", "both"), default="both")
    parser.add_argument("--level", choices=(*LEVELS, "all"), default="all")
    parser.add_argument("--rounds", type=int, default=0, help="bare/observed block pairs")
    args = parser.parse_args()
    kinds = ("gpt", "mlp") if args.model == "both" else (args.model,)
    levels = tuple(LEVELS) if args.level == "all" else (args.level,)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"load average {os.getloadavg()[0]:.1f} (other work on the machine stretches wall times)")
    print("| model | params | level | bare step | observed step | median ratio | median CPU ratio | mean ratio | traindoc holds |")
    print("|---|---|---|---|---|---|---|---|---|")
    for kind in kinds:
        rounds = args.rounds or (6 if kind == "gpt" else 60)
        block = 10 if kind == "gpt" else 100
        for level in levels:
            lv = LEVELS[level]
            # (first step, blocks per run, runs). A level that samples less often later in a
            # run: its denser early steps are timed as many blocks as fit before ``later``, in
            # as many runs as it takes for ``rounds`` blocks; the later ones on the toy model
            # only (a thousand untimed GPT steps would take a quarter of an hour).
            phases = [(lv.dense + 1, rounds, 1)]
            if lv.later is not None:
                fit = (lv.later - lv.dense) // (block + SETTLE)
                phases = [(lv.dense + 1, min(rounds, fit), -(-rounds // fit))]
                if kind != "gpt":
                    phases.append((lv.later, rounds, 1))
            for start, n, runs in phases:
                r = measure(kind, level, n, block, start, runs)
                name = f"{level}, steps {start}-{start + n * (block + SETTLE) - 1}"
                if runs > 1:
                    name += f", {runs} runs"
                print(f"| {kind} | {r['params'] / 1e6:.1f}M | {name} | {r['bare_ms']:.2f} ms | "
                      f"{r['watched_ms']:.2f} ms | {r['median_ratio']:.3f}x | {r['cpu_ratio']:.3f}x | {r['mean_ratio']:.3f}x | "
                      f"{r['held_kb']:.0f} KB |", flush=True)
                assert not math.isnan(r["median_ratio"])


if __name__ == "__main__":
    main()
