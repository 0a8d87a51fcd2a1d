"""Parameter initialisation while the model is built: which code initialised each parameter,
how often, and with what spread (TF-17877: a targeted init overwritten by a blanket one).

From the script's start until the first optimizer step, the ``torch.nn.init`` functions are
wrapped, parameters are followed through torch's global parameter registration hook, and the
in-place fills people call on ``weight.data`` (``normal_``, ``uniform_``, ``zero_``, ``fill_``)
are seen by the op-level mode (probes/_ops.py), up from the start for this window. A call on a registered
parameter's storage (``module.weight`` or ``module.weight.data``) is noted against that
Parameter object, with the code that called it (the user's or a library's
``_init_weights``) and the standard deviation it left, read from at most 4096 strided
elements. torch's own defaults (``reset_parameters`` of torch.nn modules) have no such frame
and are not noted. Calls on other tensors (data, buffers) are ignored. At the first optimizer
step the patches come off (training pays nothing) and the parameters whose last init changed
the spread left by an earlier one are reported. A model moved to another device keeps its
Parameter objects, so the notes still apply.
"""

from __future__ import annotations

import functools
import math
import sys
from typing import Any

import torch
import torch.nn as nn

from traindoc.events import InitOverwritten
from traindoc.live.objects import ObjectMap, file_line, is_user_file
from traindoc.live.probes._ops import caller, torch_function
from traindoc.live.probes._patch import Patcher, is_compiling
from traindoc.live.probes.base import Probe
from traindoc.live.session import Session

_INIT_FUNCTIONS = ("normal_", "trunc_normal_", "uniform_", "xavier_uniform_", "xavier_normal_",
                   "kaiming_uniform_", "kaiming_normal_", "orthogonal_", "zeros_", "ones_", "constant_")
_TENSOR_METHODS = ("normal_", "uniform_", "zero_", "fill_")
_WRAPPERS = frozenset(_INIT_FUNCTIONS + _TENSOR_METHODS) | {
    "_no_grad_normal_", "_no_grad_uniform_", "_no_grad_trunc_normal_", "_no_grad_fill_", "_no_grad_zero_"}
_MAX_PARAMS = 100_000  # registered parameters followed (bounded memory)
_SPREAD = 1.5  # a later init that changes the std by more than this overwrote a deliberate one


class InitProbe(Probe):
    name = "init"
    signals = ("init",)

    def __init__(self, session: Session, patcher: Patcher) -> None:
        super().__init__(session, patcher)
        self._guard = patcher.guard
        self._ops = patcher.ops
        self._handle: Any = None  # torch's parameter registration hook, while construction lasts
        self._saved: list[tuple[Any, str, Any]] = []
        self._by_ptr: dict[int, Any] = {}  # data_ptr at registration -> weakref'd Parameter
        self._notes = ObjectMap()  # Parameter -> list of (site, std)
        self._counts: dict[str, int] = {}  # site -> parameters it initialised
        self._depth = 0  # nested init calls (nn.init.normal_ calls Tensor.normal_)

    def install(self) -> None:
        from torch.nn.modules.module import register_module_parameter_registration_hook

        self._handle = register_module_parameter_registration_hook(self._registered)
        for fn in _INIT_FUNCTIONS:
            self._set(nn.init, fn, self._wrap_init)
        self._ops.listen(self.name, [torch_function(getattr(torch.Tensor, fn)) for fn in _TENSOR_METHODS],
                         self._filled)
        if not self.s.clock.trained:  # construction is still going on (not a watch installed again)
            self._ops.hold(self.name, now=True)

    def _set(self, owner: Any, name: str, make: Any) -> None:
        orig = getattr(owner, name)
        self._saved.append((owner, name, orig))
        setattr(owner, name, make(orig))

    def _remove(self) -> None:
        for owner, name, orig in reversed(self._saved):
            setattr(owner, name, orig)
        self._saved.clear()
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
        self._ops.release(self.name)

    def uninstall(self) -> None:
        self._remove()

    def on_first_step(self, opt: Any) -> None:
        self._remove()  # construction is over: training runs without these patches
        self._guard(self.name, self._report)
        self._by_ptr.clear()

    # ---- construction ------------------------------------------------------------------------
    def _registered(self, module: Any, name: str, param: Any) -> None:
        if param is not None and len(self._by_ptr) < _MAX_PARAMS:
            self._by_ptr[param.data_ptr()] = param  # the Parameter, while construction lasts

    def _filled(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        """``weight.data.normal_(...)`` and the like, written by hand (inside an init function
        of torch.nn.init, the function's own call is noted)."""
        tensor = args[0] if args else None
        if not self._depth and isinstance(tensor, torch.Tensor) and tensor.data_ptr() in self._by_ptr:
            self._note(tensor, caller())

    def _wrap_init(self, orig: Any) -> Any:
        probe = self

        @functools.wraps(orig)
        def init(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if probe._depth or is_compiling():
                return orig(tensor, *args, **kwargs)
            probe._depth += 1
            try:
                out = orig(tensor, *args, **kwargs)
            finally:
                probe._depth -= 1
            if isinstance(tensor, torch.Tensor) and tensor.data_ptr() in probe._by_ptr:
                probe._guard(probe.name, probe._note, tensor, sys._getframe(1))
            return out

        return init

    def _note(self, tensor: torch.Tensor, frame: Any) -> None:
        """``frame``: the code that called the init."""
        param = self._by_ptr[tensor.data_ptr()]
        if param.data_ptr() != tensor.data_ptr() or param.numel() != tensor.numel():
            return  # the address was reused by another tensor
        site = _site(frame)
        if not site:
            return  # torch's own default init
        with torch.no_grad():
            flat = tensor.detach().reshape(-1)
            sample = flat[:: max(1, flat.numel() // 4096)].float()
            # sync point (accelerators): once per init call, while the model is built
            std = float(sample.std()) if sample.numel() > 1 else 0.0
        notes = self._notes.get(param)
        if notes is None:
            notes = []
            self._notes[param] = notes
        if site not in [s for s, _ in notes]:
            self._counts[site] = self._counts.get(site, 0) + 1
        if notes and notes[-1][0] == site:
            notes[-1] = (site, std)  # the same code again (post_init() called twice): one init
        else:
            notes.append((site, std))

    # ---- the first step ----------------------------------------------------------------------
    def _report(self) -> None:
        """Every noted parameter (all models, not only the first optimizer's)."""
        for p, notes in self._notes.items():
            if len(notes) >= 2 and _changed(notes[-2][1], notes[-1][1]):
                self.s.emit(InitOverwritten(
                    step=self.s.clock.current_step, name=self.s.model.param_name(p),
                    sites=tuple(s for s, _ in notes[-4:]), stds=tuple(v for _, v in notes[-4:]),
                    counts=tuple(self._counts.get(s, 0) for s, _ in notes[-4:])))


def _changed(before: float, after: float) -> bool:
    if before == 0.0 or after == 0.0:
        return before != after
    return abs(math.log(after / before)) > math.log(_SPREAD)


def _site(frame: Any) -> str:
    """``function (file:line)`` of the code that chose the init, or "" when torch itself called
    it (a module's default ``reset_parameters``). Pass-through wrappers named like the init
    functions (transformers' ``initialization.normal_``) are skipped: the site is their caller
    (``_init_weights``), so a blanket init and a targeted one are told apart."""
    if not is_user_file(frame.f_code.co_filename):
        return ""
    while frame.f_code.co_name in _WRAPPERS and frame.f_back is not None \
            and is_user_file(frame.f_back.f_code.co_filename):
        frame = frame.f_back
    return f"{frame.f_code.co_name} ({file_line(frame.f_code.co_filename, frame.f_lineno)})"
