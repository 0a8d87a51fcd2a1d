"""Variant kinds that move code: into a helper, a ``Trainer`` method, a ``main()`` guard, a
per-step helper, a static method; loops over ``enumerate``, a list, ``while``/``next()``;
``self`` attributes bound to locals; imports inside functions."""

from __future__ import annotations

import ast
import copy

from variants_ast import (
    BUILTINS, MARK, Replace, bound_names, call_stmt, first_for, free_names, function_def, is_def, is_import,
    loaded_names, position_of, split_module, unique_name,
)


def helper(tree: ast.Module) -> ast.Module | None:
    """The module-level training code moved into ``def run(model, optimizer, ...)``."""
    imports, defs, rest = split_module(tree)
    if not rest:
        return None
    stored = {n.id for s in rest for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    if any(n in stored for d in defs for n in loaded_names([d])):
        return None  # a function reads a module-level name the code assigns: it must stay global
    free = free_names(tree)
    params = [n for n in loaded_names(rest) if n in free]
    name = unique_name("run", bound_names(tree))
    tree.body = imports + defs + [function_def(name, params, rest), call_stmt(name, params)]
    return tree


class _ToSelf(ast.NodeTransformer):
    """Inside a method: free names become ``self.<name>``, module functions ``self.<fn>``."""

    def __init__(self, names: set[str], functions: set[str]) -> None:
        self.names, self.functions = names, functions

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.names or (node.id in self.functions and isinstance(node.ctx, ast.Load)):
            return ast.copy_location(ast.Attribute(ast.Name("self", ast.Load()), node.id, node.ctx), node)
        return node


def method(tree: ast.Module) -> ast.Module | None:
    """Functions and the training code moved into a ``Trainer`` class; the objects it uses are
    attributes of ``self`` set in ``__init__``; ``fit()`` runs what the module ran."""
    imports, defs, rest = split_module(tree)
    functions = [d for d in defs if isinstance(d, ast.FunctionDef)]
    classes = [d for d in defs if not isinstance(d, ast.FunctionDef)]
    if any(d.decorator_list for d in functions):
        return None
    if "self" in bound_names(tree):
        return _self_functions(tree)
    free = free_names(tree)
    fn_names = {f.name for f in functions}
    run_name = unique_name("train_loop", bound_names(tree))
    # free names used by the module code become attributes; functions keep their parameters
    attrs = [n for n in loaded_names(rest) if n in free]
    if not rest and not functions:
        return None
    init = function_def("__init__", ["self", *attrs], [
        ast.Assign([ast.Attribute(ast.Name("self", ast.Load()), a, ast.Store())], ast.Name(a, ast.Load()))
        for a in attrs
    ])
    methods: list[ast.stmt] = [init]
    for f in functions:
        f.args.args.insert(0, ast.arg("self"))
        # a function reads module-level names of the snippet as globals; keep them so
        _ToSelf(set(), fn_names).visit(f)
        methods.append(f)
    # names assigned at module level are globals the functions read: make them attributes too
    module_bound = {n.id for s in rest for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    if any(n in module_bound for f in functions for n in loaded_names([f])):
        return None
    body = [_ToSelf(set(attrs), fn_names).visit(s) for s in rest]
    methods.append(function_def(run_name, ["self"], body))
    cls = ast.ClassDef("Trainer", [], [], methods, [])
    run = ast.Expr(ast.Call(ast.Attribute(
        ast.Call(ast.Name("Trainer", ast.Load()), [ast.Name(a, ast.Load()) for a in attrs], []),
        run_name, ast.Load()), [], []))
    tree.body = imports + classes + [cls, run]
    return tree


def _self_functions(tree: ast.Module) -> ast.Module | None:
    """Module-level functions whose first parameter is ``self`` put into the class they came
    from."""
    group = [
        s for s in tree.body
        if isinstance(s, ast.FunctionDef) and s.args.args and s.args.args[0].arg == "self"
    ]
    if not group or "Trainer" in bound_names(tree):
        return None
    i = tree.body.index(group[0])
    tree.body = [s for s in tree.body if s not in group]
    tree.body.insert(i, ast.ClassDef("Trainer", [], [], group, []))
    return tree


def main_guard(tree: ast.Module) -> ast.Module | None:
    """The module-level code in ``def main():`` run under ``if __name__ == "__main__":``."""
    imports, defs, rest = split_module(tree)
    if not rest or "main" in bound_names(tree):
        return None
    stored = sorted({
        n.id for s in rest for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    })
    if any(n in stored for d in defs for n in loaded_names([d])):
        return None  # a function reads a module-level name the code assigns
    guard = ast.parse('if __name__ == "__main__":\n    main()').body
    tree.body = imports + defs + [function_def("main", [], rest), *guard]
    return tree


def step_helper(tree: ast.Module) -> ast.Module | None:
    """The loop body moved into ``def train_step(...)`` called once per iteration (when the
    body carries nothing from one iteration to the next and leaves nothing behind)."""
    found = first_for(tree)
    if found is None:
        return None
    loop, _ = found
    body = loop.body
    nodes = [n for s in body for n in ast.walk(s)]
    if any(isinstance(n, (ast.Break, ast.Continue, ast.Return, ast.Yield, ast.YieldFrom, ast.AugAssign,
                          ast.Global, ast.Nonlocal, ast.FunctionDef, ast.Lambda)) for n in nodes):
        return None
    stored = {n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    # attributes or items assigned in the body stay visible through the object: fine.
    inside = {id(n) for n in nodes}
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and n.id in stored and id(n) not in inside:
            if not (isinstance(n.ctx, ast.Store) and n in ast.walk(loop.target)):
                return None  # the name lives outside the body too
    first_store: dict[str, tuple[int, int]] = {}
    for n in nodes:
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            first_store[n.id] = min(first_store.get(n.id, (10**9, 0)), position_of(n))
    for n in nodes:
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in first_store:
            if position_of(n) <= first_store[n.id]:
                return None  # read before written: carried across iterations
    imported = {(a.asname or a.name).split(".")[0] for s in tree.body if is_import(s) for a in s.names}
    module_fns = {s.name for s in tree.body if is_def(s)}
    params = [n for n in loaded_names(body) if n not in stored and n not in BUILTINS and n not in imported
              and n not in module_fns]
    name = unique_name("train_step", bound_names(tree))
    # inside a method the helper is a method of the same class: ``self.train_step(x, y)``
    cls = next((c for c in ast.walk(tree) if isinstance(c, ast.ClassDef) and any(m is loop for m in ast.walk(c))), None)
    method_of = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and any(m is loop for m in ast.walk(f))
                      and f.args.args and f.args.args[0].arg == "self"), None) if cls else None
    if cls is not None and method_of is not None and "self" in params:
        params.remove("self")
        helper_fn = function_def(name, ["self", *params], body)
        call = ast.Expr(ast.Call(ast.Attribute(ast.Name("self", ast.Load()), name, ast.Load()),
                                 [ast.Name(a, ast.Load()) for a in params], []))
        loop.body = [call]
        cls.body.insert(cls.body.index(method_of), helper_fn)
        return tree
    helper_fn = function_def(name, params, body)
    loop.body = [call_stmt(name, params)]
    top = next(s for s in tree.body if loop is s or any(m is loop for m in ast.walk(s)))
    i = tree.body.index(top)
    tree.body.insert(i, helper_fn)
    return tree


def enumerate_loop(tree: ast.Module) -> ast.Module | None:
    """``for x, y in loader`` written ``for step, (x, y) in enumerate(loader)``."""
    found = first_for(tree)
    if found is None or "step_i" in bound_names(tree):
        return None
    loop, _ = found
    loop.target = ast.Tuple([ast.Name("step_i", ast.Store()), loop.target], ast.Store())
    loop.iter = ast.Call(ast.Name("enumerate", ast.Load()), [loop.iter], [])
    return tree


def list_loop(tree: ast.Module) -> ast.Module | None:
    """The loop runs over a list built first: ``batches = list(loader); for x, y in batches``."""
    found = first_for(tree)
    if found is None or "batches" in bound_names(tree) | set(loaded_names([tree])):
        return None
    loop, block = found
    build = ast.Assign([ast.Name("batches", ast.Store())], ast.Call(ast.Name("list", ast.Load()), [loop.iter], []))
    loop.iter = ast.Name("batches", ast.Load())
    block.insert(block.index(loop), build)
    return tree


def while_loop(tree: ast.Module) -> ast.Module | None:
    """``for batch in loader`` written ``it = iter(loader); while True: try: batch = next(it)
    except StopIteration: break``."""
    found = first_for(tree)
    if found is None or "batch_iter" in bound_names(tree):
        return None
    loop, block = found
    if any(isinstance(n, ast.Continue) for s in loop.body for n in ast.walk(s)):
        return None
    head = ast.parse(
        "while True:\n    try:\n        X = next(batch_iter)\n    except StopIteration:\n        break"
    ).body[0]
    assert isinstance(head, ast.While) and isinstance(head.body[0], ast.Try)
    get = head.body[0].body[0]
    assert isinstance(get, ast.Assign)
    get.targets = [loop.target]
    head.body += loop.body
    start = ast.Assign([ast.Name("batch_iter", ast.Store())], ast.Call(ast.Name("iter", ast.Load()), [loop.iter], []))
    if getattr(loop, MARK, False):
        setattr(head, MARK, True)
    i = block.index(loop)
    block[i:i + 1] = [start, head]
    return tree


def self_locals(tree: ast.Module) -> ast.Module | None:
    """In each method, the attributes of ``self`` it only reads are bound to locals first
    (``model = self.model``), when no method but ``__init__`` assigns them."""
    assigned = {
        n.attr for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name != "__init__"
        for n in ast.walk(f) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
    }
    changed = False
    for f in ast.walk(tree):
        if not (isinstance(f, ast.FunctionDef) and f.args.args and f.args.args[0].arg == "self"):
            continue
        if f.name == "__init__":
            continue
        taken = bound_names(f) | set(loaded_names([f]))
        reads: list[str] = []
        for n in ast.walk(f):
            if (isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
                    and isinstance(n.ctx, ast.Load) and n.attr not in assigned and n.attr not in taken
                    and n.attr not in reads):
                reads.append(n.attr)
        calls = {id(c.func) for c in ast.walk(f) if isinstance(c, ast.Call)}
        reads = [r for r in reads if not any(
            isinstance(n, ast.Attribute) and n.attr == r and id(n) in calls for n in ast.walk(f))]
        if not reads:
            continue
        Replace({
            id(n): ast.Name(n.attr, ast.Load()) for n in ast.walk(f)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
            and n.attr in reads and isinstance(n.ctx, ast.Load)
        }).visit(f)
        binds = ast.parse("\n".join(f"{r} = self.{r}" for r in reads)).body
        start = 1 if f.body and isinstance(f.body[0], ast.Expr) and isinstance(f.body[0].value, ast.Constant) else 0
        f.body[start:start] = binds
        changed = True
    return tree if changed else None


def self_as_param(tree: ast.Module) -> ast.Module | None:
    """A module-level function taking the trainer as ``self`` written with ``trainer``."""
    changed = False
    for f in tree.body:
        if isinstance(f, ast.FunctionDef) and f.args.args and f.args.args[0].arg == "self":
            if "trainer" in bound_names(f) | set(loaded_names([f])):
                return None
            f.args.args[0].arg = "trainer"
            for n in ast.walk(f):
                if isinstance(n, ast.Name) and n.id == "self":
                    n.id = "trainer"
            changed = True
    return tree if changed else None


def static_method(tree: ast.Module) -> ast.Module | None:
    """Module-level functions as static methods of a ``Steps`` class, called through it."""
    functions = [s for s in tree.body if isinstance(s, ast.FunctionDef) and not s.decorator_list
                 and not (s.args.args and s.args.args[0].arg == "self")]
    if not functions or "Steps" in bound_names(tree):
        return None
    names = {f.name for f in functions}
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and n.id in names and not isinstance(n.ctx, ast.Load):
            return None
    for f in functions:
        f.decorator_list = [ast.Name("staticmethod", ast.Load())]
    Replace({
        id(n): ast.Attribute(ast.Name("Steps", ast.Load()), n.id, ast.Load())
        for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id in names and isinstance(n.ctx, ast.Load)
    }).visit(tree)
    i = tree.body.index(functions[0])
    tree.body = [s for s in tree.body if s not in functions]
    tree.body.insert(i, ast.ClassDef("Steps", [], [], functions, []))
    return tree


def local_imports(tree: ast.Module) -> ast.Module | None:
    """Imports inside the functions that use them (lazy imports), kept at the top only when
    module-level code uses them too."""
    imports, defs, rest = split_module(tree)
    functions = [f for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and (f in defs or any(f in c.body for c in defs if isinstance(c, ast.ClassDef)))]
    if not imports or not functions:
        return None
    used_at_top = set(loaded_names(rest)) | {
        n.id for d in defs if isinstance(d, ast.ClassDef) for b in d.bases + d.decorator_list
        for n in ast.walk(b) if isinstance(n, ast.Name)}
    used_at_top |= {n.id for d in defs if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef))
                    for part in [*d.decorator_list, *d.args.defaults,
                                 *[a.annotation for a in d.args.args if a.annotation]]
                    for n in ast.walk(part) if isinstance(n, ast.Name)}
    changed = False
    for imp in imports:
        names = {(a.asname or a.name).split(".")[0] for a in imp.names}
        if names & used_at_top:
            continue
        for f in functions:
            if names & set(loaded_names(f.body)):
                f.body.insert(0, copy.deepcopy(imp))
                changed = True
        tree.body.remove(imp)
    return tree if changed else None
