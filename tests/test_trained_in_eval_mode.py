"""trained-in-eval-mode on hand-made events (fires / stays quiet, resume), and the live
TrainMode events of a loop that evaluates with gradients on: its evaluation's forwards are not
training forwards."""

from __future__ import annotations

import torch
import torch.nn as nn

import traindoc
from traindoc.detectors.trained_in_eval_mode import TrainedInEvalMode
from traindoc.events import NO_GRADS, EvalPass, Event, Phase, StepEnd, TrainMode

EVAL = ("bn (BatchNorm1d)", "drop (Dropout)")


def _run(events: list[Event], det: TrainedInEvalMode | None = None) -> list:
    det = det or TrainedInEvalMode()
    found = [f for e in events for f in det.observe(e)]
    return found + list(det.finish())


def _mode(step: int, in_eval: int, root_eval: bool = True, model: str = "Net") -> TrainMode:
    return TrainMode(step=step, model=model, modules=2, in_eval=in_eval, root_eval=root_eval,
                     names=EVAL[:in_eval], where="train.py:58" if in_eval else "")


def _run_of(modes: list[tuple[int, int]], **kw: bool) -> list[Event]:
    return [_mode(step, in_eval, **kw) for step, in_eval in modes]


def test_fires_after_an_evaluation_leaves_the_model_in_eval_mode() -> None:
    events: list[Event] = _run_of([(s, 0) for s in range(16)])
    events.append(EvalPass(step=19, model="Net", role="model", duration_s=0.1, elapsed_s=1.0, where="train.py:71"))
    events += _run_of([(25, 2), (50, 2), (75, 2), (100, 2)])
    found = _run(events)
    assert found and found[0].step == 25
    last = found[-1]
    ev = last.evidence
    assert (ev["eval_steps"], ev["first_step"], ev["last_step"], ev["train_steps"]) == (4, 25, 100, 16)
    assert (ev["evaluation_step"], ev["evaluation_at"], ev["in_eval"]) == (19, "train.py:71", list(EVAL))
    assert "after the evaluation at step 19 (train.py:71)" in last.message
    assert "no later sampled step trained in train mode" in last.message
    assert list(last.where) == ["train.py:58", "train.py:71"]
    assert "model.train()" in last.fix


def test_mid_epoch_validation_counts_every_epoch_it_comes_back() -> None:
    # train() at each epoch's top puts train mode back; the mid-epoch validation takes it away
    modes = [(0, 0), (25, 2), (50, 0), (75, 2), (100, 0), (125, 2)]
    found = _run(_run_of(modes))
    assert found and found[-1].evidence["eval_steps"] == 3
    assert found[-1].evidence["train_mode_again_at"] == 50
    assert "step 50 trained in train mode again, and later sampled steps ran in eval mode again" in found[-1].message


def test_steps_in_eval_mode_that_got_no_gradient_are_counted() -> None:
    # a model that returns its loss as a float in eval mode: those steps have nothing to apply
    events: list[Event] = _run_of([(0, 0), (25, 2)])
    events += [StepEnd(step=25, optimizer=0, outcome=NO_GRADS), _mode(50, 2),
               StepEnd(step=50, optimizer=0, outcome=NO_GRADS), _mode(75, 2)]
    found = _run(events)
    assert found[-1].evidence["no_gradient_steps"] == 2
    assert "2 of those steps got no gradient at all" in found[-1].message


def test_confirm_is_a_threshold() -> None:
    modes = [(0, 0), (25, 2), (50, 2)]
    assert _run(_run_of(modes)) == []
    assert _run(_run_of(modes), TrainedInEvalMode(TrainedInEvalMode.Config(confirm=2)))


def test_quiet_when_the_model_trains_in_eval_mode_from_its_first_step() -> None:
    assert _run(_run_of([(s, 2) for s in range(0, 200, 5)])) == []


def test_quiet_when_batchnorm_is_frozen_alone_or_the_model_stays_in_train_mode() -> None:
    partial = [(0, 0)] + [(s, 1) for s in range(25, 200, 25)]
    assert _run(_run_of(partial)) == []
    root_train = [(0, 0)] + [(s, 2) for s in range(25, 200, 25)]
    assert _run(_run_of(root_train, root_eval=False)) == []


def test_a_step_with_one_train_mode_forward_trained_in_train_mode() -> None:
    # A GAN's discriminator run in eval mode for the generator's loss, in train mode for its own
    events: list[Event] = [_mode(0, 0)]
    for s in range(25, 200, 25):
        events += [_mode(s, 0), _mode(s, 2)]
    assert _run(events) == []


def test_a_new_phase_starts_over() -> None:
    events: list[Event] = _run_of([(0, 0), (10, 0)])
    events.append(Phase(step=20, index=1, reason="a new optimizer"))
    events += _run_of([(s, 2) for s in range(20, 120, 10)])
    assert _run(events) == []


def test_resumes_with_its_counts() -> None:
    first = TrainedInEvalMode()
    assert _run(_run_of([(0, 0), (25, 2), (50, 2)]), first) == []
    second = TrainedInEvalMode()
    second.load_state_dict(first.state_dict())
    found = _run(_run_of([(75, 2)]), second)
    assert found and found[0].step == 25


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.2))
        self.out = nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.body(x))


def _loop(restore: bool) -> list:
    torch.manual_seed(0)
    net = _Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    x, y = torch.randn(64, 6), torch.randint(0, 2, (64,))
    with traindoc.watch(level="thorough") as run:
        for step in range(40):
            loss = nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % 10 == 9:
                net.eval()  # an evaluation with gradients on, as scripts without no_grad write it
                net(x[:16]).argmax(1)
                if restore:
                    net.train()
    return [f for f in run.report().findings if f.id == "trained-in-eval-mode"]


def test_live_a_loop_that_evaluates_with_gradients_on() -> None:
    assert _loop(restore=True) == []
    found = _loop(restore=False)
    assert found and found[0].step == 10
    assert found[0].evidence["in_eval"] == ["body.1 (BatchNorm1d)", "body.3 (Dropout)"]
