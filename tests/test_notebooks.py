"""The evaluation notebook runs top to bottom (nbclient) on a tiny evaluation run made here, and matches its
generator."""
from __future__ import annotations

import gzip
import importlib.util
import json
import os
from pathlib import Path

import pytest

from arabert_pipeline.cli import main
from arabert_pipeline.evaluate import load
from arabert_pipeline.evaluate.metrics import punkt_sentence_spans
from arabert_pipeline.qa.data import read_squad

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"


def load_generator():
    spec = importlib.util.spec_from_file_location("make_evaluation_notebook", NOTEBOOKS / "make_evaluation_notebook.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_notebook_is_the_generators():
    nbformat = pytest.importorskip("nbformat")
    committed = nbformat.read(str(NOTEBOOKS / "evaluation.ipynb"), as_version=4)
    generated = load_generator().build()
    assert [(c.cell_type, c.source) for c in committed.cells] == [(c.cell_type, c.source) for c in generated.cells]


@pytest.mark.slow
def test_evaluation_notebook_runs_on_a_tiny_run(shared_data, tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")

    # A slice of ARCD-test saved as arcd-test.json, so the notebook's "next to the paper" cell has its dataset.
    data = json.loads(read_squad("arcd-test", misaligned="keep").path.read_text(encoding="utf-8"))
    data["data"] = data["data"][:2]
    sliced = tmp_path / "arcd-test.json"
    sliced.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    answers = {}
    for ex in read_squad(str(sliced), misaligned="keep").examples:
        start, end = punkt_sentence_spans(ex["context"])[0]
        answers[ex["id"]] = ex["context"][start:end]
    predictions = tmp_path / "first.json"
    predictions.write_text(json.dumps(answers, ensure_ascii=False), encoding="utf-8")
    log = tmp_path / "log.jsonl"
    log.write_text('{"step": 5, "tokens": 4000, "elapsed": 2.0, "loss": 8.5, "mlm_loss": 8.5}\n'
                   '{"step": 5, "eval_mlm_loss": 8.25, "eval_mlm_accuracy": 0.0625, "eval_mlm_perplexity": 3827.6}\n',
                   encoding="utf-8")
    run = tmp_path / "run"
    assert main(["evaluate", "--predictions", str(predictions), "--label", "tiny-system", "--data", str(sliced),
                 "-o", str(run), "--resamples", "200", "--pretraining-log", f"tiny-mlm={log}"]) == 0

    # The documents-and-collections section reads results/open-collection beside the notebook: a tiny one here.
    from data_slices import write_first_articles

    articles = write_first_articles("arcd-train", tmp_path / "arcd3.json", 3)
    # Two of the three articles withheld, twelve questions from two of them: some of them have no answer to find.
    assert main(["evaluate", "--model", "arabert", "--backend", "onnx", "--data", str(articles), "--limit", "12",
                 "--documents", "1", "--collection", "--withhold", "0.6", "--baselines", "none", "--resamples", "200",
                 "-o", str(tmp_path / "results" / "open-collection")]) == 0

    monkeypatch.setenv(load.RESULTS_DIR_ENV, str(run))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    notebook = nbformat.read(str(NOTEBOOKS / "evaluation.ipynb"), as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nbclient.NotebookClient(notebook, timeout=180, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()

    texts = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            assert output.output_type != "error", output
            texts.append(output.get("text", "") + json.dumps(output.get("data", {}), ensure_ascii=False))
    shown = "\n".join(texts)
    assert "tiny-system" in shown and "| AraBERTv1 | 30.6 | 62.7 | 92.0 |" in shown
    assert "this run, SOQAL variant" in shown and "image/png" in shown
    assert "| tiny-mlm | 5 | 0.00 M | 0.0 | 8.250 | 3827.600 | 0.062 |" in shown
    assert "## Documents and collections" in shown and "arabert-mini collection tfidf" in shown
    assert "No answer (collection)" in shown


@pytest.mark.slow
def test_committed_results_hold_under_the_current_sentence_match(full_data):
    """Every committed per-question Sentence-Match score is what the current metric gives (issue 13 located the
    Arabic-correct prediction by its start offset; the committed predictions all carry one, so no table changed)."""
    from arabert_pipeline.evaluate.metrics import arabic_sentence_match, soqal_sentence_match

    checked = 0
    for root in sorted(path.parent for path in NOTEBOOKS.glob("results/**/results.json")):  # one run, or dev/ + test/
        if json.loads((root / "results.json").read_text(encoding="utf-8")).get("task") not in (None, "qa"):
            continue  # a classification or NER report: no Sentence-Match in it
        results = load.load_results(root)
        limit = results["config"].get("limit")
        for key, entry in results["datasets"].items():
            examples = read_squad(entry["source"], misaligned="keep").examples
            examples = {e["id"]: e for e in (examples[:limit] if limit else examples)}
            for path in sorted((root / "per_question" / key).glob("*.jsonl.gz")):
                for line in gzip.decompress(path.read_bytes()).decode("utf-8").splitlines():
                    record = json.loads(line)
                    if record["missing"]:
                        continue
                    example = examples[record["id"]]
                    assert record["arabic_sm"] == arabic_sentence_match(
                        example["context"], record["prediction"], example["answers"], record["prediction_start"]
                    ), (path, record["id"])
                    assert record["soqal_sm"] == soqal_sentence_match(
                        example["context"], record["prediction"], example["answers"]["text"][0]), (path, record["id"])
                    checked += 1
    assert checked > 30_000
