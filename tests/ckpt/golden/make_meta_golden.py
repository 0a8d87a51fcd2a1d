"""Writes the golden streams of checkpoints that carry training metadata beside the weights
(issue 29): a training loop's ``{'model_state_dict', 'config', 'best_val_acc'}`` with no
optimizer, scheduler, step or RNG, and its twin, an export ``{'model', 'config'}`` named
``model_final.pt``. Run `OMP_NUM_THREADS=1 python tests/ckpt/golden/make_meta_golden.py`."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import torch  # noqa: E402

import ckpt_fixtures as F  # noqa: E402
from make_golden import write  # noqa: E402
from traindoc.sources.ckpt import produce  # noqa: E402


def main() -> None:
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        model, opt, sched = F.setup()
        F.train(model, opt, sched, 3)
        best = tmp / "best_model.pt"
        torch.save({"model_state_dict": model.state_dict(), "config": {"lr": 0.1, "epochs": 90},
                    "best_val_acc": 0.912}, best)
        final = tmp / "model_final.pt"
        torch.save({"model": model.state_dict(), "config": {"width": 16, "classes": 4}}, final)
        write("incomplete_meta_only.jsonl", produce.inspect(best)[0], tmp)
        write("export_with_config.jsonl", produce.inspect(final)[0], tmp)


if __name__ == "__main__":
    main()
