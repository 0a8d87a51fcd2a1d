"""Required order: modules evaluated before the training-mode forward their state needs.

Legacy ``nn.utils.spectral_norm`` keeps its power-iteration vectors ``u``/``v`` as buffers,
starts them random, and updates them only in training-mode forwards; in eval mode it divides
the weight by ``u·Wv`` as they stand. An evaluation before any training forward (a sanity
validation at step 0) therefore divides by a random estimate of the spectral norm and its
outputs are off by orders of magnitude (PT-51800). The ``SpectralNorm`` hook class is patched,
so only models that use it pay anything: one identity lookup per call, and at a module's
first eval-mode call before any training-mode call, one measurement of its spectral norm.
A module restored from a checkpoint carries converged vectors: its estimate matches and the
measurement says so.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

import torch

from traindoc.events import EvalBeforeTrain
import sys

from traindoc.live.objects import ObjectMap, frame_modules, largest_container, user_site
from traindoc.live.probes._patch import Patcher, is_traced
from traindoc.live.probes.base import Probe
from traindoc.live.session import Session

_EXACT_NUMEL = 1 << 22  # larger weights: power iteration instead of a full SVD


class OrderProbe(Probe):
    name = "order"
    signals = ("eval_order",)

    def __init__(self, session: Session, patcher: Patcher) -> None:
        super().__init__(session, patcher)
        self._seen = ObjectMap()  # module -> "train" once a training forward ran, else "eval"

    def install(self) -> None:
        sn = importlib.import_module("torch.nn.utils.spectral_norm")  # the function shadows it
        self._patch(sn.SpectralNorm, "__call__", self._wrap)

    def uninstall(self) -> None:
        pass

    def _wrap(self, orig: Any) -> Any:
        probe = self

        @functools.wraps(orig)
        def __call__(hook: Any, module: Any, inputs: Any) -> Any:
            state = probe._seen.get(module)
            if state != "train" and not is_traced():
                if module.training:
                    probe._seen[module] = "train"
                elif state is None:
                    probe._seen[module] = "eval"
                    probe._guard(probe.name, probe._measure, hook, module)
            return orig(hook, module, inputs)

        return __call__

    def _measure(self, hook: Any, module: Any) -> None:
        with torch.no_grad():
            weight = getattr(module, hook.name + "_orig")
            u = getattr(module, hook.name + "_u").double()
            v = getattr(module, hook.name + "_v").double()
            mat = hook.reshape_weight_to_matrix(weight).double()
            # the sign only flips the output: its size is what the module divides by
            estimate = torch.dot(u, mat @ v).abs()
            actual = _spectral_norm(mat)
            # sync point: once per spectral-normalised module, at its first eval-mode forward
            est, act = float(estimate), float(actual)
        name = self.s.model.module_name(module)
        if name == type(module).__name__:  # not named yet (no training step so far)
            owner = largest_container(module, frame_modules(sys._getframe(3)))
            name = next((n for n, m in owner.named_modules() if m is module and n), name)
        self.s.emit(EvalBeforeTrain(step=self.s.clock.current_step, module=name, state="spectral_norm",
                                    estimate=est, actual=act, where=user_site(4)))


def _spectral_norm(mat: torch.Tensor) -> torch.Tensor:
    """The largest singular value: exact for small weights, else 50 power iterations from a
    vector drawn with traindoc's own generator (the user's RNG stream is not touched)."""
    if mat.numel() <= _EXACT_NUMEL:
        return torch.linalg.matrix_norm(mat, ord=2)
    gen = torch.Generator(device=mat.device).manual_seed(0)
    v = torch.randn(mat.shape[1], generator=gen, device=mat.device, dtype=mat.dtype)
    for _ in range(50):
        v = torch.nn.functional.normalize(mat.t() @ torch.nn.functional.normalize(mat @ v, dim=0), dim=0)
    return torch.linalg.vector_norm(mat @ v)
