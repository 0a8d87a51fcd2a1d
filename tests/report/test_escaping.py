"""Names from user files reach every output safely (report.safe).

A checkpoint key, a log column or a file name is the user's bytes: in the terminal no raw
control character (``\\x1b[2J`` clears the screen, ``\\x1b]0;...\\x07`` retitles the window), in
the HTML no markup (``<script>``), and a file name that is not UTF-8 (``b"run_\\xff.csv"``) still
gets its terminal, HTML, JSON and SARIF report, the JSON and SARIF valid UTF-8 with no lone
surrogate. Each face runs in-process through ``traindoc.cli.main``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from traindoc.cli import main

ESC_KEY = "layer\x1b[2J.weight"
SURROGATE_KEY = "emb\udcff.weight"  # pickle keeps a lone surrogate: an untrusted file can hold one
SCRIPT = "<script>alert(1)</script>"
TITLE_COLUMN = "loss\x1b]0;pwned\x07"
NOT_UTF8 = os.fsdecode(b"run_\xff")  # 'run_\udcff': how Python names the file
TRAIN = ("import torch\nmodel = torch.nn.Linear(2, 2)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
         "for x in range(3):\n    loss = model(torch.randn(2, 2)).sum()\n    loss.backward()\n    opt.step()\n")


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def no_raw_control(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text and "\x9b" not in text, repr(text[:2000])


def valid_utf8_json(raw: bytes) -> object:
    """The document parsed, asserting it is UTF-8 and holds no lone surrogate."""
    data = json.loads(raw.decode("utf-8"))
    json.dumps(data, ensure_ascii=False).encode("utf-8")  # raises on a lone surrogate
    return data


def safe_html(path: Path) -> str:
    html = path.read_bytes().decode("utf-8")
    no_raw_control(html)
    assert SCRIPT not in html and "<script" not in html
    return html


# ------------------------------------------------------------------ a checkpoint's keys
@pytest.fixture
def evil_checkpoint(tmp_path: Path) -> Path:
    import torch

    nan = torch.full((4, 4), float("nan"))
    path = tmp_path / "evil.pt"
    model = {ESC_KEY: nan, SCRIPT: nan.clone(), SURROGATE_KEY: nan.clone(), "fc.bias": torch.ones(2)}
    torch.save({"model": model, "step": 3}, path)
    return path


@pytest.mark.parametrize("output", ["terminal", "html", "json"])
def test_checkpoint_keys(evil_checkpoint: Path, capsys: pytest.CaptureFixture[str], output: str) -> None:
    html, js = evil_checkpoint.with_suffix(".html"), evil_checkpoint.with_suffix(".json")
    code, _, err = cli(capsys, "ckpt", "inspect", str(evil_checkpoint), "--html", str(html), "--json", str(js))
    assert code == 0, err
    if output == "terminal":
        no_raw_control(err)
        assert "layer\\x1b[2J.weight" in err and SCRIPT in err and "emb\\xff.weight" in err  # shown, visibly
    elif output == "html":
        page = safe_html(html)
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "emb\\xff.weight" in page
    else:
        data = valid_utf8_json(js.read_bytes())
        assert isinstance(data, dict)
        assert {ESC_KEY, SCRIPT, "emb\\xff.weight"} <= {name for f in data["findings"] for name in f["where"]}


# ------------------------------------------------------------------ a saved report's strings
def test_saved_report_strings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = {
        "schema_version": 2, "run": {"script": f"{SCRIPT}\x1b[2J", "steps": 10},
        "findings": [{"id": "nonfinite", "severity": "error", "title": "NaN", "step": 4,
                      "message": f"NaN in {ESC_KEY}", "evidence": {SCRIPT: {ESC_KEY: 1.0}}, "cause": "c",
                      "fix": "f", "where": [ESC_KEY, SCRIPT]}],
        "not_applicable": [{"id": "loss-spike", "reason": TITLE_COLUMN}], "ran": ["nonfinite"],
        "disabled": [{"id": SCRIPT, "error": ESC_KEY}],
    }
    path = tmp_path / "run.json"
    path.write_text(json.dumps(report))
    html = tmp_path / "run.html"
    code, _, err = cli(capsys, "report", str(path), "--verbose", "--html", str(html))
    assert code == 0, err
    no_raw_control(err)
    assert "layer\\x1b[2J.weight" in err
    assert "&lt;script&gt;" in safe_html(html)


# ------------------------------------------------------------------ a file name that is not UTF-8
@pytest.fixture
def not_utf8_log(tmp_path: Path) -> Path:
    path = tmp_path / f"{NOT_UTF8}.csv"
    path.write_text("step,loss\n" + "".join(f"{s},{2.0 - s / 100}\n" for s in range(30)))
    return path


@pytest.mark.parametrize("output", ["terminal", "html", "json-file", "json-stdout"])
def test_log_file_name_not_utf8(not_utf8_log: Path, capsys: pytest.CaptureFixture[str], output: str) -> None:
    html, js = not_utf8_log.parent / "run.html", not_utf8_log.parent / "run.json"
    argv = ["logs", str(not_utf8_log), "--html", str(html)]
    argv += ["--json", "-"] if output == "json-stdout" else ["--json", str(js)]
    code, out, err = cli(capsys, *argv)
    assert code == 0 and "could not write" not in err, err
    if output == "terminal":
        assert "run_\\xff.csv" in err and "\udcff" not in err
    elif output == "html":
        assert "run_\\xff.csv" in safe_html(html)
    else:
        raw = out.encode("utf-8") if output == "json-stdout" else js.read_bytes()
        data = valid_utf8_json(raw)
        assert isinstance(data, dict) and "run_\\xff.csv" in data["run"]["script"]


# ------------------------------------------------------------------ lint: file names in every format
@pytest.fixture
def evil_sources(tmp_path: Path) -> Path:
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / f"{NOT_UTF8}.py").write_text(TRAIN)
    (folder / "esc\x1b[2J.py").write_text(TRAIN)
    return folder


@pytest.mark.parametrize("fmt", ["text", "json", "sarif", "github"])
def test_lint_file_names(evil_sources: Path, capsys: pytest.CaptureFixture[str],
                         monkeypatch: pytest.MonkeyPatch, fmt: str) -> None:
    monkeypatch.chdir(evil_sources.parent)
    code, out, err = cli(capsys, "lint", "--no-config", "--format", fmt, "src")
    assert code == 1, err  # both files have missing-zero-grad
    no_raw_control(out + err)
    if fmt == "json":  # data: JSON escapes the control character itself
        data = valid_utf8_json(out.encode("utf-8"))
        assert isinstance(data, list)
        assert {f["path"] for f in data} == {"src/esc\x1b[2J.py", "src/run_\\xff.py"}
    elif fmt == "sarif":  # each file's own bytes, percent-encoded: the URIs find the files
        data = valid_utf8_json(out.encode("utf-8"))
        assert isinstance(data, dict)
        uris = {loc["physicalLocation"]["artifactLocation"]["uri"]
                for result in data["runs"][0]["results"] for loc in result["locations"]}
        assert uris == {"src/esc%1B%5B2J.py", "src/run_%FF.py"}  # relative to %SRCROOT%
    else:
        assert "run_\\xff.py" in out and "esc\\x1b[2J.py" in out


# ------------------------------------------------------------------ the CLI's own messages
@pytest.mark.parametrize("face", ["report", "lint", "analyze", "ckpt"])
def test_error_line_echoing_a_path(tmp_path: Path, capsys: pytest.CaptureFixture[str], face: str) -> None:
    missing = str(tmp_path / "gone\x1b[2J\x1b]0;pwned\x07.json")
    argv = ["ckpt", "inspect", missing] if face == "ckpt" else [face, missing]
    code, _, err = cli(capsys, *argv)
    assert code == 2
    no_raw_control(err)
    assert "gone\\x1b[2J" in err


# ------------------------------------------------------------------ the progress line
def test_progress_line_names(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from traindoc.progress import Progress

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("TRAINDOC_NO_PROGRESS", raising=False)
    out = Tty()
    with Progress("traindoc ckpt diff", 2, stream=out, after=0.0) as p:
        p.update(1, ESC_KEY)  # a tensor name, as ckpt diff shows it
        no_raw_control(out.getvalue().replace("\r", ""))
        assert "layer\\x1b[2J.weight" in out.getvalue()
