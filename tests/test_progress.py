"""Progress lines: on a terminal only, after a delay, erased at the end."""

from __future__ import annotations

import io

from traindoc.progress import Progress


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_one_line_that_is_erased() -> None:
    out = Tty()
    with Progress("traindoc lint", 3, stream=out, after=0.0) as p:
        p.update(1, "train.py")
        assert out.getvalue() == "\rtraindoc lint: 1/3 train.py"
    assert out.getvalue().endswith("\r" + " " * len("traindoc lint: 1/3 train.py") + "\r")


def test_a_file_or_ci_log_gets_nothing() -> None:
    out = io.StringIO()
    with Progress("traindoc lint", 3, stream=out, after=0.0) as p:
        p.update(1, "train.py")
    assert out.getvalue() == ""


def test_short_work_shows_nothing() -> None:
    out = Tty()
    with Progress("traindoc ckpt diff", 10, stream=out, after=60.0) as p:
        for i in range(10):
            p.update(i)
    assert out.getvalue() == ""
