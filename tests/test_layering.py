"""The package's layer order, declared once in pyproject.toml ([tool.importlinter]): no import runs back up a layer
(lazy imports inside functions included), modules of one layer joined by "|" stay apart, and so no import loops
between layers; inside artifacts/, models and metadata over the checked reads, the atomic writes and the data root;
inside weights/, loading over the header checks, reader tables and shared tokenizer over the storage and the bounded
reads; inside qa/, the shared contract, the static reader and the transformer reader in that order;
inside retrieval/, passages, terms and scores below the index dir, the Index and the verb."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_layer_contracts_hold():
    # In a process of its own: import-linter reconfigures logging (dictConfig disables every logger that exists).
    code = ("import sys; from importlinter.cli import lint_imports; "
            "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True, no_logo=True))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "5 kept, 0 broken" in done.stdout
