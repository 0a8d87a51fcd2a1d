"""What an evaluation phase is made of, and the pieces its checks share: which modules change
with train/eval mode, the model an EMA copy mirrors, saving the RNG around a re-run and seeing
its random ops, and the lines whose regions the op-level mode can skip."""

from __future__ import annotations

import os
import random
import sys
import weakref
from typing import TYPE_CHECKING, Any

import torch
import torch.nn as nn
from torch.nn.modules import module as _module
from torch.overrides import TorchFunctionMode

from traindoc.live.objects import ObjectMap, frame_modules

if TYPE_CHECKING:
    from traindoc.live.session import Session

MAX_BUFFER_BYTES = 256 << 20  # larger models: no re-run (their buffers are not snapshotted)


def mode_dependent(m: nn.Module) -> bool:
    """A module whose output depends on train/eval mode."""
    if isinstance(m, nn.modules.batchnorm._BatchNorm):
        return bool(m.track_running_stats)
    if isinstance(m, nn.modules.dropout._DropoutNd) or isinstance(m, nn.AlphaDropout):
        return float(getattr(m, "p", 0.0)) > 0
    name = type(m).__name__
    if "DropPath" in name or "StochasticDepth" in name or "Dropout" in name:
        return float(getattr(m, "drop_prob", getattr(m, "p", 1.0)) or 0.0) > 0
    return False


def unwrap(m: Any) -> Any:
    """The model inside AveragedModel/EMA wrappers, DDP and torch.compile."""
    for _ in range(4):
        inner = getattr(m, "_orig_mod", None) or getattr(m, "module", None)
        if not isinstance(inner, nn.Module):
            return m
        m = inner
    return m


class Pass:
    """One model looked at in an evaluation phase (at its first root forward there)."""

    __slots__ = ("model", "role", "train_modules", "mode_modules", "rerun", "names", "where", "training",
                 "versus_eval", "sampled", "rows")

    def __init__(self) -> None:
        self.model = ""
        self.role = "model"
        self.train_modules: tuple[str, ...] = ()
        self.mode_modules = 0
        self.rerun: torch.Tensor | None = None  # [abs diff, max |out|, per-module differs...]
        self.names: list[str] = []
        self.where = ""
        self.training = True  # the model's own mode (model.eval() called or not)
        # A train-mode model without Dropout/BatchNorm modules: the RNG state before its forward,
        # to re-run it in eval mode from the same state (does model.eval() change the output?)
        self.versus_eval: dict[str, Any] | None = None
        self.sampled = False  # its forward draws its output from a torch.distributions distribution
        self.rows = -1  # rows of its first input (1 for one unbatched vector); -1: not a tensor


class Phase:
    """Evaluation between two training steps: the models evaluated in it (model, then EMA)."""

    __slots__ = ("step", "t0", "last_exit", "passes", "seen", "bn_seen")

    def __init__(self, step: int, t0: float) -> None:
        self.step = step
        self.t0 = t0
        self.last_exit: float | None = None
        self.passes: list[Pass] = []
        self.seen: set[int] = set()  # root modules looked at (ids; alive while the phase is)
        self.bn_seen: set[int] = set()  # models whose BatchNorm statistics were read


def is_dropout_entry(entry: str) -> bool:
    """``"drop (Dropout)"``, ``"blocks.0.drop_path (DropPath)"``: a Dropout-like module."""
    kind = entry.rsplit(" (", 1)[-1]
    return "Drop" in kind or "Stochastic" in kind


def find_twin(s: Session, copy: nn.Module, bn_names: set[str], held: set[int]) -> nn.Module | None:
    """The trained model that ``copy`` mirrors: a module whose parameters an optimizer holds
    and that has BatchNorm modules of the same names."""
    candidates = s.models() + frame_modules(sys._getframe(1))
    for cand in candidates:
        if cand is None:
            continue
        inner = unwrap(cand)
        if inner is copy or not any(id(p) in held for p in inner.parameters()):
            continue
        names = {n for n, m in inner.named_modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)}
        if bn_names <= names:
            return inner
    return None


def in_update_bn() -> bool:
    frame: Any = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "update_bn" and frame.f_code.co_filename.endswith("swa_utils.py"):
            return True
        frame = frame.f_back
    return False


def rerun_safe(module: nn.Module) -> bool:
    """No user hooks anywhere (a re-run would call them twice) and buffers small enough to
    snapshot."""
    for hooks in (_module._global_forward_hooks, _module._global_forward_pre_hooks):
        for hook in hooks.values():
            if not getattr(hook, "__module__", "").startswith("traindoc"):
                return False
    nbytes = 0
    for m in module.modules():
        if m._forward_hooks or m._forward_pre_hooks:
            return False
        for b in m._buffers.values():
            if b is not None:
                nbytes += b.numel() * b.element_size()
    return nbytes <= MAX_BUFFER_BYTES


def save_rng() -> dict[str, Any]:
    saved: dict[str, Any] = {"cpu": torch.random.get_rng_state(), "random": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        # The CUDA generators' state (seed and offset) lives on the host: no device sync.
        saved["cuda"] = torch.cuda.get_rng_state_all()
    np = sys.modules.get("numpy")
    if np is not None:
        saved["numpy"] = np.random.get_state()
    return saved


def restore_rng(saved: dict[str, Any]) -> None:
    torch.random.set_rng_state(saved["cpu"])
    random.setstate(saved["random"])
    if "cuda" in saved:
        torch.cuda.set_rng_state_all(saved["cuda"])
    if "numpy" in saved:
        sys.modules["numpy"].random.set_state(saved["numpy"])


# Ops that draw from torch's RNG (as torch names them to a TorchFunctionMode)
RANDOM_OPS = frozenset({
    "multinomial", "normal", "normal_", "bernoulli", "bernoulli_", "rand", "rand_like", "randn",
    "randn_like", "randint", "randint_like", "randperm", "poisson", "binomial", "uniform_",
    "exponential_", "geometric_", "cauchy_", "log_normal_", "random_", "_standard_gamma",
    "_sample_dirichlet",
})
# and the dropouts, when their third argument (training) is true; its default when left out
_DROPOUTS = {"dropout": True, "dropout1d": True, "dropout2d": True, "dropout3d": True,
             "alpha_dropout": False, "feature_alpha_dropout": False, "native_dropout": True}


class RandomDraws(TorchFunctionMode):
    """The random ops a forward runs, on traindoc's own re-run: ``sampled`` when its output is a
    draw from a distribution it predicts (a stochastic policy acting, a posterior sample), either
    inside a ``torch.distributions`` distribution or by the reparameterization trick (a draw
    multiplied by a tensor the forward computed: a VAE's ``mu + torch.randn_like(std) * std``);
    ``other`` when a draw is anything else (functional dropout, noise of a fixed scale added by
    hand). Tensors are followed by identity, checked through weak references."""

    def __init__(self) -> None:
        super().__init__()
        self._sampled = False
        self._other = False
        self._draws: dict[int, weakref.ref[torch.Tensor]] = {}  # draws outside a distribution
        self._scaled: set[int] = set()  # of those, multiplied by a tensor the forward computed
        self._made: dict[int, weakref.ref[torch.Tensor]] = {}  # the outputs of its other ops

    @property
    def sampled(self) -> bool:
        return self._sampled or bool(self._scaled)

    @property
    def other(self) -> bool:
        return self._other or len(self._scaled) < len(self._draws)

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        out = func(*args, **kwargs)
        if name in RANDOM_OPS:
            if _in_distribution(sys._getframe(1)):
                self._sampled = True
            elif isinstance(out, torch.Tensor):
                self._draws[id(out)] = weakref.ref(out)
            else:
                self._other = True
        elif name in _DROPOUTS:  # an nn.Dropout in eval mode calls F.dropout(training=False)
            training = kwargs.get("training", kwargs.get("train", args[2] if len(args) > 2 else _DROPOUTS[name]))
            p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
            self._other = self._other or bool(training and p)
        else:
            if name in _PRODUCTS and len(args) == 2:
                self._note_scale(*args)
            if isinstance(out, torch.Tensor):
                self._made[id(out)] = weakref.ref(out)
        return out

    def _note_scale(self, a: Any, b: Any) -> None:
        for draw, scale in ((a, b), (b, a)):
            if _held(self._draws, draw) and _held(self._made, scale) and scale.numel() > 1:
                self._scaled.add(id(draw))


_PRODUCTS = frozenset({"mul", "mul_", "multiply", "__mul__", "__rmul__"})


def _held(table: dict[int, weakref.ref[torch.Tensor]], t: Any) -> bool:
    ref = table.get(id(t))
    return ref is not None and ref() is t


def _in_distribution(frame: Any) -> bool:
    """Is a method of a ``torch.distributions.Distribution`` on the stack (a few frames up)?"""
    for _ in range(12):
        if frame is None:
            return False
        if frame.f_globals.get("__name__", "").startswith("torch.distributions") \
                or isinstance(frame.f_locals.get("self"), torch.distributions.Distribution):
            return True
        frame = frame.f_back
    return False


# Regions entered from one line whose ops reached no listener, in a row: from then on that
# line's regions run without the op-level mode, but every 64th, which checks again.
_QUIET_REGIONS = 8
_RECHECK = 64
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


class TrainedModels:
    """Which modules are the trained model: at least half of the parameters of the optimizers
    that hold their own (not a BatchNorm put in eval mode for fine-tuning, not a teacher).
    Judged once per module and set of optimizers: an RL agent switches modes every step."""

    def __init__(self) -> None:
        self._judged = ObjectMap()  # module -> (optimizers seen, is it the trained model?)

    def judge(self, module: Any, optimizers: list[Any]) -> bool:
        known = self._judged.get(module)
        if known is None or known[0] != len(optimizers):
            known = (len(optimizers), _trained_model(module, optimizers))
            self._judged[module] = known
        return bool(known[1])


def _trained_model(module: Any, optimizers: list[Any]) -> bool:
    params = {id(p) for p in module.parameters()}
    if not params:
        return False
    held = [{id(p) for g in opt.param_groups for p in g["params"]} for opt in optimizers]
    mine = set().union(*[h for h in held if h & params])
    return bool(mine) and 2 * len(mine & params) >= len(mine)


class QuietLines:
    """The lines whose ``no_grad`` regions (or eval-mode windows of the trained model: the
    eval-metrics probe) the op-level mode can skip: once 8 regions in a row
    entered from one line reached no listener (an RL agent acting a step per region, a target
    computed under ``no_grad`` in each step), that line's regions run without it, but every
    64th, which checks again. An evaluation that calls its loss in each region keeps it."""

    def __init__(self) -> None:
        self._quiet: dict[tuple[str, int], int] = {}  # line -> its regions in a row with no listener call
        self._site = ("", 0)  # the line that entered the open region
        self._hits = -1  # the mode's listener calls when the open region began (-1: not held)

    def enter(self, frame: Any, hits: int) -> bool:
        """A region starts, entered from ``frame``: hold the mode for it?"""
        self._site = _site(frame)
        quiet = self._quiet.get(self._site, 0)
        if quiet < _QUIET_REGIONS or quiet % _RECHECK == 0:
            self._hits = hits
            return True
        self._hits = -1
        self._quiet[self._site] = quiet + 1
        return False

    def exit(self, hits: int) -> bool:
        """The region ends (``hits``: the mode's listener calls now): was the mode held for it?"""
        if self._hits < 0:
            return False
        if len(self._quiet) > 1024:  # the lines of generated code: start over
            self._quiet.clear()
        self._quiet[self._site] = self._quiet.get(self._site, 0) + 1 if hits == self._hits else 0
        self._hits = -1
        return True


def _site(frame: Any) -> tuple[str, int]:
    """The line that entered a region: past torch's own frames (``@torch.no_grad()``'s wrapper,
    ``Module.eval``) and traindoc's (its wrappers of ``Module.train``), the user's call."""
    for _ in range(8):
        if frame is None or not (frame.f_code.co_filename.startswith(_TORCH_DIR) or ours(frame)):
            break
        frame = frame.f_back
    return (frame.f_code.co_filename, frame.f_lineno) if frame is not None else ("", 0)


def ours(frame: Any) -> bool:
    """Is ``frame`` traindoc's own code (not a zoo script of it)?"""
    name = frame.f_globals.get("__name__", "")
    return name.startswith("traindoc.") and not name.startswith("traindoc.zoo")


__all__ = ["MAX_BUFFER_BYTES", "Pass", "Phase", "QuietLines", "RandomDraws", "find_twin",
           "in_update_bn", "is_dropout_entry", "mode_dependent", "ours", "rerun_safe", "restore_rng",
           "save_rng", "unwrap"]
