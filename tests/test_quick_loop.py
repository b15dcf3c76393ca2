"""The quick loop (`pytest -m "not slow"`, docs/development.md) stays a smoke test of everything: every test file keeps
at least one test outside `slow` (only the end-to-end files named in ALL_SLOW and the benchmark scripts' tests are slow
whole), and every module of the package is imported by the quick tests, by name or through the package's own imports.
Static, as test_layering and test_docs are: it reads the sources and runs nothing, so it costs the quick loop little."""
from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "arabert_pipeline"
TESTS = ROOT / "tests"

# Test files that are slow whole, and why; each stage they chain has quick tests of its own.
ALL_SLOW = {
    "test_end_to_end.py": "preprocess → tokenizer → pretrain → finetune → evaluate → answer, per architecture",
    "test_kill_resume.py": "real runs killed and resumed",
    "test_gpu_pretrain_script.py": "scripts/gpu_pretrain.sh end to end at stand-in size",
    "test_train_default_model_script.py": "scripts/train_default_model.sh end to end at stand-in size",
}
# tests/test_bench_*.py run a script of benchmarks/ at tiny size, a torch process per row: slow whole too.
BENCHMARK_SCRIPTS = "test_bench_*.py"


@cache
def parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def is_slow_mark(node: ast.expr) -> bool:
    """`pytest.mark.slow` (or `pytest.mark.slow(...)`)."""
    return ast.unparse(node.func if isinstance(node, ast.Call) else node) == "pytest.mark.slow"


def all_cases_slow(function: ast.FunctionDef) -> bool:
    """Parametrized, and every case a `pytest.param(..., marks=pytest.mark.slow)`."""
    for decorator in function.decorator_list:
        if isinstance(decorator, ast.Call) and ast.unparse(decorator.func) == "pytest.mark.parametrize" \
                and len(decorator.args) > 1 and isinstance(decorator.args[1], (ast.List, ast.Tuple)):
            cases = decorator.args[1].elts
            return bool(cases) and all(
                isinstance(case, ast.Call) and ast.unparse(case.func) == "pytest.param"
                and any(k.arg == "marks" and "pytest.mark.slow" in ast.unparse(k.value) for k in case.keywords)
                for case in cases)
    return False


def slow_module(tree: ast.Module) -> bool:
    """`pytestmark = pytest.mark.slow` (or a list holding it) at module level."""
    return any(isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets)
               and "pytest.mark.slow" in ast.unparse(node.value) for node in tree.body)


def quick_part(tree: ast.Module) -> tuple[list[str], ast.Module]:
    """The names of a test file's quick tests, and the file without its slow tests (what the quick loop runs of it)."""
    if slow_module(tree):
        return [], ast.Module(body=[], type_ignores=[])
    kept, quick = [], []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            if any(is_slow_mark(d) for d in node.decorator_list) or all_cases_slow(node):
                continue
            quick.append(node.name)
        if isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            if any(is_slow_mark(d) for d in node.decorator_list):
                continue
            quick.extend(f"{node.name}.{f.name}" for f in node.body
                         if isinstance(f, ast.FunctionDef) and f.name.startswith("test_"))
        kept.append(node)
    return quick, ast.Module(body=kept, type_ignores=[])


def imported(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Every module an AST imports, anywhere in it (lazy imports inside functions included), relative ones resolved,
    and the module names it spells out as strings (importlib.import_module("arabert_pipeline...."))."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".") if is_package else module.split(".")[:-1]
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and node.value.startswith("arabert_pipeline."):
            names.add(node.value.split(":")[0])
    return names


def with_parents(names: set[str], modules: dict[str, Path]) -> set[str]:
    """The package modules among `names`, with the packages above them (importing a.b.c imports a and a.b)."""
    found = set()
    for name in names:
        parts = name.split(".")
        found.update(".".join(parts[:i]) for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in modules)
    return found


IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n#]+)|import[ \t]+([^\n#]+))",
                    re.MULTILINE)
MODULE_STRING = re.compile(r"[\"'](arabert_pipeline(?:\.\w+)+)")


@cache
def package_imports(path: Path, module: str) -> frozenset[str]:
    """What `imported` finds in a package module, read with two patterns instead of a parse (a tenth of the time):
    import statements anywhere (lazy ones inside functions included) and module names spelled as strings."""
    text, names = path.read_text(encoding="utf-8"), set()
    for match in IMPORT.finditer(text):
        if match.group(3):
            names.update(part.split(" as ")[0].strip() for part in match.group(3).split(","))
            continue
        base, dots = match.group(1).lstrip("."), len(match.group(1)) - len(match.group(1).lstrip("."))
        if dots:
            parts = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
            parts = parts[:len(parts) - dots + 1]
            base = ".".join(parts + ([base] if base else []))
        names.add(base)
        names.update(f"{base}.{part.split(' as ')[0].strip()}" for part in match.group(2).strip("()").split(","))
    names.update(MODULE_STRING.findall(text))
    return frozenset(names)


def reached(start: set[str], modules: dict[str, Path]) -> set[str]:
    """The package modules that `start` imports, directly or through the package's own imports."""
    seen, todo = set(), list(start)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(with_parents(set(package_imports(modules[name], name)), modules) - seen)
    return seen


def quick_imports(modules: dict[str, Path]) -> set[str]:
    """The package modules the quick tests (and the test helpers and fixtures they use) name."""
    names: set[str] = set()
    for path in sorted(TESTS.glob("*.py")):
        if not has_slow_marks(path):  # every test of it is quick: its imports, read as a package module's are
            names |= package_imports(path, f"tests.{path.stem}")
            continue
        quick, tree = quick_part(parse(path))
        if quick:
            names |= imported(tree, f"tests.{path.stem}", False)
    return with_parents(names, modules)


def has_slow_marks(path: Path) -> bool:
    """Whether a test file marks anything slow (only those are parsed: the rest of a file is quick whole)."""
    return "pytest.mark.slow" in path.read_text(encoding="utf-8")


def test_every_test_file_keeps_a_quick_test():
    files = set(TESTS.glob("test_*.py")) - set(TESTS.glob(BENCHMARK_SCRIPTS))
    without = {path.name for path in files if has_slow_marks(path) and not quick_part(parse(path))[0]}
    assert without - set(ALL_SLOW) == set(), \
        "test files with no test outside `slow`: give each a quick smoke test, or name it in ALL_SLOW with the reason"
    assert set(ALL_SLOW) - without == set(), "ALL_SLOW names files that have a quick test (or no longer exist)"


def test_every_package_module_is_reached_by_the_quick_tests():
    modules = package_modules()
    missing = set(modules) - reached(quick_imports(modules), modules)
    assert not missing, f"modules no quick test imports, even through the package: {sorted(missing)}"


# The checks themselves: they must be able to fail.

def test_the_check_sees_slow_tests_slow_cases_and_slow_files():
    source = '''
import pytest
from arabert_pipeline.qa import data

@pytest.mark.slow
def test_a():
    from arabert_pipeline.serve import app

@pytest.mark.parametrize("x", [pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=[pytest.mark.slow])])
def test_b(x):
    pass

@pytest.mark.parametrize("x", [pytest.param(1, marks=pytest.mark.slow), 2])
def test_c(x):
    from arabert_pipeline.ner import data
'''
    quick, kept = quick_part(ast.parse(source))
    assert quick == ["test_c"]
    modules = package_modules()
    assert with_parents(imported(kept, "tests.x", False), modules) == {
        "arabert_pipeline", "arabert_pipeline.qa", "arabert_pipeline.qa.data", "arabert_pipeline.ner",
        "arabert_pipeline.ner.data"}
    assert quick_part(ast.parse("import pytest\npytestmark = pytest.mark.slow\ndef test_d():\n    pass\n"))[0] == []


def test_the_check_follows_the_package_imports_and_finds_what_is_left_out():
    modules = package_modules()
    # the patterns read a package module as the parse does
    for name in ("arabert_pipeline.cli", "arabert_pipeline.pipeline.core", "arabert_pipeline.qa.transformer.cli",
                 "arabert_pipeline", "arabert_pipeline.tokenizer"):
        path = modules[name]
        parsed = imported(parse(path), name, path.name == "__init__.py")
        assert with_parents(set(package_imports(path, name)), modules) == with_parents(parsed, modules), name
    # cli.py names its stages' modules as strings; from them, the whole package is reached
    assert "arabert_pipeline.qa.transformer.finetune" in reached({"arabert_pipeline.cli"}, modules)
    # errors.py imports nothing of the package: everything else is left out
    assert reached({"arabert_pipeline.errors"}, modules) == {"arabert_pipeline.errors"}
