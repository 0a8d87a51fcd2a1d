"""The HTML report in a real headless Chromium: the DOM the browser built holds an SVG per finding
with its trigger marked, and the page renders to a screenshot at desktop and phone widths.
Skipped only when no Chromium is installed (Debian: `apt-get install chromium`)."""

from __future__ import annotations

import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

import pytest
from report_cases import case, face_cases
from test_report_html import check_findings

BROWSER = next((b for b in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
                if shutil.which(b)), None)
pytestmark = pytest.mark.skipif(BROWSER is None, reason="no Chromium installed")


def chromium(*args: str) -> subprocess.CompletedProcess[str]:
    assert BROWSER is not None
    with tempfile.TemporaryDirectory() as profile:  # one profile per call: parallel tests don't share a lock
        return subprocess.run([BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                               "--no-first-run", f"--user-data-dir={profile}", *args],
                              capture_output=True, text=True, timeout=120)


@face_cases
def test_the_browser_dom_has_a_marked_plot_per_finding(name: str) -> None:
    c = case(name)
    shown = chromium("--dump-dom", c.html.as_uri())
    assert shown.returncode == 0, shown.stderr[-2000:]
    check_findings(shown.stdout, c.data()["findings"])


@pytest.mark.parametrize("width", [1000, 390])
def test_the_page_renders_at_desktop_and_phone_width(width: int, tmp_path: Path) -> None:
    shot = tmp_path / "shot.png"
    shown = chromium(f"--window-size={width},1400", f"--screenshot={shot}", case("run-bf16").html.as_uri())
    assert shown.returncode == 0, shown.stderr[-2000:]
    head = shot.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", head[16:24]) == (width, 1400)
