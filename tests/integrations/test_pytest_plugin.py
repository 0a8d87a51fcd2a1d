"""``pytest --traindoc`` and ``@pytest.mark.traindoc``: run in a separate pytest process
(pytester) with the plugin loaded as installed, through its pytest11 entry point."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

TESTS = '''
import pytest
import torch


def train(lr, nan=False):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    x, y = torch.randn(64, 8), torch.randn(64, 1)
    if nan:
        x[3, 0] = float("nan")  # one bad input row: the loss is NaN from the first step
    for _ in range(30):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_healthy():
    train(lr=0.05)


def test_nan_input():
    train(lr=0.05, nan=True)


def test_lr_far_too_low():
    train(lr=1e-9)


@pytest.mark.traindoc(fail_on="warning")
def test_marked_lr_far_too_low():
    train(lr=1e-9)


def test_no_training():
    assert torch.ones(2).sum() == 2
'''


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_training=TESTS)
    return pytester


def test_traindoc_fails_tests_with_errors(suite: pytest.Pytester) -> None:
    result = suite.runpytest_subprocess("--traindoc", "-p", "no:randomly", "-p", "no:cacheprovider")
    # errors only by default; the marked test asks for warnings
    result.assert_outcomes(passed=3, failed=2)
    result.stdout.fnmatch_lines(["*FAILED test_training.py::test_nan_input*",
                                 "*FAILED test_training.py::test_marked_lr_far_too_low*"])
    result.stdout.fnmatch_lines(["*traindoc found 1 finding(s) at or above error:*",
                                 "*traindoc: [[]error[]] nonfinite at step 0:*"])


def test_fail_on_warning(suite: pytest.Pytester) -> None:
    result = suite.runpytest_subprocess("--traindoc", "--traindoc-fail-on", "warning", "-p", "no:randomly")
    result.assert_outcomes(passed=2, failed=3)
    result.stdout.fnmatch_lines(["*[[]warning[]] tiny-updates at step 0:*"])


def test_without_the_option_only_marked_tests_are_watched(suite: pytest.Pytester) -> None:
    result = suite.runpytest_subprocess("-p", "no:randomly")
    result.assert_outcomes(passed=4, failed=1)
    result.stdout.fnmatch_lines(["*FAILED test_training.py::test_marked_lr_far_too_low*"])


def test_a_wrong_marker_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bad='''
import pytest

@pytest.mark.traindoc(fail_on="fatal")
def test_x():
    pass
''')
    result = pytester.runpytest_subprocess("-p", "no:randomly")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*fail_on must be one of error, warning, info or None, got 'fatal'*"])
