"""checkpoint-incomplete: a training checkpoint lacks state needed to resume exactly."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterator

from traindoc.detectors import _carry
from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding
from traindoc.events import Checkpoint, Event, GradScale, RunStart, SaveFile, ScaledClip, SchedulerStep
from traindoc.findings import Finding

# What each part restores on resume (for the message).
EFFECT = {
    "optimizer": "Adam moments / momentum restart from zero (a loss spike after resume)",
    "scheduler": "the LR schedule restarts (warmup again, or a jump)",
    "step": "the step/epoch counter restarts (schedules, logging and data position)",
    "scaler": "the fp16 GradScaler restarts at 65536 and skips the first steps",
    "rng": "data order, dropout and augmentation differ from an uninterrupted run",
    "buffers": "BatchNorm running statistics restart at mean 0 / var 1, so the resumed or "
               "evaluated model normalizes with statistics that do not describe the data",
}
OPTIONAL = ("scaler", "rng")
# Why an optional part that is absent does not fire by itself.
ABSENT_NOTE = {
    "scheduler": "needed if the run stepped an LR scheduler; with no optimizer state saved, the file "
                 "cannot tell",
    "scaler": "needed only if the run used an fp16 GradScaler",
    "rng": "a resume then draws other random batches, dropout masks and augmentations than an "
           "uninterrupted run would: it changes no result, only bit-exactness",
}
# The entry each part adds to the saved dict (for the fix).
ENTRY = {
    "optimizer": "'optimizer': optimizer.state_dict()",
    "scheduler": "'scheduler': scheduler.state_dict()",
    "step": "'step': step",
    "scaler": "'scaler': scaler.state_dict()",
    "rng": "'rng': torch.get_rng_state()",
    "buffers": "'model': model.state_dict() (it holds every parameter, frozen ones included, and "
               "the buffers; named_parameters() filtered on requires_grad holds neither)",
}


class CheckpointIncomplete(Detector):
    """A training checkpoint (weights plus some training state) misses the optimizer state, the
    step/epoch counter, or the LR scheduler's state when there is a scheduler to restore.

    A step counter may have any name: besides the usual keys (``step``, ``global_step``,
    ``epoch`` ...), the checkpoint readers recognize an integer by what it is, one equal to the
    optimizer's own step count or to the steps a live run took, or one that grows between two
    saves (nanoGPT's ``iter_num``). A file saved several times is judged by what any of its
    saves showed (its first save has no earlier one to grow from).

    The scheduler's state is needed only when there is a scheduler: live, when the run steps an
    LR scheduler object (a schedule written into the param groups by hand, as nanoGPT's
    ``get_lr(iter_num)``, is a function of the step counter and has no state); from a file,
    when the optimizer's groups carry ``initial_lr``, which torch's LR schedulers write. Live, a
    run that steps an enabled AMP GradScaler (the ``amp`` signal) needs the scaler's state too.
    RNG state, and a GradScaler's state when it is not known to be in use, are listed when
    absent but never fire alone: without them a resume draws other random numbers, which
    changes no result; name them in ``required`` when resumes must be bit-exact. Bare weights
    files (a state_dict, ``model.safetensors``) are not resume checkpoints: the detector is
    reported not applicable to them, unless the file's name says it is the one to resume from
    (``last_checkpoint.pt``, ``checkpoint_epoch_5.pt``): then it is a training checkpoint that
    holds nothing but the model. So is a dict whose weights come with the run's metadata
    (``Checkpoint.meta``: a config or the run's arguments, a best or validation metric, a
    history), saved by a training loop, with no optimizer, scheduler, step or RNG state; a
    model config alone beside the weights in a file named as an export (``model_final.pt``)
    stays an export.

    A state built from ``named_parameters()`` filtered on ``requires_grad`` instead of
    ``state_dict()`` loses the frozen parameters and every buffer. Where the reader can tell
    (``Checkpoint.lost_buffers``: BatchNorm-named modules with weight and bias, and no running
    statistics anywhere in the file), the buffers count as missing whatever ``required`` says.
    Checkpoints are judged at the end, when all is known."""

    id = "checkpoint-incomplete"
    needs = frozenset({"train_state"})
    uses = frozenset({"amp", "scheduler", "run", "save"})
    examples = (
        Example("ckpt/golden/incomplete_no_optimizer.jsonl", 300),
        Example("ckpt/golden/incomplete_no_scheduler.jsonl", 40),
        Example("ckpt/golden/incomplete_meta_only.jsonl", -1),
        Example("ckpt/golden/complete_training.jsonl", None),
        Example("ckpt/golden/bare_weights.jsonl", None),
        Example("ckpt/golden/export_with_config.jsonl", None),
        Example("ckpt/golden/nanogpt_checkpoint.jsonl", None),
        Example("zoo/ckpt_incomplete.py", -1),
        Example("zoo/healthy_ckpt_resume.py", None),
        Example("zoo/healthy_nanogpt.py", None),
        Example("zoo/healthy_nanogpt_resume.py", None),
    )

    # Carried over a resume: the training checkpoints written (the first 64), and whether the run
    # steps a GradScaler or LR schedulers (their classes).
    carry = ("_ckpts", "_scaler", "_schedulers")

    @dataclass(frozen=True)
    class Config:
        required: tuple[str, ...] = ("optimizer", "scheduler", "step")

        def __post_init__(self) -> None:
            object.__setattr__(self, "required", tuple(self.required))  # a TOML list is fine too
            unknown = [r for r in self.required if r not in EFFECT or r == "buffers"]
            if unknown:
                parts = ", ".join(p for p in EFFECT if p != "buffers")
                raise ValueError(f"required must name parts among {parts}, got {unknown}")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._ckpts: list[Checkpoint] = []
        self._scaler = False  # live: the run steps an AMP GradScaler
        self._live = False  # the stream comes from a live run (it knows which schedulers step)
        self._schedulers: set[str] = set()  # live: LR scheduler classes the run stepped

    def state_dict(self) -> dict[str, object]:
        """``carry``, a bounded part of it (a long run's history must not grow a checkpoint)."""
        return {**super().state_dict(), "_ckpts": _carry.encode(self._ckpts[:64])}

    def observe(self, event: Event) -> Iterator[Finding]:
        if isinstance(event, Checkpoint):
            if event.training:
                self._ckpts.append(event)
        elif isinstance(event, (GradScale, ScaledClip)):
            self._scaler = True
        elif isinstance(event, SchedulerStep):
            self._schedulers.add(event.scheduler)
        elif isinstance(event, RunStart):
            self._live = event.source == "live"
        elif isinstance(event, SaveFile) and event.op == "move":  # written to a temporary file first
            self._ckpts = [replace(ck, path=event.path) if ck.path == event.source else ck for ck in self._ckpts]
        return iter(())

    def _missing(self, ck: Checkpoint, counted: set[str]) -> list[str]:
        required = self.config.required + (("scaler",) if self._scaler and "scaler" not in self.config.required else ())
        missing = []
        for part in required:
            if part == "buffers" or part in ck.has or (part == "step" and ck.path in counted):
                continue
            if part == "scheduler" and not self._has_scheduler(ck):
                continue  # no scheduler object: nothing to restore
            missing.append(part)
        if ck.lost_buffers:
            missing.append("buffers")
        return missing

    def _has_scheduler(self, ck: Checkpoint) -> bool:
        """Was there an LR scheduler whose state this checkpoint should hold?"""
        if self._live:
            return bool(self._schedulers)
        return bool(ck.initial_lrs)  # from a file: torch's LR schedulers write initial_lr

    def finish(self) -> Iterator[Finding]:
        counted = {ck.path for ck in self._ckpts if "step" in ck.has}
        bad = [(ck, missing) for ck in self._ckpts if (missing := self._missing(ck, counted))]
        if not bad:
            return
        ck, missing = bad[0]
        absent = [p for p in OPTIONAL if p not in ck.has and p not in missing
                  and not (p == "scaler" and self._live)]  # live: no GradScaler in use
        if "optimizer" in missing and "scheduler" not in ck.has + tuple(missing) and not self._live:
            absent.insert(0, "scheduler")  # no optimizer groups to say whether one was used
        at = f" (step {ck.step})" if ck.step is not None else ""
        if ck.where:
            at += f", saved at {ck.where},"
        why = "; ".join(f"no {m}: {self._effect(m, ck)}" for m in missing)
        note = ""
        if "scheduler" in missing:
            note += (f" The run steps an LR scheduler ({', '.join(sorted(self._schedulers))})." if self._live
                     else " Its optimizer groups carry initial_lr, so an LR scheduler was in use.")
        if "scaler" in missing and self._scaler:
            note += " This run steps an AMP GradScaler, so its state is needed too."
        if "buffers" in missing:
            shown = ", ".join(ck.lost_buffers[:4]) + (" ..." if len(ck.lost_buffers) > 4 else "")
            note += (f" Its BatchNorm modules ({shown}) have weight and bias but no running_mean/"
                     "running_var, and no buffer at all is saved: the state was built from "
                     "named_parameters(), which also drops frozen parameters.")
        also = "".join(f" Also absent: {p} ({ABSENT_NOTE[p]})." for p in absent)
        more = f" {len(bad) - 1} more checkpoint(s) are incomplete too." if len(bad) > 1 else ""
        entries = ", ".join(ENTRY[m] for m in missing)
        yield finding(
            self.id, step=ck.step,
            message=(
                f"{ck.path}{at} is {_what(ck, missing)}: {why}.{note}{also}{more}"
            ),
            cause=(
                "The save call stores only some of the objects the training loop needs back: "
                "typically torch.save(model.state_dict()) or a dict written before the scheduler, "
                "scaler or step counter was added."
                + _format_cause(ck.format)
            ),
            fix=(
                (f"Save a dict instead of the bare state_dict: torch.save({{'model': model.state_dict(), "
                 f"{entries}}}, path)" if ck.format == "state-dict" else f"Add {entries} to the saved dict")
                + f" and restore {'them' if len(missing) > 1 else 'it'} on resume (load_state_dict, and the "
                "step counter)." + _format_fix(ck.format)
            ),
            evidence={"path": ck.path, "format": ck.format, "present": list(ck.has),
                      "missing": missing, "also_absent": absent, "step": ck.step,
                      "lost_buffers": list(ck.lost_buffers),
                      "optimizer_steps": ck.optimizer_steps,
                      "schedulers": sorted(self._schedulers),
                      "incomplete_checkpoints": [c.path for c, _ in bad]},
            where=([ck.where] if ck.where else []) + [c.path for c, _ in bad][:8],
        )

    def _effect(self, part: str, ck: Checkpoint) -> str:
        if part == "step" and ck.optimizer_steps is not None:
            return (f"{EFFECT['step']}; no integer in it matches the optimizer's own "
                    f"{ck.optimizer_steps} steps or grows between saves")
        return EFFECT[part]


def _what(ck: Checkpoint, missing: list[str]) -> str:
    if ck.format == "state-dict":  # bare weights judged for resuming: the reader went by its name
        return ("named as the checkpoint to resume from, but holds only the model's state_dict "
                f"(no {', '.join(missing)})")
    if ck.meta and not set(ck.has) - {"model", "ema"}:
        return (f"a training checkpoint (it saves {', '.join(ck.meta[:4])} beside the weights) holding "
                f"{', '.join(ck.has)} but no {', '.join(missing)}")
    return f"a training checkpoint holding {', '.join(ck.has)} but no {', '.join(missing)}"


def _format_cause(kind: str) -> str:
    if kind == "hf-folder":
        return " A Hugging Face Trainer folder without optimizer.pt/scheduler.pt comes from save_only_model=True."
    if kind == "lightning":
        return " A Lightning checkpoint without optimizer_states comes from save_weights_only=True."
    return ""


def _format_fix(kind: str) -> str:
    if kind == "hf-folder":
        return " With the Hugging Face Trainer, keep save_only_model=False for checkpoints you resume from."
    if kind == "lightning":
        return " With Lightning, use ModelCheckpoint(save_weights_only=False) for resumable checkpoints."
    return ""
