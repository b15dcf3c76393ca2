"""The package's layer order, declared once in pyproject.toml ([tool.importlinter]): no import runs back up a layer
(lazy imports inside functions included), modules of one layer joined by "|" stay apart, and so no import loops
between layers."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_layer_contract_holds(monkeypatch, capsys):
    from importlinter.cli import lint_imports

    monkeypatch.chdir(ROOT)  # import-linter finds the package from the working directory
    code = lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True, no_logo=True)
    assert code == 0, capsys.readouterr().out
