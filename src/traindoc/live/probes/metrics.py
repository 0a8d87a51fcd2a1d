"""What the script already logs, captured with zero code changes.

``SummaryWriter.add_scalar``/``add_scalars`` (torch.utils.tensorboard and tensorboardX),
``wandb`` (``Run.log``, which ``wandb.log`` is after ``wandb.init``), ``mlflow.log_metric``/
``log_metrics`` (and ``MlflowClient.log_metric``), rows written with ``csv.writer`` /
``csv.DictWriter`` by the script's own code, and ``traindoc.log(...)``. Each logged name is
mapped to a signal with the same heuristics as ``traindoc logs``
(``sources/logs/mapping.py``: ``Train_F1`` -> ``train_f1``, ``Accuracy/val`` -> ``val_acc``) and
emitted as a ``Scalar`` at the current optimizer step.

The logging libraries are optional: a module is patched when the script imports it (an import
hook watches for it), never imported by traindoc. Every wrapper calls the original first, with
the user's arguments, and returns its result: what is logged or written never changes.

Who owns a signal, when two names map to it, is the Publisher's choice (``publisher.py``).
"""

from __future__ import annotations

import csv
import functools
import os
import sys
import threading
from types import FrameType
from typing import Any, Callable, Mapping

import torch

from traindoc import metrics as api
from traindoc.live.objects import is_user_file
from traindoc.live.probes._patch import Patcher
from traindoc.live.probes.base import Probe
from traindoc.live.probes.publisher import publisher
from traindoc.live.warning_site import entry
from traindoc.live.session import Session

class MetricsProbe(Probe):
    name = "metrics"
    signals = ("metrics",)

    def __init__(self, session: Session, patcher: Patcher) -> None:
        super().__init__(session, patcher)
        self.pub = publisher(session)
        self._local = threading.local()
        self._mine: list[tuple[Any, str, Any, Any]] = []  # (owner, name, original, wrapper)
        self._done: set[str] = set()
        self._finder: _ImportWatcher | None = None
        self._active = False  # a method bound while watching (wandb.log = run.log) outlives us
        self._hooks: dict[str, Callable[[Any], None]] = {
            "torch.utils.tensorboard.writer": self._patch_tensorboard,
            "tensorboardX.writer": self._patch_tensorboard,
            "wandb.sdk.wandb_run": self._patch_wandb,
            "mlflow": self._patch_mlflow,
            "mlflow.tracking.client": self._patch_mlflow_client,
        }

    def install(self) -> None:
        self._active = True
        self._patcher.patch(csv, "writer", self._wrap_csv_writer)
        api.log_sinks.append(self._on_log)
        for name in self._hooks:
            module = sys.modules.get(name)
            if module is not None:
                self._on_import(name, module)
        self._finder = _ImportWatcher(set(self._hooks), self._on_import)
        sys.meta_path.insert(0, self._finder)

    def uninstall(self) -> None:
        self._active = False
        if self._finder is not None and self._finder in sys.meta_path:
            sys.meta_path.remove(self._finder)
        self._finder = None
        if self._on_log in api.log_sinks:
            api.log_sinks.remove(self._on_log)
        # A library may have replaced what we patched (wandb.init rebinds wandb.log): put the
        # original back only where our wrapper is still in place.
        for owner, name, orig, wrapper in reversed(self._mine):
            if owner.__dict__.get(name) is wrapper:
                setattr(owner, name, orig)
        self._mine.clear()

    # ---- capture -------------------------------------------------------------------------------
    def _capture(self, channel: str, values: Mapping[str, Any]) -> None:
        self._guard(self.name, self.pub.publish, channel, values)

    def _on_log(self, channel: str, values: Mapping[str, object]) -> None:
        self._capture(channel, values)

    def _wrapped(self, owner: Any, attr: str, collect: Callable[..., Mapping[str, Any] | None], channel: str) -> None:
        """Patch ``owner.attr``: call the original, then capture ``collect(*args, **kwargs)``.
        Nested captured calls (a fluent API calling its client) are captured once."""
        orig = owner.__dict__.get(attr)
        if orig is None or getattr(orig, "__traindoc__", False):
            return
        probe = self

        @functools.wraps(orig)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not probe._active or getattr(probe._local, "inside", False):
                return orig(*args, **kwargs)
            probe._local.inside = True
            try:
                out = orig(*args, **kwargs)
            finally:
                probe._local.inside = False
            probe._guard(probe.name, probe._collect, collect, channel, args, kwargs)
            return out

        setattr(entry(wrapper), "__traindoc__", True)
        self._mine.append((owner, attr, orig, wrapper))
        setattr(owner, attr, wrapper)

    def _collect(self, collect: Callable[..., Mapping[str, Any] | None], channel: str,
                 args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        values = collect(*args, **kwargs)
        if values:
            self.pub.publish(channel, values)

    def _on_import(self, name: str, module: Any) -> None:
        if name in self._done:
            return
        self._done.add(name)
        self._guard(self.name, self._hooks[name], module)

    # TensorBoard: add_scalar(tag, scalar_value, global_step=None, ...), add_scalars(main_tag,
    # tag_scalar_dict, ...); the tags of add_scalars are main_tag/key, as TensorBoard shows them.
    def _patch_tensorboard(self, module: Any) -> None:
        cls = getattr(module, "SummaryWriter", None)
        if cls is None:
            return
        self._wrapped(cls, "add_scalar", _tb_scalar, "tensorboard")
        self._wrapped(cls, "add_scalars", _tb_scalars, "tensorboard")

    def _patch_wandb(self, module: Any) -> None:
        cls = getattr(module, "Run", None)
        if cls is not None:
            self._wrapped(cls, "log", _wandb_log, "wandb")

    def _patch_mlflow(self, module: Any) -> None:
        self._wrapped(module, "log_metric", _mlflow_metric, "mlflow")
        self._wrapped(module, "log_metrics", _mlflow_metrics, "mlflow")

    def _patch_mlflow_client(self, module: Any) -> None:
        cls = getattr(module, "MlflowClient", None)
        if cls is not None:
            self._wrapped(cls, "log_metric", _mlflow_client_metric, "mlflow")

    # csv: rows the script's own code writes (not libraries: pandas writes through csv too).
    def _wrap_csv_writer(self, orig: Any) -> Any:
        probe = self

        @functools.wraps(orig)
        def writer(f: Any, *args: Any, **kwargs: Any) -> Any:
            w = orig(f, *args, **kwargs)
            if not _called_from_script():
                return w
            name = os.path.basename(str(getattr(f, "name", "") or "csv"))
            return _CsvWriter(w, _CsvTrack(probe, f"csv:{name}"))

        return writer


def _tb_scalar(writer: Any, tag: Any, scalar_value: Any = None, *args: Any, **kwargs: Any) -> Mapping[str, Any]:
    return {str(tag): scalar_value}


def _tb_scalars(writer: Any, main_tag: Any, tag_scalar_dict: Any = None, *args: Any, **kwargs: Any) -> Mapping[str, Any]:
    if not isinstance(tag_scalar_dict, Mapping):
        return {}
    return {f"{main_tag}/{k}": v for k, v in tag_scalar_dict.items()}


def _wandb_log(run: Any, data: Any = None, *args: Any, **kwargs: Any) -> Mapping[str, Any]:
    return _flatten(data) if isinstance(data, Mapping) else {}


def _mlflow_metric(key: Any, value: Any = None, *args: Any, **kwargs: Any) -> Mapping[str, Any]:
    return {str(key): value}


def _mlflow_metrics(metrics: Any, *args: Any, **kwargs: Any) -> Mapping[str, Any]:
    return dict(metrics) if isinstance(metrics, Mapping) else {}


def _mlflow_client_metric(client: Any, run_id: Any, key: Any, value: Any = None, *args: Any, **kwargs: Any) -> Mapping[str, Any]:
    return {str(key): value}


def _flatten(data: Mapping[str, Any], prefix: str = "", depth: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in data.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and depth < 3:
            out.update(_flatten(v, key + "/", depth + 1))
        elif isinstance(v, (int, float)) or (isinstance(v, torch.Tensor) and v.numel() == 1) or _is_np_scalar(v):
            out[key] = v
    return out


def _is_np_scalar(v: Any) -> bool:
    return type(v).__module__ == "numpy" and getattr(v, "size", 0) == 1


# ---- csv ----------------------------------------------------------------------------------------
_CSV_FILE = os.path.abspath(csv.__file__)


def _called_from_script() -> bool:
    """Is the code creating this writer the user's own (not the stdlib, a library, torch)?"""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and os.path.abspath(frame.f_code.co_filename) == _CSV_FILE:
        frame = frame.f_back  # csv.DictWriter creates its writer inside csv.py
    if frame is None:
        return False
    fn = frame.f_code.co_filename
    return is_user_file(fn) and "site-packages" not in fn and "dist-packages" not in fn


class _CsvTrack:
    """Reads the rows of one csv writer: the first row must be a header of names; a header
    with nothing traindoc recognizes switches the tracking off (one flag test per row)."""

    def __init__(self, probe: MetricsProbe, channel: str) -> None:
        self.probe = probe
        self.channel = channel
        self.header: tuple[str, ...] | None = None
        self.off = False

    def row(self, row: Any) -> None:
        if not isinstance(row, (list, tuple)):
            self.off = True
            return
        if self.header is None:
            if row and all(isinstance(c, str) and not _number(c) for c in row):
                self.header = tuple(row)
                if not self.probe.pub.signals(self.channel, self.header):
                    self.off = True
            else:
                self.off = True  # no header: the columns cannot be named
            return
        if len(row) != len(self.header):
            return
        values = {h: c for h, c in zip(self.header, row) if c not in ("", None)}
        self.probe.pub.publish(self.channel, values)


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class _CsvWriter:
    """Stands in for a csv writer the script created: writes exactly what the real one writes,
    then reads the row. Only ``writerow`` is read; ``writerows`` (bulk exports) passes through."""

    __slots__ = ("_writer", "_track")

    def __init__(self, writer: Any, track: _CsvTrack) -> None:
        self._writer = writer
        self._track = track

    def writerow(self, row: Any) -> Any:
        track = self._track
        if not track.off and track.probe._active and not isinstance(row, (list, tuple, str)):
            try:  # csv.DictWriter passes a generator: read it once, write the same cells
                row = list(row)
            except TypeError:
                pass  # not iterable: the real writer raises its own error
        out = self._writer.writerow(row)
        if not track.off and track.probe._active:
            track.probe._guard(track.probe.name, track.row, row)
        return out

    def writerows(self, rows: Any) -> Any:
        return self._writer.writerows(rows)

    @property
    def dialect(self) -> Any:
        return self._writer.dialect

    def __getattr__(self, name: str) -> Any:
        return getattr(self._writer, name)


# ---- import hook --------------------------------------------------------------------------------
class _ImportWatcher:
    """A meta-path finder that never loads anything itself: for the watched module names it
    asks the other finders for the spec and calls back once the module has executed."""

    def __init__(self, names: set[str], callback: Callable[[str, Any], None]) -> None:
        self.names = names
        self.callback = callback

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in self.names:
            return None
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is None:
                    continue
                loader = spec.loader
                exec_module = getattr(loader, "exec_module", None)
                if exec_module is None:
                    return spec
                callback = self.callback

                def exec_and_patch(module: Any, _exec: Any = exec_module) -> None:
                    _exec(module)
                    callback(fullname, module)

                try:
                    setattr(loader, "exec_module", exec_and_patch)  # the loader of this one import
                except (AttributeError, TypeError):
                    pass
                return spec
        except Exception:  # never break the user's import
            return None
        return None

    def invalidate_caches(self) -> None:
        pass

