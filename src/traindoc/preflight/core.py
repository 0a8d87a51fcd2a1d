"""The preflight plan: which launches of the script run, in what order, and for which probe.

1. The baseline launch, under the live probes (the report of ``traindoc run``): BASELINE_STEPS
   steps; with the resume probe, until the script's first checkpoint (step K, at most
   SAVE_STEPS) and RESUMED_STEPS + 1 steps beyond. The initial-loss, gradient and eval probes
   read it.
2. ``overfit``: a launch whose batch repeats (a DataLoader's first batch, or the global RNG
   rewound after every step).
3. ``resume``: a launch that stops right after the script's first checkpoint, then a relaunch in
   the same folder, which the script resumes from; the relaunch's first steps are compared with
   the baseline's steps K, K+1, ... (and the first launch's steps with the baseline's first K,
   to make sure two uninterrupted launches agree).
4. ``lr``: a sweep, launches at factors of ``lr.GRID`` (0.01x to 10000x) from 1x outwards, as
   far as ``lr.next_factor`` needs, each on the repeated batch at a constant LR, that factor
   times the configured one.

Each launch runs in its own temporary folder (removed at the end) and has its own time limit
within the total budget (the baseline at most 40% of it, the overfit launch 30%, each LR launch
8%); a probe that cannot run says why and the others still run.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from traindoc.preflight import evaluation, lr, probes
from traindoc.preflight.files import Outside
from traindoc.preflight.launch import Launch
from traindoc.preflight.result import Result
from traindoc.preflight.sandbox import links, prepare
from traindoc.preflight.state import RngState
from traindoc.preflight.verdict import PROBES, Verdict

BASELINE_STEPS = 5
RESUMED_STEPS = 5
SAVE_STEPS = 200  # the most steps the resume probe waits for the script's first checkpoint


@dataclass
class Plan:
    script: Path
    argv: list[str]
    only: tuple[str, ...] = PROBES
    budget: float = 300.0  # seconds for all launches together
    resume_args: list[str] = field(default_factory=list)
    config: probes.Config = field(default_factory=probes.Config)


@dataclass
class Outcome:
    verdicts: list[Verdict]
    report: Any  # the baseline launch's live Report (None when it did not run)
    seconds: float
    baseline: Result | None = None
    removed: list[str] = field(default_factory=list)  # checkpoints the script wrote outside the sandbox
    restored: list[str] = field(default_factory=list)  # the user's files it overwrote, put back


def run(plan: Plan, make_watch: Callable[[], Any]) -> Outcome:
    t0 = time.perf_counter()
    cwd = Path.cwd()
    linked = links(cwd)  # the user's files every launch reads through links
    rng = RngState.capture()  # every launch starts from the same RNG state
    root = Path(tempfile.mkdtemp(prefix="traindoc-preflight-"))
    want = set(plan.only)
    verdicts: dict[str, Verdict] = {}
    outside = Outside(root / "backup")
    removed: set[str] = set()
    restored: set[str] = set()

    def left() -> float:
        return max(1.0, plan.budget - (time.perf_counter() - t0))

    def launch(folder: str, steps: int, **options: Any) -> Result:
        sandbox = prepare(root / folder, cwd, linked)
        argv = options.pop("argv", plan.argv)
        keep = options.pop("keep_outside", False)
        seconds = min(left(), options.pop("share", 1.0) * plan.budget)
        try:
            return Launch(plan.script, argv, sandbox, steps=steps, seconds=seconds, rng=rng, outside=outside,
                          **options).run()
        finally:
            if not keep:
                gone, back = outside.restore()
                removed.update(gone)
                restored.update(back)

    try:
        resume = "resume" in want
        baseline = launch("baseline", SAVE_STEPS if resume else BASELINE_STEPS, snapshots=resume,
                          keep_input=True, watch=make_watch(), after_save=RESUMED_STEPS + 1, share=0.4)
        if baseline.steps == 0:  # nothing trained in this process: the other launches would not either
            why = baseline.error or (f"no optimizer step ran in this process in {baseline.seconds:.0f}s (a script "
                                     "that trains in subprocesses, with mp.spawn or a launcher, cannot be probed)")
            return Outcome([probes.not_run(p, why) for p in PROBES if p in want], baseline.report,
                           time.perf_counter() - t0, baseline, sorted(removed), sorted(restored))
        names, embeddings = _param_names(baseline)
        module_name = type(baseline.first_module).__name__ if baseline.first_input else "the model"
        t = time.perf_counter()
        if "initial-loss" in want:
            verdicts["initial-loss"] = _timed(probes.initial_loss(baseline, plan.config), baseline.seconds)
        if "gradients" in want:
            verdicts["gradients"] = _timed(probes.gradients(baseline, names, embeddings, plan.config), 0.0)
        if "eval" in want:
            verdicts["eval"] = _timed(evaluation.eval_determinism(baseline, plan.config.eval_tolerance, module_name),
                                      time.perf_counter() - t)
        over = None
        if "overfit" in want:
            over = launch("overfit", plan.config.overfit_steps, repeat_batch=True,
                          stop_below=plan.config.overfit_factor, share=0.3)
            verdicts["overfit"] = _timed(probes.overfit(over, plan.config), over.seconds)
        if "lr" in want and lr.no_lr(baseline):
            verdicts["lr"] = probes.not_run("lr", lr.no_lr(baseline))
        elif "lr" in want:
            steps = plan.config.lr_steps
            curves: dict[float, Result] = {}
            ratios: dict[float, float] = {}
            factor = lr.next_factor(ratios, plan.config.lr_grid)
            while factor is not None:  # + 2: the first steps may not repeat yet
                curves[factor] = launch(f"lr-{factor:g}x", steps + 2, repeat_batch=True, lr_sweep=factor, share=0.08)
                ratios[factor] = lr.ratio(curves[factor], steps)
                factor = lr.next_factor(ratios, plan.config.lr_grid)
            verdicts["lr"] = _timed(lr.sweep(curves, steps, plan.config.overfit_factor),
                                    sum(r.seconds for r in curves.values()))
        if resume and baseline.saved:
            saved = launch("resume", SAVE_STEPS, stop_after_save=True, snapshots=True, keep_outside=True)
            resumed = launch("resume", RESUMED_STEPS, snapshots=True, argv=plan.argv + plan.resume_args)
            verdicts["resume"] = _timed(probes.resume(saved, baseline, resumed, plan.config, plan.resume_args),
                                        saved.seconds + resumed.seconds)
        elif resume:
            verdicts["resume"] = probes.not_run("resume", baseline.error or (
                f"the script wrote no checkpoint into its working folder in {baseline.steps} steps"
                + probes.checkpoint_hint(baseline.framework)))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    ordered = [verdicts[p] for p in PROBES if p in verdicts]
    return Outcome(ordered, baseline.report, time.perf_counter() - t0, baseline, sorted(removed), sorted(restored))


def _timed(v: Verdict, seconds: float) -> Verdict:
    return Verdict(v.probe, v.status, v.summary, v.findings, seconds)


def _param_names(r: Result) -> tuple[dict[str, str], set[str]]:
    """id -> the parameter's name in the model that ran first, or else in the first other module
    that ran (the grad tables are by id), and the ids of the embedding tables."""
    import torch

    names: dict[str, str] = {}
    embeddings: set[str] = set()
    for model in ([r.owner] if r.owner is not None else []) + r.models:
        for n, p in model.named_parameters():
            names.setdefault(str(id(p)), n)
        embeddings |= {str(id(m.weight)) for m in model.modules()
                       if isinstance(m, (torch.nn.Embedding, torch.nn.EmbeddingBag))}
    return names, embeddings
