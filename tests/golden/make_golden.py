"""Writes the golden event streams in this folder: synthetic but realistic runs, no torch.

Run `python tests/golden/make_golden.py` after changing it; the .jsonl files are committed so
that detector tests replay exactly what is written here.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

from traindoc.events import Activation, Backward, RunEnd, RunStart, Scalar
from traindoc.record import dump_line

HERE = Path(__file__).parent


def noisy_decay(steps: int, seed: int, start: float = 2.3, end: float = 0.4, noise: float = 0.08) -> list[float]:
    """A healthy loss curve: exponential decay with multiplicative minibatch noise."""
    rng = random.Random(seed)
    return [(end + (start - end) * math.exp(-s / (steps / 4))) * math.exp(rng.gauss(0, noise)) for s in range(steps)]


def stream(losses: list[float], *, extra: dict[int, list[object]] | None = None) -> list[object]:
    events: list[object] = [RunStart(source="golden", script="golden")]
    for step, loss in enumerate(losses):
        events.extend((extra or {}).get(step, []))
        events.append(Backward(step=step, value=loss, constant=False))
        events.append(Scalar(step=step, name="loss", value=loss))
        events.append(Scalar(step=step, name="grad_norm", value=abs(loss) * 0.7 if math.isfinite(loss) else loss))
    events.append(RunEnd(steps=len(losses)))
    return events


def write(name: str, events: list[object]) -> None:
    (HERE / name).write_text("".join(dump_line(e) + "\n" for e in events), encoding="utf-8")  # type: ignore[arg-type]


def main() -> None:
    write("healthy_noisy_loss.jsonl", stream(noisy_decay(300, seed=1, noise=0.15)))
    spike = noisy_decay(120, seed=2)
    spike[30] *= 6.0  # one corrupt batch
    write("loss_spike.jsonl", stream(spike))
    nan = noisy_decay(40, seed=3)
    for s in range(12, 40):
        nan[s] = math.nan
    write("nonfinite_loss.jsonl", stream(nan))
    diverging = noisy_decay(60, seed=4)[:10] + [0.9 * 1.6 ** k for k in range(50)]
    write("diverging_loss.jsonl", stream(diverging))
    masked = noisy_decay(30, seed=5)
    out = {s: [Activation(step=s, module="head", type="Linear", nan=True, is_output=True)] for s in (3, 6, 9)}
    write("masked_nan.jsonl", stream(masked, extra=out))
    constant = noisy_decay(30, seed=6)
    events = stream(constant)
    events = [Backward(step=e.step, value=1e6, constant=True) if isinstance(e, Backward) and e.step in (5, 11, 17) else e
              for e in events]
    write("constant_loss.jsonl", events)


if __name__ == "__main__":
    main()
