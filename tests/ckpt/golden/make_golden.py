"""Writes the checkpoint golden event streams in this folder from real checkpoints.

Each stream is what `traindoc ckpt inspect` / `ckpt diff` produces for a checkpoint built by
``tests/ckpt/ckpt_fixtures.py`` (real torch.save / safetensors files, a few real optimizer
steps). Paths are replaced by stable names and timestamps by 0, so the files are reproducible.
Run `OMP_NUM_THREADS=1 python tests/ckpt/golden/make_golden.py` after changing the producer;
the .jsonl files are committed and replayed by the detector example tests without torch.
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))

import ckpt_fixtures as F  # noqa: E402

from traindoc.events import Checkpoint, RunStart  # noqa: E402
from traindoc.record import dump_line  # noqa: E402
from traindoc.sources.ckpt import produce  # noqa: E402


def _stable(events: list[object], tmp: Path) -> list[object]:
    out = []
    for e in events:
        if isinstance(e, RunStart):
            e = dataclasses.replace(e, script=e.script.replace(f"{tmp}/", ""), python="", torch="", started=0.0)
        elif isinstance(e, Checkpoint):
            e = dataclasses.replace(e, path=e.path.replace(f"{tmp}/", ""))
        out.append(e)
    return out


def write(name: str, events: list[object], tmp: Path) -> None:
    lines = [dump_line(e) + "\n" for e in _stable(events, tmp)]  # type: ignore[arg-type]
    (HERE / name).write_text("".join(lines), encoding="utf-8")


def main() -> None:
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        inspect = {
            "complete_training.jsonl": F.complete(tmp),
            "incomplete_no_optimizer.jsonl": F.weights_only_epoch(tmp),
            "incomplete_no_scheduler.jsonl": F.no_scheduler_saved(tmp),
            "lr_overwritten_after_scheduler.jsonl": F.lr_overwritten(tmp),
            "fresh_bn_model.jsonl": F.fresh_bn(tmp),
            "bare_weights.jsonl": F.safetensors_file(tmp),
            "nonfinite_param.jsonl": F.nonfinite(tmp),
            "ema_stale_bn.jsonl": F.ema_pair(tmp, copy_buffers=False)[1],
            "nanogpt_checkpoint.jsonl": F.nanogpt(tmp),
        }
        for out, path in inspect.items():
            write(out, produce.inspect(path)[0], tmp)
        diffs = {
            "ema_frozen_bn_diff.jsonl": F.ema_copy_after_warmup(tmp),
            "healthy_bn_ema.jsonl": F.ema_pair(tmp, copy_buffers=True, name="good"),
            "bf16_norms_frozen_diff.jsonl": F.bf16_pair(tmp),
            "tiny_lr_diff.jsonl": F.tiny_lr_pair(tmp),
        }
        for out, (old, new) in diffs.items():
            write(out, produce.diff(old, new)[0], tmp)


if __name__ == "__main__":
    main()
