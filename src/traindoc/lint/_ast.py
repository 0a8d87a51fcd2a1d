"""What every lint rule imports: the parsed file (``Module``) and the helpers on its nodes.

``Module`` parses a file once and indexes it (``_index``), then finds its training flow
(``_flow``). It answers the questions the rules ask, always by following names through a
function and through simple assignments, and calls into functions and methods defined in the
same file or imported from a sibling module of the same folder (``_siblings``), never further:

- what is handed to ``backward`` (``loss.backward()``, ``scaler.scale(loss).backward()``,
  ``accelerator.backward(loss)``) and which names that loss is built from;
- which names are optimizers, schedulers, GradScalers (by the call that built them, or by the
  name they go by when they arrive as a function argument);
- whether a node runs under ``torch.no_grad()`` / ``torch.inference_mode()``;
- what a value is where it is set (``value_of``): a module constant, ``self.x`` set once, a
  dataclass config's field, an argparse default, a dict config's entry, a parameter's argument
  at the file's only call; a run setting the file does not show (``args.max_loss``) is an
  unknown of its type (``config_read``), not a reason to stay quiet;
- which model a name is, by the call that built it, and which models the file's optimizers hold
  (``_models``: ``Models``, ``Held``);
- which ``DataLoader`` a loop iterates and what its sampler is (``_loaders``).

Nothing here imports torch; it reads source only.
"""

from __future__ import annotations

from traindoc.lint._flow import Module
from traindoc.lint._modes import mode_free, mode_switch, sets_train_mode
from traindoc.lint._loaders import loaders, sampler_of, truth, unpacked_at, unwrapped
from traindoc.lint._models import Held, Models, construction, frozen
from traindoc.lint._nodes import (
    LOOP_TYPES,
    arg,
    arith_names,
    contains_word,
    dotted,
    kwarg,
    method,
    names_in,
    number,
)
from traindoc.lint._scope import AssignValue, Backward, Scope
from traindoc.lint._values import (
    drops_optimizer,
    fixed_filename,
    in_temporary_dir,
    is_constant_value,
    is_detached_value,
    nonfinite_checked,
    resolve,
    torch_saves,
    value_of,
)

__all__ = [
    "LOOP_TYPES", "AssignValue", "Backward", "Held", "Models", "Module", "Scope", "arg", "arith_names",
    "construction", "contains_word", "dotted", "drops_optimizer", "fixed_filename", "frozen", "in_temporary_dir",
    "is_constant_value", "is_detached_value", "kwarg", "loaders", "method", "mode_free", "mode_switch", "names_in",
    "nonfinite_checked", "number", "resolve", "sampler_of", "sets_train_mode", "torch_saves", "truth", "unpacked_at",
    "unwrapped",
    "value_of",
]
