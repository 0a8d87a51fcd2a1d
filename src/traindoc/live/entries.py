"""torch's private entries that traindoc wraps where no hook exists, looked up once, so that the
live probes and preflight's launches wrap the same ones (docs/live-patches.md)."""

from __future__ import annotations

import torch

# torch's entry into the autograd engine (torch >= 2.3), looked up in torch.autograd's namespace
# by torch.autograd.backward, which Tensor.backward calls: "" where this torch has none
ENGINE_ENTRY = "_engine_run_backward" if callable(getattr(torch.autograd, "_engine_run_backward", None)) else ""
