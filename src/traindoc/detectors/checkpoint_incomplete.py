"""checkpoint-incomplete: a training checkpoint lacks state needed to resume exactly."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Iterator

from traindoc.detectors._common import Example, finding
from traindoc.events import Checkpoint, Event
from traindoc.findings import Finding

# What each part restores on resume (for the message).
EFFECT = {
    "optimizer": "Adam moments / momentum restart from zero (a loss spike after resume)",
    "scheduler": "the LR schedule restarts (warmup again, or a jump)",
    "step": "the step/epoch counter restarts (schedules, logging and data position)",
    "scaler": "the fp16 GradScaler restarts at 65536 and skips the first steps",
    "rng": "data order, dropout and augmentation differ from an uninterrupted run",
}
OPTIONAL = ("scaler", "rng")


class CheckpointIncomplete:
    """A training checkpoint (weights plus some training state) misses optimizer state, the LR
    scheduler (judged only when the optimizer's groups carry ``initial_lr``, which an LR
    scheduler writes: a run without a scheduler needs none) or the step/epoch. GradScaler and RNG
    state are listed when absent but fire only when named in ``required`` (from a checkpoint
    traindoc cannot tell whether fp16 AMP was used or whether a bit-exact resume matters). Bare
    weights files (a state_dict, ``model.safetensors``) are not resume checkpoints: the detector
    is reported not applicable to them. Live, a run that steps an enabled AMP GradScaler (the
    ``amp`` signal) needs the scaler's state too; checkpoints are judged at the end, when that is
    known."""

    id: ClassVar[str] = "checkpoint-incomplete"
    needs: ClassVar[frozenset[str]] = frozenset({"train_state"})
    uses: ClassVar[frozenset[str]] = frozenset({"amp"})
    examples: ClassVar[tuple[Example, ...]] = (
        Example("ckpt/golden/incomplete_no_optimizer.jsonl", 300),
        Example("ckpt/golden/incomplete_no_scheduler.jsonl", 40),
        Example("ckpt/golden/complete_training.jsonl", None),
        Example("ckpt/golden/bare_weights.jsonl", None),
        Example("zoo/ckpt_incomplete.py", -1),
        Example("zoo/healthy_ckpt_resume.py", None),
    )

    @dataclass(frozen=True)
    class Config:
        required: tuple[str, ...] = ("optimizer", "scheduler", "step")

        def __post_init__(self) -> None:
            object.__setattr__(self, "required", tuple(self.required))  # a TOML list is fine too
            unknown = [r for r in self.required if r not in EFFECT]
            if unknown:
                raise ValueError(f"required must name parts among {', '.join(EFFECT)}, got {unknown}")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._bad: list[tuple[Checkpoint, list[str], list[str]]] = []
        self._ckpts: list[Checkpoint] = []
        self._scaler = False  # live: the run steps an AMP GradScaler

    def observe(self, event: Event) -> Iterator[Finding]:
        if not isinstance(event, Checkpoint):  # an ``amp`` event: a GradScaler is in use
            self._scaler = True
            return iter(())
        if event.training:
            self._ckpts.append(event)
        return iter(())

    def _judge(self, event: Checkpoint) -> None:
        missing = []
        required = self.config.required + (("scaler",) if self._scaler and "scaler" not in self.config.required else ())
        for part in required:
            if part in event.has:
                continue
            if part == "scheduler" and not event.initial_lrs:
                continue  # no scheduler was attached to the optimizer: nothing to restore
            missing.append(part)
        if missing:
            absent = [p for p in OPTIONAL if p not in event.has and p not in missing]
            self._bad.append((event, missing, absent))

    def finish(self) -> Iterator[Finding]:
        self._bad = []
        for ck in self._ckpts:
            self._judge(ck)
        if not self._bad:
            return
        ck, missing, absent = self._bad[0]
        at = f" (step {ck.step})" if ck.step is not None else ""
        if ck.where:
            at += f", saved at {ck.where},"
        why = "; ".join(f"no {m}: {EFFECT[m]}" for m in missing)
        sched_note = (" Its optimizer groups carry initial_lr, so an LR scheduler was in use."
                      if "scheduler" in missing else "")
        if "scaler" in missing and self._scaler:
            sched_note += " This run steps an AMP GradScaler, so its state is needed too."
        also = (f" Also absent: {', '.join(absent)} (needed for fp16 AMP / a bit-exact resume)."
                if absent else "")
        more = f" {len(self._bad) - 1} more checkpoint(s) are incomplete too." if len(self._bad) > 1 else ""
        yield finding(
            self.id, step=ck.step,
            message=(
                f"{ck.path}{at} is a training checkpoint holding {', '.join(ck.has)} but no "
                f"{', '.join(missing)}: {why}.{sched_note}{also}{more}"
            ),
            cause=(
                "The save call stores only some of the objects the training loop needs back: "
                "typically torch.save(model.state_dict()) or a dict written before the scheduler, "
                "scaler or step counter was added."
                + _format_cause(ck.format)
            ),
            fix=(
                "Save the whole state and write it atomically: torch.save({'model': "
                "model.state_dict(), 'optimizer': optimizer.state_dict(), 'scheduler': "
                "scheduler.state_dict(), 'scaler': scaler.state_dict(), 'step': step, 'rng': "
                "torch.get_rng_state()}, path + '.tmp'); os.replace(path + '.tmp', path)."
                + _format_fix(ck.format)
            ),
            evidence={"path": ck.path, "format": ck.format, "present": list(ck.has),
                      "missing": missing, "also_absent": absent, "step": ck.step,
                      "incomplete_checkpoints": [c.path for c, _, _ in self._bad]},
            where=([ck.where] if ck.where else []) + [c.path for c, _, _ in self._bad][:8],
        )


def _format_cause(fmt: str) -> str:
    if fmt == "hf-folder":
        return " A Hugging Face Trainer folder without optimizer.pt/scheduler.pt comes from save_only_model=True."
    if fmt == "lightning":
        return " A Lightning checkpoint without optimizer_states comes from save_weights_only=True."
    return ""


def _format_fix(fmt: str) -> str:
    if fmt == "hf-folder":
        return " With the Hugging Face Trainer, keep save_only_model=False for checkpoints you resume from."
    if fmt == "lightning":
        return " With Lightning, use ModelCheckpoint(save_weights_only=False) for resumable checkpoints."
    return ""
