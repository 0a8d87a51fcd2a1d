"""The preflight probes' judgements: each reads what the launches recorded and gives a Verdict.

Measuring happens in ``launch.py``; here are only the comparisons, their thresholds and the
words. Every finding quotes numbers measured in this preflight.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable

from traindoc.catalog import finding
from traindoc.detectors.bad_initial_loss import BadInitialLoss
from traindoc.detectors.no_gradient import layer_of
from traindoc.events import Classification
from traindoc.findings import Finding, fmt
from traindoc.preflight.result import Result, Snapshot
from traindoc.preflight.lr import GRID, band
from traindoc.preflight.state import LossCall
from traindoc.preflight.verdict import FAIL, NOT_APPLICABLE, PASS, Verdict


@dataclass(frozen=True)
class Config:
    """The probes' thresholds."""

    mse_factor: float = 3.0  # first MSE above this many times mean(target**2) (the loss of predicting 0)
    bce_margin: float = 1.0  # first BCE above ln 2 + this (the classifier's rule, for 2 classes)
    overfit_steps: int = 150  # the most steps on one repeated batch (it stops once the loss fell enough)
    overfit_factor: float = 0.5  # the loss on that batch must fall below this share of its first value
    overfit_still: float = 0.1  # a script that ends sooner fails only when the loss fell less than this share
    overfit_slow: float = 0.2  # a loss that fell this share of its first value ...
    overfit_pace: float = 0.05  # ... and still falls this share of it over the last quarter: not judged
    eval_tolerance: float = 1e-4  # relative difference of two eval passes on the same input
    resume_tolerance: float = 1e-5  # relative difference of two losses counted as equal
    lr_steps: int = 30  # steps on the repeated batch at each LR of the sweep
    lr_grid: tuple[float, ...] = GRID  # the sweep's constant LRs: the configured LR times these
    grad_spread: float = 1e5  # per-layer gradient RMS at step 0: largest over smallest, at most this

    def __post_init__(self) -> None:
        if not 0 < self.overfit_factor < 1:
            raise ValueError(f"overfit_factor must be in (0, 1), got {self.overfit_factor}")
        if self.overfit_steps < 10:
            raise ValueError(f"overfit_steps must be >= 10, got {self.overfit_steps}")
        if 1.0 not in self.lr_grid:
            raise ValueError(f"lr_grid must hold 1.0 (the configured LR), got {self.lr_grid}")


MIN_OVERFIT_STEPS = 20  # a script that ends sooner is judged on the steps it ran, from this many on


def not_run(probe: str, why: str) -> Verdict:
    return Verdict(probe, NOT_APPLICABLE, why)


# ---- initial loss ------------------------------------------------------------------------------
def initial_loss(r: Result, config: Config) -> Verdict:
    call = r.loss_call
    if call is None:
        return not_run("initial-loss", "no cross_entropy, nll_loss, mse_loss or binary_cross_entropy(_with_logits) call "
                       "(functional or nn module) computed the first loss, so what it should be is unknown")
    if call.unjudged:
        return not_run("initial-loss", f"the first {call.fn} call {call.unjudged}")
    found = _initial_loss_findings(call, config)
    expected, what = _expected(call)
    summary = f"first {call.fn} {fmt(call.value)}; {what} {fmt(expected)}"
    return Verdict("initial-loss", FAIL if found else PASS, summary, tuple(found))


def _expected(call: LossCall) -> tuple[float, str]:
    if call.classification:
        return math.log(call.classes), f"ln({call.classes}) ="
    if call.fn == "mse_loss":
        return call.target_sq, "mean(target**2) (predicting 0) ="
    return math.log(2), "ln(2) per element ="


def _initial_loss_findings(call: LossCall, config: Config) -> list[Finding]:
    std = (f" The loss's input has mean {fmt(call.output_mean)} and std {fmt(call.output_std)} at step 0."
           if call.output_std == call.output_std else "")
    if call.classification:
        detector = BadInitialLoss()
        found = list(detector.observe(Classification(step=0, classes=call.classes, value=call.value, fn=call.fn)))
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
def gradients(r: Result, names: dict[str, str], skip: set[str], config: Config) -> Verdict:
    """``names``: parameter id -> its name; ``skip``: the ids of embedding tables, whose
    gradients are sparse (only the rows of the batch's tokens) and so left out of the spread."""
    if not r.grads:
        return not_run("gradients", "no optimizer step ran" + (f" ({r.error})" if r.error else ""))
    steps = len(r.grads)
    # Each step's table holds the parameters of the optimizer that stepped (a GAN's two take turns).
    keys = list(dict.fromkeys(k for t in r.grads for k in t))
    none = [k for k in keys if not any(t[k][0] for t in r.grads if k in t)]
    # Zeros in a layer whose other parameters learn on that step cancel (no_gradient.NoGradient).
    learning = [{layer_of(names[k]) for k, (_, norm, _) in t.items() if norm and k in names} for t in r.grads]
    zero = [k for k in keys if k not in none and all(
        t[k][1] == 0 and not (k in names and layer_of(names[k]) in on)
        for t, on in zip(r.grads, learning) if k in t)]
    bad = [k for k in keys if any(not t[k][2] for t in r.grads if k in t)]
    name = lambda k: names.get(k, f"parameter #{keys.index(k)}")  # noqa: E731
    found: list[Finding] = []
    if none or zero:
        missing = [name(k) for k in none + zero]
        found.append(finding(
            "no-gradient", step=0,
            message=(f"{len(missing)} of {len(keys)} trainable parameter(s) the optimizers hold got no gradient "
                     f"({len(none)} None, {len(zero)} exactly zero) on each of the first {steps} step(s): "
                     f"{', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''}."),
            fix=(f"Trace how {missing[0]} reaches the loss; remove the detach or add its branch's term to the "
                 "loss. If it is meant to be frozen, set requires_grad_(False) and leave it out of the optimizer."),
            evidence={"parameters": missing[:50], "none": len(none), "zero": len(zero), "steps": steps},
            where=missing[:10],
        ))
    if bad:
        first = next(i for i, t in enumerate(r.grads) if any(not t[k][2] for k in bad if k in t))
        found.append(finding(
            "nonfinite", step=first,
            message=(f"{len(bad)} parameter(s) had NaN or Inf gradients within the first {steps} step(s), "
                     f"first at step {first}: {', '.join(name(k) for k in bad[:8])}."),
            evidence={"parameters": [name(k) for k in bad[:50]], "step": first},
            where=[name(k) for k in bad[:10]],
        ))
    spread, far = _spread(r, name, skip, config.grad_spread)
    if far is not None:
        found.append(far)
    summary = f"{len(keys)} parameters checked on {steps} step(s){spread}"
    return Verdict("gradients", FAIL if found else PASS, summary, tuple(found))


def _spread(r: Result, name: Any, skip: set[str], limit: float) -> tuple[str, Finding | None]:
    """How far the gradients of the input-side layers at step 0 are below those of the output
    side. Per weight matrix (2-D or more; biases, norm gains and embedding tables are left out:
    their gradients differ in scale by nature, or are sparse), the gradient's RMS per element; in
    the optimizer's order (the model's, input side first), the largest of the first third over
    the largest of the last third. The largest, not a typical one: within a healthy transformer
    block the attention's query and key projections start with tiny gradients (the attention is
    uniform at init) while its value and MLP matrices do not; a layer that vanished has none."""
    rms: dict[str, float] = {}
    for k, (has, norm, ok) in r.grads[0].items():
        numel, dim = r.sizes.get(k, (0, 0))
        if has and ok and norm > 0 and dim >= 2 and k not in skip:
            rms[k] = norm / math.sqrt(numel)
    order = list(rms)
    if len(order) < 3:
        return "", None
    third = len(order) // 3
    early = max(order[:third], key=rms.__getitem__)
    late = max(order[-third:], key=rms.__getitem__)
    ratio = rms[late] / rms[early]
    text = (f"; gradient RMS at step 0: the input-side third of the {len(order)} weight matrices at most "
            f"{fmt(rms[early])} ({name(early)}), the output-side third at most {fmt(rms[late])} ({name(late)}), "
            f"{fmt(ratio)}x apart (threshold {fmt(limit)}x)")
    if not ratio > limit:
        return text, None
    small = order[:third][:3]
    return text, finding(
        "vanishing-gradients", step=0,
        message=(f"at step 0 the gradients of the first {third} of the {len(order)} weight matrices (input side, "
                 f"in the optimizer's order) have an RMS per element of at most {fmt(rms[early])} ({name(early)}), "
                 f"{fmt(1 / ratio)} of the output side's {fmt(rms[late])} ({name(late)}); threshold "
                 f"{fmt(limit)}x apart. First layers: " + ", ".join(f"{name(k)} {fmt(rms[k])}" for k in small) + "."),
        evidence={"input_side": name(early), "input_side_rms": rms[early], "output_side": name(late),
                  "output_side_rms": rms[late], "ratio": ratio, "threshold": limit, "matrices": len(order)},
        where=[name(k) for k in small],
    )


# ---- overfit one batch -------------------------------------------------------------------------
def overfit(r: Result, config: Config) -> Verdict:
    if r.opposed():
        return not_run("overfit", r.opposed())
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
    pace = _last_quarter_fall(losses)
    if best < (1 - config.overfit_slow) * first and pace >= config.overfit_pace * first:
        # A loss falling steadily at the end of the probe's steps trains on the batch, at a pace
        # its step budget does not cover (a bigram table at AdamW's 1e-2, a GAT under dropout 0.6)
        return not_run("overfit", f"the {summary} and still falling at its end ({fmt(pace)} over the last quarter "
                       "of its steps): at this pace it needs more steps than the probe takes; the lr probe tells "
                       "whether a larger LR is in range")
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


def _last_quarter_fall(losses: list[float]) -> float:
    """How much the loss fell over the last quarter of the steps (means of 5 steps at its ends)."""
    if len(losses) < 20 or not all(math.isfinite(v) for v in losses):
        return 0.0
    at = len(losses) - len(losses) // 4
    return sum(losses[at - 5:at]) / 5 - sum(losses[-5:]) / 5


def _why_not(r: Result) -> str:
    parts = []
    if r.grads:
        got = sum(1 for has, _, _ in r.grads[0].values() if has)
        parts.append(f"Gradients reached {got} of {len(r.grads[0])} parameters at step 0.")
    if r.moved == r.moved:
        parts.append(f"{r.moved:.1%} of the parameter elements changed over the run.")
    for opt, lr in r.lrs[:1]:
        usual = band(opt, r.lr_options)
        if usual is None:
            parts.append(f"{opt} starts at lr {fmt(lr)}.")
        else:
            where = "below" if lr < usual[0] else "above" if lr > usual[1] else "inside"
            parts.append(f"{opt} trains at lr {fmt(lr)}, {where} its usual range {fmt(usual[0])}-{fmt(usual[1])}.")
    return " ".join(parts)


# ---- resume equivalence ----------------------------------------------------------------------------
# How a checkpoint is written and resumed from under the trainers preflight recognizes.
CHECKPOINT_HINTS = {
    "transformers": ("; the Trainer saves when TrainingArguments has save_strategy='steps' and a save_steps "
                     "the probe reaches (it waits at most 200 steps)"),
    "lightning": ("; Lightning saves at the end of each epoch by default (enable_checkpointing=True), or every N "
                  "steps with a ModelCheckpoint(every_n_train_steps=N, save_last=True) callback; the probe waits at "
                  "most 200 steps"),
}
RESUME_HINTS = {
    "transformers": (", or make it resume by itself: trainer.train(resume_from_checkpoint="
                     "get_last_checkpoint(args.output_dir)), as the Trainer examples do"),
    "lightning": ", or make it resume by itself: trainer.fit(model, ..., ckpt_path='last') with save_last=True",
}


def checkpoint_hint(framework: str) -> str:
    """How to make a script of ``framework`` checkpoint, for a resume probe that saw none."""
    return CHECKPOINT_HINTS.get(framework, "")


def resume(saved: Result, straight: Result, resumed: Result, config: Config, resume_args: list[str]) -> Verdict:
    k = saved.saved_at
    if not saved.saved:
        why = saved.error or f"the script wrote no checkpoint into its working folder in {saved.steps} steps"
        return not_run("resume", why)
    ckpt = saved.saved[-1]
    if len(saved.saved) > 1 and "/" in ckpt and ckpt.rsplit("/", 1)[0] == saved.saved[-2].rsplit("/", 1)[0]:
        ckpt = ckpt.rsplit("/", 1)[0] + "/"  # a checkpoint folder (HF Trainer's checkpoint-N/)
    if not resumed.loaded:
        how = f"with {' '.join(resume_args)}" if resume_args else "with the same arguments"
        return not_run("resume", f"the script saved {ckpt} at step {k}, but a relaunch {how} did not load it; "
                       "pass the arguments that make it resume with --resume-args" + RESUME_HINTS.get(saved.framework, ""))
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
                         resumed.fingerprints[0] if resumed.fingerprints else (), resumed.holds_rng)
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
                  fp_r: tuple[float, ...], holds_rng: Callable[[], bool | None]) -> list[str]:
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
        held = holds_rng()
        lost.append("torch RNG state" + ("" if held is None else " (the checkpoint holds one)" if held
                                         else " (the checkpoint holds none)"))
    if straight.py_rng != resumed.py_rng:
        lost.append("Python/numpy RNG state")
    if fp_s and fp_r and fp_s != fp_r:
        lost.append("the batch (the data position)")
    return lost


def _ints(values: list[int] | list[float]) -> str:
    return ", ".join(fmt(float(v)) for v in values) or "none"
