"""Parameter initialisation while the model is built: which code initialised each parameter,
how often, and with what spread (TF-17877: a targeted init overwritten by a blanket one).

From the script's start until the first optimizer step, parameters are followed through
torch's global parameter registration hook, and the op-level mode (probes/_ops.py, up from the
start for this window) sees the ``torch.nn.init`` functions (those that hand themselves to a
``TorchFunctionMode``, and the in-place fills the others are made of) and the fills people call
on ``weight.data`` (``normal_``, ``uniform_``, ``zero_``, ``fill_``). Nothing of torch.nn.init is
replaced: a tensor subclass's ``__torch_function__`` table keyed on ``nn.init.normal_`` keeps
working. A call on a registered parameter's storage (``module.weight`` or
``module.weight.data``) is noted against that Parameter object, with the code that called it
(the user's or a library's ``_init_weights``). torch's own defaults (``reset_parameters`` of
torch.nn modules) have no such frame and are not noted. Calls on other tensors (data,
buffers) are ignored.

The spread an init left (the standard deviation of at most 4096 strided elements) is read
when it is over: before the next op on a parameter from other code, or at the first optimizer
step. An init made of several ops (``trunc_normal_`` fills, then copies in resampled values;
``orthogonal_`` copies, then scales) is noted at its first and read after its last. At the
first optimizer step the window closes (training pays nothing) and the parameters whose last
init changed the spread left by an earlier one are reported. A model moved to another device
keeps its Parameter objects, so the notes still apply.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn as nn

from traindoc.events import InitOverwritten
from traindoc.live.objects import ObjectMap, file_line, is_user_file
from traindoc.live.probes._ops import INIT_FILE, caller, torch_function
from traindoc.live.probes._patch import Patcher
from traindoc.live.probes.base import Probe
from traindoc.live.session import Session

_INIT_FUNCTIONS = ("normal_", "trunc_normal_", "uniform_", "xavier_uniform_", "xavier_normal_",
                   "kaiming_uniform_", "kaiming_normal_", "orthogonal_", "zeros_", "ones_", "constant_")
_TENSOR_METHODS = ("normal_", "uniform_", "zero_", "fill_", "copy_")
_WRAPPERS = frozenset(_INIT_FUNCTIONS + _TENSOR_METHODS) | {
    "_no_grad_normal_", "_no_grad_uniform_", "_no_grad_trunc_normal_", "_no_grad_fill_", "_no_grad_zero_"}
_MAX_PARAMS = 100_000  # registered parameters followed (bounded memory)
_SPREAD = 1.5  # a later init that changes the std by more than this overwrote a deliberate one


class InitProbe(Probe):
    name = "init"
    signals = ("init",)

    def __init__(self, session: Session, patcher: Patcher) -> None:
        super().__init__(session, patcher)
        self._handle: Any = None  # torch's parameter registration hook, while construction lasts
        self._by_ptr: dict[int, Any] = {}  # data_ptr at registration -> the Parameter
        self._notes = ObjectMap()  # Parameter -> list of [site, std]; std None until the init is over
        self._open: list[tuple[Any, str]] = []  # (Parameter, site) of the inits not read yet
        self._counts: dict[str, int] = {}  # site -> parameters it initialised

    def install(self) -> None:
        from torch.nn.modules.module import register_module_parameter_registration_hook

        self._handle = register_module_parameter_registration_hook(self._registered)
        funcs = [torch_function(getattr(nn.init, fn)) for fn in _INIT_FUNCTIONS]
        funcs += [torch_function(getattr(torch.Tensor, fn)) for fn in _TENSOR_METHODS]
        self._ops.listen(self.name, funcs, self._filled, before=self._filling)
        if not self.s.clock.trained:  # construction is still going on (not a watch installed again)
            self._ops.hold(self.name, now=True)

    def _remove(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
        self._ops.release(self.name)
        self._ops.unlisten(self.name)  # the fills of training's sampled steps are no init

    def uninstall(self) -> None:
        self._remove()

    def on_first_step(self, opt: Any) -> None:
        self._remove()  # construction is over: training runs without the window
        self._guard(self.name, self._report)
        self._by_ptr.clear()

    # ---- construction ------------------------------------------------------------------------
    def _registered(self, module: Any, name: str, param: Any) -> None:
        if param is not None and len(self._by_ptr) < _MAX_PARAMS:
            self._by_ptr[param.data_ptr()] = param  # the Parameter, while construction lasts

    def _param(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The registered Parameter whose storage the call fills (the first argument, or
        ``tensor=`` as torch.nn.init hands itself to the mode), or None."""
        tensor = args[0] if args else kwargs.get("tensor")
        if not isinstance(tensor, torch.Tensor):
            return None
        param = self._by_ptr.get(tensor.data_ptr())
        if param is None or param.data_ptr() != tensor.data_ptr() or param.numel() != tensor.numel():
            return None  # not a parameter, or its address was reused by another tensor
        return param

    def _filling(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], _: Any) -> None:
        """Before an op on a parameter: the inits still open on other parameters, or on this
        one from other code, are over; read what they left."""
        param = self._param(args, kwargs) if self._open else None
        if param is None:
            return
        site = _site(caller())
        for p, s in self._open:
            if p is not param or s != site:
                self._read(p)
        self._open = [(p, s) for p, s in self._open if p is param and s == site]

    def _filled(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        param = self._param(args, kwargs)
        if param is None:
            return
        if func is _COPY and caller(through_init=False).f_code.co_filename != INIT_FILE:
            return  # a copy of the user's (loaded weights) is no init; its before closed the open ones
        site = _site(caller())
        if not site:
            return  # torch's own default init
        notes = self._notes.get(param)
        if notes is None:
            notes = []
            self._notes[param] = notes
        if site not in [s for s, _ in notes]:
            self._counts[site] = self._counts.get(site, 0) + 1
        if notes and notes[-1][0] == site:
            notes[-1][1] = None  # the same code again (post_init() called twice): one init
        else:
            notes.append([site, None])
        if not any(p is param and s == site for p, s in self._open):
            self._open.append((param, site))

    def _read(self, param: Any) -> None:
        """The spread the parameter's last init left, into its open note."""
        with torch.no_grad():
            flat = param.detach().reshape(-1)
            sample = flat[:: max(1, flat.numel() // 4096)].float()
            # sync point (accelerators): once per init, while the model is built
            std = float(sample.std()) if sample.numel() > 1 else 0.0
        notes = self._notes.get(param)
        if notes and notes[-1][1] is None:
            notes[-1][1] = std

    # ---- the first step ----------------------------------------------------------------------
    def _report(self) -> None:
        """Every noted parameter (all models, not only the first optimizer's)."""
        for p, _ in self._open:
            self._read(p)
        self._open.clear()
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


_COPY = torch_function(torch.Tensor.copy_)


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
