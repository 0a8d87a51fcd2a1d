"""Patient safety end to end: `traindoc run` must not change what the user's script does, and
must say so plainly when the script never trained.

The scripts are in ``scripts/``: a model that is copied, pickled, saved, printed and compiled
mid-run (nothing of traindoc may leak into it); a float64 model whose loss is NaN once; and four
scripts that end before their first step (missing import, syntax error, ValueError,
sys.exit(3)). For these, `traindoc run` exits with the script's own code, shows the script's own
traceback, and reports that no training was observed instead of "No findings".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import python, traindoc

SCRIPTS = Path(__file__).resolve().parent / "scripts"


def flat(text: str) -> str:
    """The text with line wrapping undone (the text report wraps to the terminal width)."""
    return " ".join(text.split())


def same_bits(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    """Equal keys, dtypes, shapes and bytes (NaN included: NaN != NaN, its bytes are equal)."""
    def raw(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(-1).contiguous().view(torch.uint8)
    return a.keys() == b.keys() and all(
        a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and raw(a[k]).equal(raw(b[k])) for k in a)


def test_moe_copy_pickle_save_repr_compile_are_untouched(tmp_path: Path) -> None:
    script = str(SCRIPTS / "moe_copy.py")
    plain = python(script, "--save", str(tmp_path / "bare.pt"), timeout=300)
    if plain.returncode != 0:  # e.g. torch.compile unusable on this machine
        pytest.skip(f"moe_copy.py fails without traindoc too:\n{plain.stderr[-2000:]}")

    ran = traindoc("run", "--json", str(tmp_path / "r.json"), script, "--save", str(tmp_path / "watched.pt"),
                   timeout=300)
    assert ran.returncode == 0, ran.stderr[-4000:]
    assert "OK" in ran.stdout.split(), ran.stdout[-2000:]
    assert "Traceback" not in ran.stderr, ran.stderr[-4000:]
    assert same_bits(torch.load(tmp_path / "bare.pt"), torch.load(tmp_path / "watched.pt"))


def test_float64_nan_is_reported_at_its_step(tmp_path: Path) -> None:
    script, report = str(SCRIPTS / "float64_nan.py"), tmp_path / "r.json"
    ran = traindoc("run", "--json", str(report), script, "--save", str(tmp_path / "watched.pt"))
    assert ran.returncode == 0, ran.stderr[-4000:]
    data = json.loads(report.read_text())
    nonfinite = [f for f in data["findings"] if f["id"] == "nonfinite"]
    assert nonfinite, f"no nonfinite finding: {[(f['id'], f['step']) for f in data['findings']]}"
    assert nonfinite[0]["step"] == 41, nonfinite[0]
    assert nonfinite[0]["severity"] == "error", nonfinite[0]
    assert data["run"]["steps"] == 80, data["run"]
    assert data["disabled"] == [], data["disabled"]

    plain = python(script, "--save", str(tmp_path / "bare.pt"))
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert "first NaN loss at step 41" in plain.stdout
    assert same_bits(torch.load(tmp_path / "bare.pt"), torch.load(tmp_path / "watched.pt"))


NEVER_TRAINS = {  # script -> (exit code of `python script.py`, text of the user's own error)
    "never_trains_import": (1, "ModuleNotFoundError: No module named 'traindoc_zoo_missing_helper'"),
    "never_trains_syntax": (1, "SyntaxError: '(' was never closed"),
    "never_trains_crash": (1, "ValueError: feature file has 5 columns, expected 4"),
    "never_trains_exit3": (3, "error: TRAINDOC_ZOO_DATA_DIR_NEVER_SET is not set"),
}


@pytest.mark.parametrize("name", NEVER_TRAINS)
def test_a_script_that_never_trains_keeps_its_exit_code_and_traceback(name: str, tmp_path: Path) -> None:
    code, error = NEVER_TRAINS[name]
    script, report = str(SCRIPTS / f"{name}.py"), tmp_path / "r.json"
    plain = python(script)
    assert plain.returncode == code, plain.stderr[-3000:]
    assert error in plain.stderr, plain.stderr[-3000:]

    ran = traindoc("run", "--json", str(report), script)
    assert ran.returncode == plain.returncode, ran.stderr[-4000:]
    # the user's own traceback (or message), verbatim: same frames, no traindoc frames in between
    assert plain.stderr.strip() in ran.stderr, f"python:\n{plain.stderr}\ntraindoc:\n{ran.stderr}"

    data = json.loads(report.read_text())
    assert data["run"].get("trained") is False, data["run"]
    assert data["run"]["steps"] == 0, data["run"]
    text = flat(ran.stderr)
    assert "no training" in text.lower(), ran.stderr[-3000:]
    assert "No findings" not in text, ran.stderr[-3000:]
