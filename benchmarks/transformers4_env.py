"""A Python with transformers 4.x beside this venv: the Hugging Face QA pipeline reference of bench_pipeline.py (5.x
removed it) and the tests that check our artifacts load under both major versions (tests/test_tokenizer_compat.py).

The venv lives under .cache/hf-qa-reference and is made on first use with pip (network needed once). torch, numpy
and the rest come from this venv through a .pth file appended after the child's own site-packages, so only
transformers, tokenizers and huggingface_hub are its own.
"""
from __future__ import annotations

import site
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENV = REPO / ".cache" / "hf-qa-reference"
REQUIREMENTS = ["transformers>=4.46,<5", "huggingface_hub<1", "tokenizers>=0.20,<=0.23.0"]


def transformers4_python() -> str:
    """The path of that venv's python, created and installed if needed; CalledProcessError if pip cannot."""
    python = VENV / "bin" / "python"
    if not python.exists():
        print(f"creating the transformers-4 venv in {VENV} ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        child_site = subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"],
                                    check=True, capture_output=True, text=True).stdout.strip()
        Path(child_site, "zz_shared_with_main_venv.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    probe = "import transformers, sys; sys.exit(transformers.__version__.split('.')[0] != '4')"
    if subprocess.run([str(python), "-c", probe], capture_output=True).returncode != 0:
        # A first install, or one that an interrupted run left half done.
        subprocess.run([str(python), "-m", "pip", "install", "-q", *REQUIREMENTS], check=True)
    return str(python)
