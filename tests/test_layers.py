"""The package's import order, checked on every import statement (module level and
inside functions): a lower layer never imports a higher one, and no modules import
each other in a cycle. The order is the architecture; docs/layout.md names it."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers import PACKAGE, graph, imports, module_name

# Lowest first. A module may import its own layer and any layer before it.
LAYERS = (
    # Data, not code: the Hydra config groups and the bundled toy models (whose modules
    # import only their own folder), below everything so any layer may name them.
    "conf",
    "zoo",
    "core",
    "records",
    "store",
    "machine",
    "graph",
    "inputs",
    "export",
    "precision",
    "engine",
    "analysis",
    "bench",
    "report",
    "serve",
    "flow",
    "sweeps",
    "cli",
)
TOP = "entry"  # pipeline/__init__.py and pipeline/__main__.py, above every layer
MAX_CODE_LINES = 320  # about 300


def layer_of(module: str) -> str:
    parts = module.split(".")
    # a subpackage itself (its __init__, the API `pipeline.store` gives) is of its layer
    return parts[1] if len(parts) >= 2 and parts[1] in LAYERS else TOP


def rank(layer: str) -> int:
    return LAYERS.index(layer) if layer in LAYERS else len(LAYERS)


def test_no_import_against_the_layer_order():
    bad = [
        f"{m} ({layer_of(m)}) imports {d} ({layer_of(d)})"
        for m, deps in graph().items()
        for d in deps
        if rank(layer_of(d)) > rank(layer_of(m))
    ]
    assert not bad, "\n".join(sorted(bad))


def test_no_import_cycles():
    g = graph()
    state: dict[str, int] = {}
    cycles = []

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for d in sorted(g[m]):
            if state.get(d) == 1:
                cycles.append(
                    " -> ".join([*stack[stack.index(d) :], d]) if d in stack else f"{m} -> {d}"
                )
            elif d not in state:
                visit(d, [*stack, d])
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            visit(m, [m])
    assert not cycles, "\n".join(cycles)


def test_every_module_belongs_to_a_layer():
    """Nothing loose at the package root: each module sits in the subpackage named for
    what it holds."""
    top = {module_name(p) for p in PACKAGE.glob("*.py")}
    assert top == {"pipeline", "pipeline.__main__"}, sorted(top)
    assert {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"} == set(
        LAYERS
    )


def code_lines(text: str) -> int:
    """Formatted lines that are code: blank lines and comments are not counted, so a
    comment saying why never pushes a module over the limit."""
    return sum(
        1 for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")
    )


def test_long_modules_say_why():
    """About 300 lines of code at most (ruff-formatted), unless the docstring says why the
    module stays whole. Met by splitting along a seam, never by squeezing lines."""
    long = [
        f"{p.relative_to(PACKAGE)}: {n} lines of code"
        for p in PACKAGE.rglob("*.py")
        if (n := code_lines(p.read_text())) > MAX_CODE_LINES
        and "Kept whole" not in p.read_text()[:2000]
    ]
    assert not long, long


MAX_FUNCTION_LINES = 60


def test_long_functions_say_why():
    """No function runs past 60 lines (def to its last line, ruff-formatted) unless its
    docstring says why it stays whole ("Kept whole: ..."). McCabe complexity has its own
    limit in ruff (C901, max-complexity 12). Met by splitting along a seam, never by
    squeezing lines."""
    long = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            lines = node.end_lineno - node.lineno + 1
            if lines > MAX_FUNCTION_LINES and "Kept whole" not in (ast.get_docstring(node) or ""):
                long.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}: {lines} lines")
    assert not long, long


def test_the_checker_sees_function_level_imports(tmp_path):
    p = tmp_path / "m.py"
    p.write_text("def f():\n    from pipeline.engine import store\n")
    assert imports(p, {"pipeline.engine.store", "pipeline.engine"}) == {"pipeline.engine.store"}


def test_nothing_outside_the_store_imports_its_private_modules():
    """pipeline/store's modules are private (`_verified`, `_entry`, ...); every other module
    imports the package's one API."""
    private = []
    for path in PACKAGE.rglob("*.py"):
        if path.is_relative_to(PACKAGE / "store"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [f"{node.module}.{a.name}" for a in node.names]
                if isinstance(node, ast.ImportFrom) and node.module
                else []
            )
            private += [
                f"{path.relative_to(PACKAGE)}: {n}"
                for n in names
                if n.startswith("pipeline.store._")
            ]
    assert not private, private


def test_every_package_of_several_modules_has_a_face():
    """A package of more than one module says in its __init__ what it holds and which
    module to enter by: a reader meets the docstring before the files."""
    faceless = [
        str(init.parent.relative_to(PACKAGE))
        for init in PACKAGE.rglob("__init__.py")
        if len([p for p in init.parent.glob("*.py") if p.name != "__init__.py"]) > 1
        and not ast.get_docstring(ast.parse(init.read_text()))
    ]
    assert not faceless, faceless


def test_no_module_is_imported_under_another_modules_name():
    """`from x import search as fallback` makes a reader meet two names for one module, the
    second of them another module's or package's."""
    names = {p.stem for p in PACKAGE.rglob("*.py")} | {
        p.name for p in PACKAGE.rglob("*") if p.is_dir() and p.name != "__pycache__"
    }
    renamed = [
        f"{path.relative_to(PACKAGE)}: {alias.name} as {alias.asname}"
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.asname in names and alias.asname != alias.name
    ]
    assert not renamed, renamed


ROOT = PACKAGE.parent
PROJECT = ("pipeline", "tests")  # the packages whose modules the rule below covers


def is_project_module(dotted: str) -> bool:
    """`dotted` names a module or package of this project (pipeline.*, tests.*), not a
    function, class or constant inside one."""
    if dotted.split(".")[0] not in PROJECT:
        return False
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def renamed_modules(path: Path) -> list[tuple[int, str]]:
    """Each `from pipeline.x import y as z` (y a module) and `import pipeline.x as z` in
    `path`, wherever the statement is, by line."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [(a.name, a) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [(f"{node.module}.{a.name}", a) for a in node.names]
        else:
            continue
        out += [
            (node.lineno, f"{dotted} as {a.asname}")
            for dotted, a in names
            if a.asname and is_project_module(dotted)
        ]
    return sorted(out)


def test_no_module_is_imported_under_another_name():
    """A module of this project is imported by its own name (`from pipeline.engine import
    store`, then `store.prune`), never renamed (`store as store_lib`, `search as fallback`):
    a reader meets one name for one module. A clash with a local is met by renaming the
    local; two modules of one short name by importing names from one of them. Third-party
    aliases by convention (`numpy as np`) and aliases of functions or constants stay."""
    renamed = [
        f"{path.relative_to(ROOT)}:{line}: {alias}"
        for folder in ("pipeline", "tests", "benchmarks", "stages", "models", "hydra_plugins")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for line, alias in renamed_modules(path)
    ]
    assert not renamed, "\n".join(renamed)


def test_the_alias_checker_tells_modules_from_names(tmp_path):
    p = tmp_path / "m.py"
    p.write_text(
        "import numpy as np\n"
        "import pipeline.engine.store as s\n"
        "from pipeline.core.layout import WEAK_CALIBRATION_INPUTS as INPUTS\n"
        "def f():\n"
        "    from pipeline.engine import manifest as m\n"
        "    from tests import helpers as h\n"
        "    from pipeline.engine import store\n"
    )
    assert renamed_modules(p) == [
        (2, "pipeline.engine.store as s"),
        (5, "pipeline.engine.manifest as m"),
        (6, "tests.helpers as h"),
    ]
