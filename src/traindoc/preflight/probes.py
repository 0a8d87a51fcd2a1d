"""The preflight probes' judgements: each reads what the launches recorded and gives a Verdict.

Measuring happens in ``launch.py``; here are only the comparisons, their thresholds and the
words. Every finding quotes numbers measured in this preflight.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from traindoc.detectors.bad_initial_loss import BadInitialLoss
from traindoc.events import Classification
from traindoc.findings import Finding, finding
from traindoc.preflight.launch import Result, Snapshot
from traindoc.preflight.state import LossCall
from traindoc.findings import fmt
from traindoc.preflight.verdict import FAIL, NOT_APPLICABLE, PASS, Verdict


@dataclass(frozen=True)
class Config:
    """The probes' thresholds."""

    mse_factor: float = 3.0  # first MSE above this many times mean(target**2) (the loss of predicting 0)
    bce_margin: float = 1.0  # first BCE above ln 2 + this (the classifier's rule, for 2 classes)
    overfit_steps: int = 150  # the most steps on one repeated batch (it stops once the loss fell enough)
    overfit_factor: float = 0.5  # the loss on that batch must fall below this share of its first value
    overfit_still: float = 0.1  # a script that ends sooner fails only when the loss fell less than this share
    eval_tolerance: float = 1e-4  # relative difference of two eval passes on the same input
    resume_tolerance: float = 1e-5  # relative difference of two losses counted as equal
    lr_steps: int = 30  # steps on the repeated batch at each LR scale
    lr_scales: tuple[float, ...] = (0.1, 10.0, 1000.0)  # the configured LR times these, besides 1

    def __post_init__(self) -> None:
        if not 0 < self.overfit_factor < 1:
            raise ValueError(f"overfit_factor must be in (0, 1), got {self.overfit_factor}")
        if self.overfit_steps < 10:
            raise ValueError(f"overfit_steps must be >= 10, got {self.overfit_steps}")


# The LR range in which each optimizer family usually trains (from the defaults and common
# recipes of its paper and library); an LR far outside is worth a look when nothing learns.
LR_BANDS: dict[str, tuple[float, float]] = {
    "SGD": (1e-4, 1.0), "Adam": (1e-5, 1e-2), "AdamW": (1e-5, 1e-2), "NAdam": (1e-5, 1e-2),
    "RAdam": (1e-5, 1e-2), "Adamax": (1e-5, 1e-2), "RMSprop": (1e-5, 1e-2), "Adagrad": (1e-3, 1e-1),
    "Adafactor": (1e-4, 1e-2), "Lion": (1e-6, 1e-3), "Muon": (1e-3, 1e-1),
}


MIN_OVERFIT_STEPS = 20  # a script that ends sooner is judged on the steps it ran, from this many on


def not_run(probe: str, why: str) -> Verdict:
    return Verdict(probe, NOT_APPLICABLE, why)


# ---- initial loss ------------------------------------------------------------------------------
def initial_loss(r: Result, config: Config) -> Verdict:
    call = r.loss_call
    if call is None:
        return not_run("initial-loss", "no cross_entropy, mse_loss or binary_cross_entropy(_with_logits) call "
                       "(functional or nn module) computed the first loss, so what it should be is unknown")
    if not call.judged:
        return not_run("initial-loss", f"the first {call.fn} call uses class weights, a sum reduction or extra "
                       "arguments, which move its expected value")
    found = _initial_loss_findings(call, config)
    expected, what = _expected(call)
    summary = f"first {call.fn} {fmt(call.value)}; {what} {fmt(expected)}"
    return Verdict("initial-loss", FAIL if found else PASS, summary, tuple(found))


def _expected(call: LossCall) -> tuple[float, str]:
    if call.fn == "cross_entropy":
        return math.log(call.classes), f"ln({call.classes}) ="
    if call.fn == "mse_loss":
        return call.target_sq, "mean(target**2) (predicting 0) ="
    return math.log(2), "ln(2) per element ="


def _initial_loss_findings(call: LossCall, config: Config) -> list[Finding]:
    std = (f" The loss's input has mean {fmt(call.output_mean)} and std {fmt(call.output_std)} at step 0."
           if call.output_std == call.output_std else "")
    if call.fn == "cross_entropy":
        detector = BadInitialLoss()
        found = list(detector.observe(Classification(step=0, classes=call.classes, value=call.value)))
        return [dataclasses.replace(f, message=f.message + std, evidence={
            **f.evidence, "logit_std": call.output_std, "logit_mean": call.output_mean}) for f in found]
    if call.fn == "mse_loss":
        limit = config.mse_factor * call.target_sq
        if not call.target_sq > 0 or call.value <= limit:
            return []
        return [finding(
            "bad-initial-loss", step=0,
            message=(f"the first mse_loss is {fmt(call.value)}; predicting 0 everywhere would give "
                     f"mean(target**2) = {fmt(call.target_sq)} (threshold {fmt(limit)}).{std}"),
            cause="The untrained model's outputs are far larger than the targets: the output layer "
                  "starts with a large scale, or the targets are normalized while the outputs are not.",
            fix="Initialise the output layer small (nn.init.zeros_ or normal_(std=0.02) on its weight, its "
                "bias at the targets' mean) and check that outputs and targets are on the same scale.",
            evidence={"loss": call.value, "target_mean_square": call.target_sq, "threshold": limit,
                      "output_std": call.output_std, "output_mean": call.output_mean},
        )]
    limit = math.log(2) + config.bce_margin
    if call.value <= limit:
        return []
    return [finding(
        "bad-initial-loss", step=0,
        message=(f"the first {call.fn} is {fmt(call.value)} per element; an untrained binary classifier "
                 f"should start near ln(2) = {fmt(math.log(2))} (threshold {fmt(limit)}).{std}"),
        cause="The untrained model is confident and wrong: its output bias starts far from the log-odds of "
              "the positive rate (a prior init with the wrong sign), or the last layer starts with a large scale.",
        fix="Initialise the output bias at 0, or at the log-odds of the positive rate p: -log((1 - p) / p), "
            "negative for rare positives; keep the last layer's weights small (normal_(std=0.01)).",
        evidence={"loss": call.value, "expected": math.log(2), "threshold": limit, "output_std": call.output_std,
                  "output_mean": call.output_mean},
    )]


# ---- gradients at the first steps ----------------------------------------------------------------
def gradients(r: Result, names: dict[str, str]) -> Verdict:
    if not r.grads:
        return not_run("gradients", "no optimizer step ran" + (f" ({r.error})" if r.error else ""))
    steps = len(r.grads)
    keys = list(r.grads[0])
    none = [k for k in keys if all(not t.get(k, (True, 1.0, True))[0] for t in r.grads)]
    zero = [k for k in keys if k not in none and all(t.get(k, (True, 1.0, True))[1] == 0 for t in r.grads)]
    bad = [k for k in keys if any(not t.get(k, (True, 1.0, True))[2] for t in r.grads)]
    name = lambda k: names.get(k, f"parameter #{keys.index(k)}")  # noqa: E731
    found: list[Finding] = []
    if none or zero:
        missing = [name(k) for k in none + zero]
        found.append(finding(
            "no-gradient", step=0,
            message=(f"{len(missing)} of {len(keys)} trainable parameter(s) the optimizer holds got no gradient "
                     f"({len(none)} None, {len(zero)} exactly zero) on each of the first {steps} step(s): "
                     f"{', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''}."),
            fix=(f"Trace how {missing[0]} reaches the loss; remove the detach or add its branch's term to the "
                 "loss. If it is meant to be frozen, set requires_grad_(False) and leave it out of the optimizer."),
            evidence={"parameters": missing[:50], "none": len(none), "zero": len(zero), "steps": steps},
            where=missing[:10],
        ))
    if bad:
        first = next(i for i, t in enumerate(r.grads) if any(not t.get(k, (True, 1.0, True))[2] for k in bad))
        found.append(finding(
            "nonfinite", step=first,
            message=(f"{len(bad)} parameter(s) had NaN or Inf gradients within the first {steps} step(s), "
                     f"first at step {first}: {', '.join(name(k) for k in bad[:8])}."),
            evidence={"parameters": [name(k) for k in bad[:50]], "step": first},
            where=[name(k) for k in bad[:10]],
        ))
    norms = [n for k, (has, n, ok) in r.grads[0].items() if has and ok and n > 0]
    spread = f"; gradient norms per parameter span {fmt(min(norms))} to {fmt(max(norms))}" if norms else ""
    summary = f"{len(keys)} parameters checked on {steps} step(s){spread}"
    return Verdict("gradients", FAIL if found else PASS, summary, tuple(found))


# ---- overfit one batch -------------------------------------------------------------------------
def overfit(r: Result, config: Config) -> Verdict:
    start = r.repeat_start
    losses = r.losses[start:]
    reached = len(losses) > 1 and losses[-1] <= config.overfit_factor * losses[0]
    ended = r.steps < config.overfit_steps and not reached
    if ended and (r.status != "ok" or r.steps < MIN_OVERFIT_STEPS):
        why = r.error or ("the time budget ran out" if r.status == "timeout" else "the script ended")
        return not_run("overfit", f"{r.steps} of {config.overfit_steps} steps ran on the repeated batch: {why}")
    if not r.batch_repeated():
        return not_run("overfit", "could not repeat one batch: the model's input changed from step to step; "
                       "the script draws its batches neither from a DataLoader nor from the global RNGs or a "
                       "torch.Generator in its variables")
    first, best = losses[0], min(losses[-5:])
    target = config.overfit_factor * first
    summary = (f"loss on one repeated batch: {fmt(first)} -> {fmt(losses[-1] if reached else best)} in {len(losses)} steps "
               f"(needed below {fmt(target)})")
    if all(math.isfinite(v) for v in losses[-5:]) and best <= target:
        return Verdict("overfit", PASS, summary)
    if ended and best < (1 - config.overfit_still) * first:  # still falling when the script ended
        return not_run("overfit", f"the script ended after {r.steps} steps, the {summary} and still falling")
    why = _why_not(r)
    f = finding(
        "cannot-overfit-batch", step=len(losses) - 1,
        message=(f"on one batch repeated for {len(losses)} steps, the loss went from {fmt(first)} to "
                 f"{fmt(best)} (best of the last 5), not below {fmt(target)} "
                 f"({config.overfit_factor:.0%} of the first). {why}"),
        evidence={"first_loss": first, "last_loss": best, "threshold": target, "steps": len(losses),
                  "moved_share": r.moved, "batch": r.repeated},
    )
    return Verdict("overfit", FAIL, summary, (f,))


def _why_not(r: Result) -> str:
    parts = []
    if r.grads:
        got = sum(1 for has, _, _ in r.grads[0].values() if has)
        parts.append(f"Gradients reached {got} of {len(r.grads[0])} parameters at step 0.")
    if r.moved == r.moved:
        parts.append(f"{r.moved:.1%} of the parameter elements changed over the run.")
    for opt, lr in r.lrs[:1]:
        band = LR_BANDS.get(opt)
        if band is None:
            parts.append(f"{opt} starts at lr {fmt(lr)}.")
        else:
            where = "below" if lr < band[0] else "above" if lr > band[1] else "inside"
            parts.append(f"{opt} starts at lr {fmt(lr)}, {where} its usual range {fmt(band[0])}-{fmt(band[1])}.")
    return " ".join(parts)


# ---- eval determinism ----------------------------------------------------------------------------
def eval_determinism(r: Result, config: Config, module_name: str) -> Verdict:
    import torch

    if r.first_input is None:
        return not_run("eval", "no model forward ran during training")
    module, args = r.first_input
    was = module.training
    try:
        module.eval()
        with torch.no_grad():
            a, b = _first_tensor(module(*args)), _first_tensor(module(*args))
    except Exception as exc:  # the forward needs arguments we did not capture (keywords)
        return not_run("eval", f"re-running {module_name}'s forward failed: {type(exc).__name__}: {exc}")
    finally:
        module.train(was)
    if a is None or b is None or a.shape != b.shape:
        return not_run("eval", f"{module_name}'s forward returns no tensor to compare")
    a, b = a.detach().float(), b.detach().float()
    if not (bool(torch.isfinite(a).all()) and bool(torch.isfinite(b).all())):
        return not_run("eval", f"{module_name}'s output is not finite after {r.steps} training steps")
    scale = float(a.abs().max()) or 1.0
    diff = float((a - b).abs().max())
    rel = diff / scale
    summary = f"two eval-mode passes of {module_name} on the first batch differ by {fmt(rel)} (relative)"
    if not rel > config.eval_tolerance:
        return Verdict("eval", PASS, summary)
    f = finding(
        "nondeterministic-eval", step=0,
        message=(f"in eval mode, two forward passes of {module_name} on the same "
                 f"batch differ by {fmt(diff)} ({fmt(rel)} of the output's largest magnitude; tolerance "
                 f"{fmt(config.eval_tolerance)}): a random op ignores model.eval()."),
        evidence={"model": type(module).__name__, "relative_difference": rel, "absolute_difference": diff,
                  "tolerance": config.eval_tolerance},
    )
    return Verdict("eval", FAIL, summary, (f,))


def _first_tensor(out: Any) -> Any:
    import torch

    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        for o in out:
            t = _first_tensor(o)
            if t is not None:
                return t
    return None


# ---- resume equivalence ----------------------------------------------------------------------------
def resume(saved: Result, straight: Result, resumed: Result, config: Config, resume_args: list[str]) -> Verdict:
    k = saved.saved_at
    if not saved.saved:
        why = saved.error or f"the script wrote no checkpoint into its working folder in {saved.steps} steps"
        return not_run("resume", why)
    ckpt = saved.saved[-1]
    if not resumed.loaded:
        how = f"with {' '.join(resume_args)}" if resume_args else "with the same arguments"
        return not_run("resume", f"the script saved {ckpt} at step {k}, but a relaunch {how} did not load it; "
                       "pass the arguments that make it resume with --resume-args")
    if resumed.status == "error" or not resumed.losses:
        return not_run("resume", f"the relaunch from {ckpt} failed: {resumed.error or 'no step ran'}")
    if len(straight.losses) < k + 1 or len(straight.snapshots) < k + 1:
        return not_run("resume", f"the uninterrupted launch stopped after {straight.steps} steps, before step {k + 1}")
    for i in range(k):  # two uninterrupted launches must agree before a resume can be judged
        if not _same(saved.losses[i], straight.losses[i], config.resume_tolerance):
            return not_run("resume", f"two uninterrupted launches already differ at step {i} (losses "
                           f"{fmt(saved.losses[i])} and {fmt(straight.losses[i])}): the script is not seeded "
                           "or uses nondeterministic kernels")
    m = min(len(resumed.losses), len(straight.losses) - k)
    differ = next((i for i in range(m) if not _same(resumed.losses[i], straight.losses[k + i], config.resume_tolerance)), None)
    summary = (f"checkpoint {ckpt} written at step {k}; {m} resumed step(s) "
               f"{'match' if differ is None else 'differ from'} the uninterrupted run")
    if differ is None:
        return Verdict("resume", PASS, summary)
    lost = _not_restored(straight.snapshots[k], resumed.snapshots[0] if resumed.snapshots else None,
                         straight.fingerprints[k] if len(straight.fingerprints) > k else (),
                         resumed.fingerprints[0] if resumed.fingerprints else (), resumed.restored_rng)
    f = finding(
        "resume-mismatch", step=k + differ,
        message=(f"resumed from {ckpt} (saved after step {k - 1}), step {k + differ} has loss "
                 f"{fmt(resumed.losses[differ])}; the uninterrupted run has {fmt(straight.losses[k + differ])} "
                 f"(tolerance {fmt(config.resume_tolerance)} relative). "
                 + (f"Not restored at step {k}: {'; '.join(lost)}." if lost else
                    "All the state traindoc compares (weights, optimizer, LR, schedulers, scaler, RNGs, batch) "
                    "matched at the first resumed step.")),
        evidence={"checkpoint": ckpt, "saved_at_step": k, "first_differing_step": k + differ,
                  "resumed_loss": resumed.losses[differ], "straight_loss": straight.losses[k + differ],
                  "not_restored": lost},
    )
    return Verdict("resume", FAIL, summary, (f,))


def _same(a: float, b: float, tol: float) -> bool:
    if a == b or (a != a and b != b):
        return True
    return abs(a - b) <= tol * max(abs(a), abs(b))


def _not_restored(straight: Snapshot, resumed: Snapshot | None, fp_s: tuple[float, ...],
                  fp_r: tuple[float, ...], restored_rng: bool) -> list[str]:
    """What differs between the two launches just before the first resumed step."""
    if resumed is None:
        return []
    lost: list[str] = []

    def differs(a: list[float], b: list[float], tol: float = 1e-6) -> bool:
        return len(a) != len(b) or any(not _same(x, y, tol) for x, y in zip(a, b))

    if differs(straight.weights, resumed.weights):
        lost.append("model weights")
    if straight.moments and not resumed.moments:
        lost.append("optimizer state (its moments are empty after the resume)")
    elif differs(straight.moments, resumed.moments, 1e-4) or differs(straight.opt_steps, resumed.opt_steps):
        lost.append("optimizer state (moments or step counts differ)")
    if differs([float(s) for s in straight.schedulers], [float(s) for s in resumed.schedulers]):
        lost.append(f"LR scheduler (at step {_ints(resumed.schedulers)} instead of {_ints(straight.schedulers)})")
    if differs(straight.lrs, resumed.lrs):
        lost.append(f"learning rate ({fmt(resumed.lrs[0]) if resumed.lrs else '?'} instead of "
                    f"{fmt(straight.lrs[0]) if straight.lrs else '?'})")
    if differs(straight.scales, resumed.scales):
        lost.append(f"GradScaler scale ({_ints(resumed.scales)} instead of {_ints(straight.scales)})")
    if straight.rng != resumed.rng:
        lost.append("torch RNG state" + ("" if restored_rng else " (the relaunch never calls torch.set_rng_state)"))
    if straight.py_rng != resumed.py_rng:
        lost.append("Python/numpy RNG state")
    if fp_s and fp_r and fp_s != fp_r:
        lost.append("the batch (the data position)")
    return lost


def _ints(values: list[int] | list[float]) -> str:
    return ", ".join(fmt(float(v)) for v in values) or "none"


# ---- LR sanity ------------------------------------------------------------------------------------
FALLS = 0.9  # within lr_steps, the loss on the repeated batch fell below this share of its first value


def lr_sanity(curves: dict[float, Result], config: Config) -> Verdict:
    """``curves``: LR scale -> the launch on the repeated batch with every step's LR times it."""
    base = curves.get(1.0)
    if base is None or not base.batch_repeated() or len(base.losses) < 2:
        why = (base.error if base is not None and base.error else "") or "no launch could repeat one batch (see the overfit probe)"
        return not_run("lr", why)
    ratios = {scale: _ratio(r, config.lr_steps) for scale, r in curves.items()}
    shown = ", ".join(f"{_share(ratios[scale])} at {scale:g}x" for scale in sorted(ratios))
    summary = f"loss after {config.lr_steps} steps on one repeated batch, over its first value: {shown} the LR"
    if any(math.isnan(v) for v in ratios.values()):
        return not_run("lr", "a launch at another LR did not run: " + "; ".join(
            r.error or r.status for r in curves.values() if r.error or r.status == "timeout")[:300])
    opt, lr = base.lrs[0] if base.lrs else ("the optimizer", math.nan)
    band = LR_BANDS.get(opt)
    usual = f" (its usual range is {fmt(band[0])}-{fmt(band[1])})" if band else ""
    higher = [sc for sc in sorted(ratios) if sc > 1 and ratios[sc] <= config.overfit_factor]
    lower = [sc for sc in sorted(ratios, reverse=True) if sc < 1 and ratios[sc] <= FALLS]
    if ratios[1.0] > FALLS and higher:
        direction, fix = "below", f"Raise the LR: try {fmt(lr * higher[0])} ({higher[0]:g}x), then tune around it."
    elif not ratios[1.0] <= 1.0 and lower:
        direction, fix = "above", f"Lower the LR: try {fmt(lr * lower[0])} ({lower[0]:g}x), and keep a warmup."
    else:
        return Verdict("lr", PASS, summary)
    f = finding(
        "lr-out-of-range", step=0,
        message=(f"{opt} at lr {fmt(lr)}{usual} is far {direction} the range where the loss falls: after "
                 f"{config.lr_steps} steps on one repeated batch the loss is {shown} the configured LR."),
        fix=fix,
        evidence={"optimizer": opt, "lr": lr, "steps": config.lr_steps,
                  "loss_ratio_by_lr_scale": {f"{sc:g}x": v for sc, v in sorted(ratios.items())}},
    )
    return Verdict("lr", FAIL, summary, (f,))


def _share(ratio: float) -> str:
    return fmt(ratio) if math.isfinite(ratio) else "non-finite"


def _ratio(r: Result, steps: int) -> float:
    """The loss after ``steps`` steps on the repeated batch (best of the last 3) over its first
    value; inf when it went non-finite, NaN when the launch did not run or did not repeat."""
    start = r.repeat_start
    losses = r.losses[start:start + steps]
    if not r.batch_repeated() or len(losses) < 2 or not losses[0] > 0:
        return math.nan
    if not all(math.isfinite(v) for v in losses):
        return math.inf
    return min(losses[-3:]) / losses[0]
