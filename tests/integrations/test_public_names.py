"""The names users type: ``traindoc.hf.TraindocCallback`` and ``traindoc.lightning.TraindocCallback``
after a plain ``import traindoc``, which itself imports no framework and no torch."""

from __future__ import annotations

import importlib.util

import pytest

from conftest import python


def test_import_traindoc_imports_no_framework() -> None:
    ran = python("-c", "import sys, traindoc; print(sorted(m for m in ('torch', 'transformers', "
                       "'lightning', 'wandb', 'mlflow') if m in sys.modules))")
    assert ran.returncode == 0 and ran.stdout.strip() == "[]", ran.stderr


@pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in ("transformers", "lightning")),
                    reason="transformers and lightning are dev extras")
def test_callbacks_by_their_public_names() -> None:
    ran = python("-c", "import traindoc; print(traindoc.hf.TraindocCallback.__mro__[1].__name__, "
                       "traindoc.lightning.TraindocCallback.__mro__[1].__name__)")
    assert ran.returncode == 0 and ran.stdout.split() == ["TrainerCallback", "Callback"], ran.stderr


def test_options_are_checked_when_the_callback_is_made() -> None:
    from traindoc.integrations._doctor import Doctor

    with pytest.raises(ValueError, match="level must be one of cheap, standard, thorough, got 'fast'"):
        Doctor(level="fast")
    with pytest.raises(ValueError, match="tiny-update"):
        Doctor(ignore=["tiny-update"])  # a misspelt id: "Did you mean" tiny-updates
    with pytest.raises(TypeError, match="levl"):
        Doctor(levl="cheap")


def test_one_options_object() -> None:
    """The callbacks' keywords are the fields of one dataclass, kept as tuples."""
    import dataclasses

    from traindoc.integrations._doctor import Doctor
    from traindoc.integrations._options import OptionArgs, Options

    assert list(OptionArgs.__annotations__) == [f.name for f in dataclasses.fields(Options)]
    select = ["loss-spike"]
    doctor = Doctor(json="r.json", select=select, ignore=["slow-eval"], export=["wandb"], fail_on="error")
    select.append("nonfinite")  # the caller's list changes; the options do not
    assert doctor.options == Options(json="r.json", select=("loss-spike",), ignore=("slow-eval",),
                                     export=("wandb",), fail_on="error")
    assert Doctor().options == Options()
