"""no-gradient: trainable parameters held by the optimizer never receive a gradient."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterator

from traindoc.detectors._base import Detector
from traindoc.detectors._common import Example, finding, names, require
from traindoc.events import Event, Optimizer, ParamStats
from traindoc.findings import Finding


class NoGradient(Detector):
    """Parameters the optimizer holds (with requires_grad) whose gradient stayed None or exactly
    zero on every sampled step so far, while other parameters did get gradients (steps where
    *every* gradient is zero belong to constant-loss). Steps where the model that ran has
    parameters no optimizer holds belong to optimizer-param-mismatch and are not counted.

    Also: an optimizer whose every parameter is frozen (``requires_grad=False``) on every
    sampled step, so its ``step()`` can never change anything (a freeze loop that also froze
    the parameters meant to train). An optimizer holding some frozen parameters beside trained
    ones (a backbone frozen on purpose) is not judged by this rule.

    Also, with several optimizers: one whose parameters got no gradient on every sampled step
    it took, while another optimizer's parameters got gradients on theirs (a GAN generator
    whose output was detached once, ``fake = netG(z).detach()``, and reused for its own step:
    its loss reaches only the discriminator). Such a step has no gradient anywhere in the
    stepping optimizer, which alone would be constant-loss's; the other optimizer's gradients
    show that the losses do reach parameters, just not these.

    A gradient of exact zeros on a parameter whose module's other parameters got a gradient on
    the same step is not counted: the loss reaches that module, and this parameter's share
    cancels. A WGAN critic's output bias is one: the real scores' mean enters the loss with -1
    and the fake scores' with +1, so a shift of every score changes nothing and the bias's
    gradient is exactly 0 while the layer's weights learn. A gradient that is None is counted,
    and so is a module whose every gradient is zero (a head whose loss term is multiplied by 0).

    A gradient the backward gave and the script removed before the step (``p.grad = None``:
    DINO's last layer in its first epoch, SwAV's prototypes in their first iterations) shows
    that the loss reaches the parameter: it is judged at the end of the run only, and fires when
    it was removed on every sampled step, so that the parameter never trained. A parameter that
    got no gradient at first and then did (a late start) turns the finding into a note.
    """

    id = "no-gradient"
    needs = frozenset({"params"})
    uses = frozenset({"optimizer"})
    examples = (
        Example("zoo/detached_branch.py", 0),
        Example("zoo/gan_detached_fake_reused.py", 1),
        Example("zoo/pix2pix_fake_detached_in_forward.py", 1),
        Example("zoo/finetune_head_frozen_too.py", 0),
        Example("zoo/deepspeed_zero_aux_head_detached.py", 0),
        Example("zoo/swav_prototypes_never_unfrozen.py", 0),
        Example("zoo/healthy_swav_prototypes_warmup.py", None),
        Example("zoo/healthy_dino_last_layer_warmup.py", None),
        Example("zoo/healthy_lightning_self_distillation.py", None),
        Example("zoo/healthy_deepspeed_zero_multitask.py", None),
        Example("zoo/healthy_finetune.py", None),
        Example("zoo/healthy_gan.py", None),
        Example("zoo/healthy_dcgan_detach_for_d.py", None),
        Example("zoo/healthy_pix2pix_detach_for_d.py", None),
        Example("zoo/healthy_wgan_gp.py", None),
        Example("zoo/healthy_wgan_gp_trainer.py", None),
        Example("golden/healthy_noisy_loss.jsonl", None),
    )

    # Carried over a resume: the step being gathered, which parameters got a gradient and which
    # never did, the measured steps (counts towards confirm), and the optimizers whose parameters
    # are all frozen.
    carry = ("_step", "_rows", "_counted", "_got", "_never", "_numel", "_first", "_fired", "_late",
             "_cleared", "_frozen", "_frozen_steps", "_frozen_fired", "_cls", "_wet", "_dry", "_dry_steps",
             "_dry_fired")

    @dataclass(frozen=True)
    class Config:
        confirm: int = 5  # sampled steps without a gradient before firing

        def __post_init__(self) -> None:
            require(self, confirm=">= 1")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or self.Config()
        self._step: int | None = None
        self._rows: list[ParamStats] = []
        self._counted = 0
        self._got: set[str] = set()
        self._never: dict[str, int] = {}
        self._numel: dict[str, int] = {}
        self._first: int | None = None
        self._fired = False
        self._late: dict[str, int] = {}  # fired on, then got a gradient: name -> that step
        self._cleared: dict[str, int] = {}  # cleared after backward on every sampled step: -> first
        self._frozen: dict[int, list[ParamStats]] = {}  # optimizer -> its rows, all frozen so far
        self._frozen_steps: dict[int, int] = {}
        self._frozen_fired: set[int] = set()
        self._cls: dict[int, str] = {}
        self._wet: set[int] = set()  # optimizers whose parameters got a gradient on a sampled step
        self._dry: dict[int, list[ParamStats]] = {}  # optimizer -> its rows on its first dry step
        self._dry_steps: dict[int, int] = {}  # optimizer -> sampled steps without any gradient
        self._dry_fired: set[int] = set()

    def observe(self, event: Event) -> Iterator[Finding]:
        if isinstance(event, Optimizer):
            self._cls[event.index] = event.cls
            return
        assert isinstance(event, ParamStats)
        if event.step != self._step:
            yield from self._judge()
            self._step, self._rows = event.step, []
        self._rows.append(event)

    def finish(self) -> Iterator[Finding]:
        yield from self._judge()
        cleared = bool(self._cleared) and self._counted >= self.config.confirm
        if cleared:  # removed by the script on every sampled step: never trained
            self._never.update(self._cleared)
            self._first = min(self._never.values())
        if self._never and (self._fired or cleared):
            yield self._finding()  # final evidence: the parameters that never got one
        elif self._late and not self._never:
            yield self._late_note()

    def _judge(self) -> Iterator[Finding]:
        rows, self._rows = self._rows, []
        if not rows:
            return
        yield from self._judge_frozen(rows)
        if any(r.optimizer < 0 for r in rows):
            return
        held = [r for r in rows if r.requires_grad and r.has_grad is not None]
        yield from self._judge_dry(held)
        if not any(r.has_grad and r.grad for r in held):
            return  # every gradient zero: constant-loss, or another optimizer's (_judge_dry)
        self._counted += 1
        learning = {layer_of(r.name) for r in held if r.has_grad and r.grad}  # reached by the loss
        for r in held:
            self._numel[r.name] = r.numel
            if r.has_grad and r.grad:
                self._got.add(r.name)
                self._cleared.pop(r.name, None)
                if self._never.pop(r.name, None) is not None and self._fired:
                    self._late[r.name] = r.step
            elif r.cleared:  # the loss reaches it: judged at the end (see the class docstring)
                if r.name not in self._got:
                    self._cleared.setdefault(r.name, self._never.pop(r.name, r.step))
            elif r.has_grad and layer_of(r.name) in learning:
                continue  # reached by the loss, its gradient cancels: see the class docstring
            elif r.name not in self._got:
                self._never.setdefault(r.name, r.step)
        if self._never and self._first is None:
            self._first = min(self._never.values())
        if not self._fired and self._never and self._counted >= self.config.confirm:
            self._fired = True
            yield self._finding()

    def _judge_dry(self, held: list[ParamStats]) -> Iterator[Finding]:
        """Per optimizer: a step with no gradient anywhere in it counts as dry; it fires once
        another optimizer has got gradients and this one never has."""
        by_opt: dict[int, list[ParamStats]] = {}
        for r in held:
            by_opt.setdefault(r.optimizer, []).append(r)
        dry = not any(r.has_grad and r.grad for r in held)
        for opt, rs in by_opt.items():
            if not dry:
                if any(r.has_grad and r.grad for r in rs):
                    self._wet.add(opt)
                continue
            if opt in self._wet:
                continue
            self._dry.setdefault(opt, rs[:50])
            self._dry_steps[opt] = self._dry_steps.get(opt, 0) + 1
        for opt, n in self._dry_steps.items():
            if (opt not in self._wet and opt not in self._dry_fired and n >= self.config.confirm
                    and self._wet - {opt}):
                self._dry_fired.add(opt)
                yield self._dry_finding(opt)

    def _dry_finding(self, opt: int) -> Finding:
        rows = self._dry[opt]
        first = rows[0].step
        names_ = [r.name for r in rows]
        cls = self._cls.get(opt, "optimizer")
        others = ", ".join(f"{self._cls.get(o, 'optimizer')} (optimizer {o})" for o in sorted(self._wet))
        return finding(
            self.id, step=first,
            message=(
                f"{cls} (optimizer {opt}) holds {len(rows)} trainable parameter(s) ({names(names_)}; "
                f"{sum(r.numel for r in rows)} elements) that got no gradient (None or exactly 0) on "
                f"any of the {self._dry_steps[opt]} sampled steps it took from step {first}, while "
                f"the parameters of {others} got gradients: the loss backpropagated before its "
                "step() does not reach them."
            ),
            cause=("Its part of the model was cut off from its own loss: in a GAN, the generator's "
                   "output detached once (`fake = netG(z).detach()`) and the same tensor reused "
                   "for the generator's step, so the generator loss reaches only the "
                   "discriminator; or a module's output stored detached in forward() and reused."),
            fix=("Detach only where the other network steps: `netD(fake.detach())` in the "
                 "discriminator's step, `netD(fake)` (not detached) in the generator's step."),
            evidence={"optimizer": opt, "parameters": names_, "count": len(rows),
                      "sampled_steps": self._dry_steps[opt], "with_gradients": sorted(self._wet)},
            where=names_[:10],
        )

    def _judge_frozen(self, rows: list[ParamStats]) -> Iterator[Finding]:
        by_opt: dict[int, list[ParamStats]] = {}
        for r in rows:
            if r.optimizer >= 0:
                by_opt.setdefault(r.optimizer, []).append(r)
        for opt, held in by_opt.items():
            if any(r.requires_grad or r.has_grad for r in held):
                self._frozen_steps[opt] = -1  # it trains something: never judged again
                continue
            if self._frozen_steps.get(opt, 0) < 0:
                continue
            self._frozen_steps[opt] = self._frozen_steps.get(opt, 0) + 1
            self._frozen.setdefault(opt, held)
            if self._frozen_steps[opt] >= self.config.confirm and opt not in self._frozen_fired:
                self._frozen_fired.add(opt)
                yield self._frozen_finding(opt, held)

    def _frozen_finding(self, opt: int, held: list[ParamStats]) -> Finding:
        first = self._frozen[opt][0].step
        names_ = [r.name for r in held]
        cls = self._cls.get(opt, f"Optimizer {opt}")
        return finding(
            self.id, step=first,
            message=(
                f"{cls} holds {len(held)} parameter(s) ({names(names_)}; "
                f"{sum(r.numel for r in held)} elements), all with requires_grad=False, on every one "
                f"of {self._frozen_steps[opt]} sampled steps from step {first}: none of them gets a "
                "gradient, so its step() can never change anything."
            ),
            cause=("The parameters meant to train were frozen with the rest: a freeze loop over "
                   "model.parameters() that runs after the new head was attached (or a "
                   "requires_grad_(False) on the whole model), with the optimizer built from the "
                   "head only. A `loss.requires_grad_(True)` added to silence \"element 0 of "
                   "tensors does not require grad\" hides the same mistake."),
            fix=(f"Freeze before attaching the new layers, or set requires_grad=True again on "
                 f"{names_[0]} and the other parameters the optimizer should train; drop any "
                 "`loss.requires_grad_(True)`."),
            evidence={"optimizer": opt, "parameters": names_[:50], "count": len(held),
                      "sampled_steps": self._frozen_steps[opt], "requires_grad": False},
            where=names_[:10],
        )

    def _finding(self) -> Finding:
        bad = sorted(self._never, key=lambda n: -self._numel[n])
        total = sum(self._numel.values()) or 1
        share = sum(self._numel[n] for n in bad) / total
        cleared = [n for n in bad if n in self._cleared]
        message = (f"{len(bad)} trainable parameter(s) held by the optimizer got no gradient (None or "
                   f"exactly 0) on any of {self._counted} sampled steps: {names(bad)}; "
                   f"{share:.1%} of the optimizer's parameter elements.")
        cause = None
        fix = (f"Trace how {bad[0]} reaches the loss; remove the detach or add the branch's term to the "
               "loss. If they are meant to be frozen, set requires_grad_(False) and leave them out of "
               "the optimizer.")
        if cleared:
            message += (f" The backward gave {names(cleared)} a gradient each time, and the script removed "
                        "it before optimizer.step() (p.grad = None): not trained in this run.")
            cause = ("The gradient is cleared on purpose for a warm-up (a layer frozen for the first "
                     "epoch or iterations), and the condition that ends the warm-up never became "
                     "false in this run: a per-epoch index compared with a number of iterations, an "
                     "epoch counter that is not advanced, or a run shorter than the warm-up.")
            fix = (f"Check the condition under which the script sets {cleared[0]}.grad = None: it "
                   "should stop after the warm-up, counted in the same unit as the warm-up's length.")
        return finding(
            self.id, step=self._first, message=message, cause=cause, fix=fix,
            evidence={"parameters": bad[:50], "count": len(bad), "share_of_elements": share,
                      "sampled_steps": self._counted, "cleared_by_script": cleared[:50]},
            where=bad[:10],
        )

    def _late_note(self) -> Finding:
        """Every parameter it fired on got a gradient later: a late start, said as a note."""
        late = sorted(self._late, key=lambda n: -self._numel[n])
        start = min(self._late.values())
        f = finding(
            self.id, step=self._first,
            message=(f"{len(late)} trainable parameter(s) got no gradient (None or exactly 0) on the "
                     f"sampled steps from step {self._first}, then got one on those from step {start}: "
                     f"{names(late)}. They train from then on."),
            cause=("The loss reaches these parameters only from a later step: a warm-up that "
                   "freezes them, a curriculum that adds their loss term, a branch enabled later, or "
                   "a detach removed from the code before a resume."),
            fix=(f"Nothing, if {late[0]} is meant to start late. Otherwise, find what changed at "
                 f"step {start}."),
            evidence={"parameters": late[:50], "count": len(late), "first_gradient_step": start,
                      "sampled_steps": self._counted},
            where=late[:10],
        )
        return replace(f, severity="info")


def layer_of(name: str) -> str:
    """The layer a parameter belongs to, by its qualified name (``net.4.bias`` -> ``net.4``)."""
    return name.rpartition(".")[0]
