"""How far lint follows calls: into functions and methods of the same file when the callee is
unambiguous, three calls deep, never into imports or other classes."""

from __future__ import annotations

import ast
import textwrap

from traindoc.lint import lint_source
from traindoc.lint._ast import Module


def module(code: str) -> Module:
    return Module(textwrap.dedent(code).lstrip("\n"))


def call_named(mod: Module, name: str) -> ast.Call:
    return next(c for c in mod.calls if (ast.unparse(c.func)) == name)


def test_a_function_and_a_method_of_the_callers_class_are_followed():
    mod = module(
        """
        def train_step(batch):
            return batch

        class Trainer:
            def _step(self, batch):
                return batch

            def fit(self):
                self._step(1)
                train_step(2)

        class Other:
            def _step(self, batch):
                return batch
        """
    )
    assert mod.callee_scope(call_named(mod, "train_step")).name == "train_step"
    step = mod.callee_scope(call_named(mod, "self._step"))
    assert step is not None and step.cls == "Trainer"


def test_ambiguous_imported_and_foreign_callees_are_not_followed():
    mod = module(
        """
        from utils import train_step

        if fast:
            def step(batch):
                return batch
        else:
            def step(batch):
                return batch * 2

        step(1)
        train_step(2)
        trainer.fit()
        """
    )
    assert mod.callee_scope(call_named(mod, "step")) is None  # two definitions
    assert mod.callee_scope(call_named(mod, "train_step")) is None  # imported
    assert mod.callee_scope(call_named(mod, "trainer.fit")) is None  # another object


def test_reached_goes_three_calls_deep_and_survives_recursion():
    mod = module(
        """
        def a():
            b()

        def b():
            c()

        def c():
            d()
            c()

        def d():
            e()

        def e():
            pass
        """
    )
    a = mod.functions["a"][0]
    assert [s.name for s in mod.reached(a)] == ["a", "b", "c", "d"]


def test_backwards_and_steps_in_a_loop_include_those_of_its_helpers():
    mod = module(
        """
        def train_step(model, batch, opt):
            loss = model(batch)
            loss.backward()
            opt.step()

        for batch in loader:
            train_step(model, batch, opt)
        """
    )
    top = mod.scopes[0]
    loop = top.loops[0]
    [(site, b)] = mod.backwards_in(top, loop)
    [(site2, step, opt)] = mod.steps_in(top, loop)
    assert site is site2 and site.lineno == 7
    assert b.call.lineno == 3 and step.lineno == 4 and opt == "opt"


def test_following_values_ends_on_cycles():
    """``self.dtype = dtype`` after ``dtype = self.dtype``: value_of must stop, not recurse
    until Python's limit (a crash became an internal error on transformers' bitsandbytes.py)."""
    code = (
        "import torch\n"
        "class Quant:\n"
        "    def setup(self, model):\n"
        "        dtype = self.dtype\n"
        "        self.dtype = dtype\n"
        "        self.model = model.to(self.dtype)\n"
        "        self.opt = torch.optim.AdamW(self.model.parameters())\n"
    )
    findings, errors = lint_source(code, "cycle.py")
    assert errors == [] and findings == []


def test_values_follow_configs_constants_and_parameters():
    """value_of: a dataclass field's default, an argparse default, a dict entry, a module
    constant, a parameter back to the only call; an attribute assigned before the read wins."""
    mod = module(
        """
        import argparse
        from dataclasses import dataclass

        @dataclass
        class Cfg:
            lr: float = 0.02
            out: str = "last.pt"

        LIMIT = 1e6
        CONFIG = {"cap": 50.0}
        parser = argparse.ArgumentParser()
        parser.add_argument("--max-loss", type=float, default=1e4)
        args = parser.parse_args()
        cfg = Cfg(lr=3e-4)

        def use(limit):
            a = (cfg.lr, cfg.out, args.max_loss, CONFIG["cap"], LIMIT, limit)
            cfg.out = "other.pt"
            b = cfg.out

        use(LIMIT)
        """
    )
    from traindoc.lint._values import value_of

    scope = next(s for s in mod.scopes if s.name == "use")
    (_, _, a), (_, _, _), (_, _, b) = scope.assigns
    assert isinstance(a, ast.Tuple)
    at = next(stmt for t, stmt, _ in scope.assigns if t == "a")
    got = [ast.literal_eval(value_of(mod, e, at)) for e in a.elts]
    assert got == [3e-4, "last.pt", 1e4, 50.0, 1e6, 1e6]
    at_b = next(stmt for t, stmt, _ in scope.assigns if t == "b")
    assert ast.literal_eval(value_of(mod, b, at_b)) == "other.pt"
