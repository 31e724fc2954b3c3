"""The layering rules of docs/architecture.md, checked on the source tree: they hold today and must keep holding."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "attnpool"
MODULES = sorted(PACKAGE.rglob("*.py"))
MAX_LINES = 400
RUN_FILE_NAMES = ("oof.csv", "metrics.json", "run.json")


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


NAMES = {module_name(p): p for p in MODULES}


def imported_modules(path: Path) -> set[str]:
    """The attnpool modules a file imports at module level (``if TYPE_CHECKING:`` blocks left out)."""
    found: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for child in ast.walk(node) if isinstance(node, ast.If | ast.Try) else [node]:
            if isinstance(child, ast.Import):
                found.update(a.name for a in child.names if a.name.startswith("attnpool"))
            elif isinstance(child, ast.ImportFrom) and child.module and child.module.startswith("attnpool"):
                for alias in child.names:  # `from attnpool.x import y` imports attnpool.x.y when y is a module
                    sub = f"{child.module}.{alias.name}"
                    found.add(sub if sub in NAMES else child.module)
    return {name for name in found if name in NAMES}


def test_no_function_level_imports_of_the_package():
    offenders = [f"{p.relative_to(SRC)}:{i}: {line.strip()}" for p in MODULES
                 for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
                 if re.match(r"^\s+(from attnpool|import attnpool)", line)]
    assert not offenders, "imports of attnpool inside functions (move them to the top):\n" + "\n".join(offenders)


def test_no_module_imports_one_that_imports_it_back():
    graph = {name: imported_modules(path) - {name} for name, path in NAMES.items()}
    cycles = []
    for start in graph:  # a path from a module back to itself, by depth-first search
        stack, seen = [(start, [start])], set()
        while stack:
            node, trail = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    cycles.append(" -> ".join([*trail, start]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*trail, nxt]))
    assert not cycles, "import cycles:\n" + "\n".join(sorted(set(cycles))[:10])


def test_the_import_graph_sees_module_imports():
    """`from attnpool.x import module` and `from attnpool.x import name` both count: the cycle check is not blind."""
    names = imported_modules(PACKAGE / "api.py")
    assert "attnpool.training.recipe" in names and "attnpool.config" in names


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_files_stay_small(path):
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(SRC)} has {lines} lines; split it by job (at most {MAX_LINES})"


def test_only_the_run_module_names_the_run_files():
    owner = PACKAGE / "runs" / "run.py"
    offenders = [f"{p.relative_to(SRC)}: {name}" for p in MODULES if p != owner
                 for name in RUN_FILE_NAMES if name in p.read_text(encoding="utf-8")]
    assert not offenders, "run-directory file names outside attnpool.runs.run (use Run):\n" + "\n".join(offenders)
