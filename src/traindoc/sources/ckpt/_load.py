"""Opening untrusted checkpoint files: ``torch.load`` without arbitrary unpickling.

A ``.pt`` file is a pickle, and a pickle can run any code when loaded. By default we load with
``weights_only=True`` (torch's restricted unpickler: tensors, dicts, lists, numbers, strings)
and ``mmap=True`` (tensors stay in the file's pages until read, so memory stays bounded). A
file that needs more is refused with the globals it names; ``--trust`` lifts that. Every
failure becomes one ``UsageError`` line: a checkpoint reader must never show a traceback.
"""

from __future__ import annotations

import io
import pickle
import pickletools
import warnings
import zipfile
from pathlib import Path
from typing import Callable

from traindoc.errors import UsageError

# Globals that numpy needs to rebuild arrays and scalars (an RNG state saved with
# ``np.random.get_state()``). They rebuild data only; Hugging Face's Trainer allows the same.
_NUMPY_SAFE = {
    "numpy.ndarray", "numpy.dtype",
    "numpy.core.multiarray._reconstruct", "numpy._core.multiarray._reconstruct",
    "numpy.core.multiarray.scalar", "numpy._core.multiarray.scalar",
}

# What the legacy (non-zip) torch format references besides torch.* itself.
_LEGACY_SAFE = {"collections.OrderedDict", "builtins.set", "builtins.frozenset",
                "builtins.bytearray", "builtins.slice", "builtins.complex", "_codecs.encode"}


def check_file(path: Path) -> int:
    """The file's size; UsageError when it is missing, a folder we cannot use, or empty."""
    if not path.exists():
        raise UsageError(f"{path}: no such file or folder; check the path")
    if not path.is_file():
        raise UsageError(f"{path}: not a regular file")
    size = path.stat().st_size
    if size == 0:
        raise UsageError(f"{path} is empty (0 bytes): the save was interrupted or the copy failed; "
                         "use an earlier checkpoint")
    return size


def torch_load(path: Path, *, trust: bool = False) -> tuple[object, bool]:
    """``torch.load`` of an untrusted file, on the CPU, memory-mapped when the format allows.

    Returns the object and whether its tensors are memory-mapped from the file.
    """
    obj = _torch_load(path, trust=trust)
    mapped = zipfile.is_zipfile(path)
    if mapped:
        from traindoc.sources.ckpt._tensors import register_mapped

        register_mapped(path)
    return obj, mapped


def _torch_load(path: Path, *, trust: bool) -> object:
    check_file(path)  # before importing torch: a wrong path fails at once
    import torch

    is_zip = zipfile.is_zipfile(path)  # torch.save's format since 1.6; only it can be mmap'd

    def load(weights_only: bool) -> object:
        return torch.load(path, map_location="cpu", mmap=is_zip, weights_only=weights_only)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's protocol / FutureWarnings are not the user's business
        if trust:
            try:
                return load(weights_only=False)
            except Exception as exc:  # noqa: BLE001 - any failure of a corrupt file is one line
                raise _corrupt(path, exc) from None
        try:
            return load(weights_only=True)
        except pickle.UnpicklingError as exc:
            unsafe = _unsafe_globals(path, is_zip)
            if not unsafe:
                raise _corrupt(path, exc) from None
            if set(unsafe) <= _NUMPY_SAFE:
                try:
                    with torch.serialization.safe_globals(_resolve(unsafe)):
                        return load(weights_only=True)
                except Exception as exc2:  # noqa: BLE001
                    raise _corrupt(path, exc2) from None
            raise _refused(path, unsafe) from None
        except Exception as exc:  # noqa: BLE001
            raise _corrupt(path, exc) from None


def _unsafe_globals(path: Path, is_zip: bool) -> list[str]:
    """The Python globals a pickle would import, minus those torch allows; [] when unknown."""
    if is_zip:
        try:
            import torch

            return sorted(set(torch.serialization.get_unsafe_globals_in_checkpoint(path)))
        except Exception:  # noqa: BLE001 - unreadable archive: a corrupt file, not a refusal
            return []
    found = _scan_pickles(path.read_bytes()[: 64 << 20])
    return sorted(g for g in found if not g.startswith("torch.") and g not in _LEGACY_SAFE)


def _scan_pickles(data: bytes) -> set[str]:
    """Globals referenced by the pickles at the start of ``data`` (read only, never executed).

    The legacy torch format is several pickles in a row; a raw ``pickle.dump`` is one.
    ``STACK_GLOBAL`` takes its module and name from the two strings pushed before it.
    """
    found: set[str] = set()
    stream = io.BytesIO(data)
    for _ in range(4):
        strings: list[str] = []
        try:
            for op, arg, _pos in pickletools.genops(stream):
                if op.name == "GLOBAL" and isinstance(arg, str):
                    found.add(arg.replace(" ", "."))
                elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
                    found.add(f"{strings[-2]}.{strings[-1]}")
                elif isinstance(arg, str) and ("UNICODE" in op.name or "STRING" in op.name):
                    strings.append(str(arg))
                if op.name == "STOP":
                    break
            else:
                break
        except Exception:  # noqa: BLE001 - garbage after (or instead of) a pickle
            break
    return found


def _resolve(names: list[str]) -> list[Callable[..., object] | tuple[Callable[..., object], str]]:
    """The numpy objects behind ``names``, plus numpy's dtype classes (``UInt32DType`` ...),
    which torch's scan does not list but unpickling a dtype builds."""
    import importlib

    out: list[Callable[..., object] | tuple[Callable[..., object], str]] = []  # safe_globals' type
    for name in names:
        module, _, attr = name.rpartition(".")
        out.append(getattr(importlib.import_module(module), attr))
    try:
        import numpy.dtypes as npd

        out += [getattr(npd, n) for n in dir(npd) if n.endswith("DType")]
    except ImportError:  # pragma: no cover - numpy < 1.25
        pass
    return out


def _refused(path: Path, unsafe: list[str]) -> UsageError:
    shown = ", ".join(unsafe[:4]) + (f" and {len(unsafe) - 4} more" if len(unsafe) > 4 else "")
    return UsageError(
        f"{path} holds pickled Python objects ({shown}), not only tensors; loading it would run "
        "code from the file, so traindoc refused (weights_only=True). If you trust where it came "
        "from, re-run with --trust; better, re-save it with torch.save(model.state_dict(), ...)"
    )


def _corrupt(path: Path, exc: BaseException) -> UsageError:
    reason = _first_line(exc)
    return UsageError(
        f"{path}: cannot read it as a PyTorch checkpoint ({reason}); the file is truncated, "
        "corrupt or not a checkpoint. Re-copy it, or use an earlier checkpoint"
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    # torch wraps unpickler errors in a long preamble; the useful part is the last line but one.
    for ln in lines:
        if ln.startswith(("Unsupported operand", "WeightsUnpickler error", "invalid load key")):
            return ln.rstrip(".")[:160]
    line = lines[0] if lines else type(exc).__name__
    if line.startswith("Weights only load failed") and len(lines) > 1:
        line = "not a valid torch.save pickle"
    return (line[:160] + "...") if len(line) > 160 else line
