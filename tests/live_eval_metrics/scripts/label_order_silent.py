"""The zoo's val_at_chance_label_order.py with its prints silenced: the validation accuracy
traindoc sees is then only the one it derives from the evaluation's loss calls."""

from __future__ import annotations

import builtins
import runpy
from pathlib import Path

builtins.print = lambda *args, **kwargs: None
runpy.run_path(str(Path(__file__).resolve().parents[3] / "zoo" / "val_at_chance_label_order.py"),
               run_name="__main__")
