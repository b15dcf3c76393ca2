"""The report's tables: Markdown (table.md, the notebook) and CSV (table.csv), and the one-line summary."""
from __future__ import annotations

import csv
import io
import sys

METRIC_LABELS = {"em": "EM", "f1": "F1", "sm": "SM"}
VARIANT_LABELS = {"soqal": "SOQAL", "arabic": "Arabic"}


def _cell(score: dict) -> str:
    return f"{score['mean']:.1f} [{score['low']:.1f}, {score['high']:.1f}]"


def _diff_cell(paired: dict) -> str:
    p = paired["p_value"]
    return f"{paired['diff']:+.1f} [{paired['low']:+.1f}, {paired['high']:+.1f}] p={p:.3f}" if p >= 0.001 else \
        f"{paired['diff']:+.1f} [{paired['low']:+.1f}, {paired['high']:+.1f}] p<0.001"


def _system_name(system: dict) -> str:
    return f"*{system['label']}* (baseline)" if system["kind"] == "baseline" else system["label"]


def _columns(results: dict) -> list[str]:
    return [f"{METRIC_LABELS[k.split('_')[1]]} ({VARIANT_LABELS[k.split('_')[0]]})" for k in results["score_keys"]]


def systems_table(results: dict) -> str:
    lines = ["| system | kind | source | details |", "|---|---|---|---|"]
    for s in results["systems"]:
        details = ", ".join(f"{k}={v}" for k, v in s["info"].items() if v is not None) or "-"
        lines.append(f"| {s['label']} | {s['kind']} | `{s['source']}` | {details} |")
    return "\n".join(lines)


def scores_table(results: dict, dataset: str) -> str:
    """EM / F1 / SM × variant with 95% CIs, one row per system."""
    systems = {s["label"]: s for s in results["systems"]}
    columns = _columns(results)
    lines = ["| system | " + " | ".join(columns) + " | missing |", "|---" * (len(columns) + 2) + "|"]
    for label, summary in results["datasets"][dataset]["systems"].items():
        cells = [_cell(summary["scores"][k]) for k in results["score_keys"]]
        lines.append(f"| {_system_name(systems[label])} | " + " | ".join(cells) + f" | {summary['missing']} |")
    return "\n".join(lines)


def paired_table(results: dict, dataset: str) -> str:
    """Reference − system per metric: difference, 95% CI, p-values. Empty when there is a single system."""
    systems = {s["label"]: s for s in results["systems"]}
    compared = [(label, s) for label, s in results["datasets"][dataset]["systems"].items()
                if "paired_vs_reference" in s]
    if not compared:
        return ""
    columns = _columns(results)
    lines = ["| system | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for label, summary in compared:
        paired = summary["paired_vs_reference"]
        cells = [_diff_cell(paired[k]) + (f", McNemar p={paired[k]['mcnemar_p']:.3g}" if "mcnemar_p" in paired[k]
                                          else "") for k in results["score_keys"]]
        lines.append(f"| {_system_name(systems[label])} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def no_answer_table(results: dict, dataset: str) -> str:
    lines = ["| system | threshold | answerable / unanswerable | answered (%) | HasAns F1 (SOQAL) | NoAns accuracy | "
             "overall F1 (SOQAL) | always answering | overall F1 (Arabic) |", "|---|---|---|---|---|---|---|---|---|"]
    for label, row in results["datasets"][dataset]["no_answer"].items():
        soqal, arabic = row["soqal"], row["arabic"]
        no_ans = "-" if row["no_ans_accuracy"] is None else f"{row['no_ans_accuracy']:.1f}"
        lines.append(f"| {label} | {row['threshold']:.2f} | {row['answerable']} / {row['unanswerable']} | "
                     f"{row['answered']:.1f} | {soqal['has_ans_f1']:.1f} | {no_ans} | {_cell(soqal['overall_f1'])} | "
                     f"{soqal['always_answer_f1']:.1f} | {_cell(arabic['overall_f1'])} |")
    return "\n".join(lines)


def breakdown_table(results: dict, dataset: str, field: str) -> str:
    """Arabic-variant F1 per bucket ("by_question_word" or "by_answer_length"), one column per system."""
    entry = results["datasets"][dataset]
    labels = list(entry["systems"])
    buckets = list(dict.fromkeys(b for s in entry["systems"].values() for b in s[field]))
    title = "question word" if field == "by_question_word" else "gold answer words"
    lines = [f"| {title} | n | " + " | ".join(labels) + " |", "|---" * (len(labels) + 2) + "|"]
    for bucket in buckets:
        cells = [f"{s[field][bucket]['arabic_f1']:.1f}" for s in entry["systems"].values()]
        lines.append(f"| {bucket} | {entry['systems'][labels[0]][field][bucket]['n']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def paper_table(results: dict) -> str:
    lines = ["| model (paper) | EM | F1 | SM |", "|---|---|---|---|"]
    lines += [f"| {name} | {r['em']} | {r['f1']} | {r['sm']} |" for name, r in results["paper_table6"]["rows"].items()]
    return "\n".join(lines)


def dataset_note(results: dict, dataset: str) -> str:
    entry = results["datasets"][dataset]
    misaligned = entry["misaligned_gold_ids"]
    sentences = entry["sentences_per_context"]
    return (f"{entry['questions']} questions (`{entry['source']}`)"
            + (f"; {len(misaligned)} gold answer(s) not found at their answer_start, kept ({', '.join(misaligned)})"
               if misaligned else "")
            + f". Sentences per context: {sentences['punkt']:.1f} (Punkt, SOQAL SM) vs {sentences['arabic']:.1f} "
            "(Arabic SM): the fewer the sentences, the easier Sentence-Match.")


def markdown_report(results: dict) -> str:
    config = results["config"]
    parts = [
        "# Side-by-side QA evaluation",
        *([f"**mBERT.** {results['mbert_note']}"] if results.get("mbert_note") else []),
        f"**Metrics.** {results['metric_note']} Values are ×100 means over all questions with 95% bootstrap CIs "
        f"({config['resamples']} resamples, seed {config['seed']}); a missing prediction scores 0.",
        "## Systems", systems_table(results),
    ]
    for dataset in results["datasets"]:
        parts += [f"## {dataset}", dataset_note(results, dataset), scores_table(results, dataset)]
        paired = paired_table(results, dataset)
        if paired:
            parts += [f"Paired differences, {results['reference']} − system (95% CI, two-sided paired-bootstrap p; "
                      "EM also exact McNemar p):", paired]
        if results["datasets"][dataset].get("no_answer"):
            parts += ["No answer in this context (SQuAD 2.0-style; `--no-answer`): each question also paired with "
                      "another paragraph of its article that lacks the answer; models answer with allow_no_answer "
                      "at their dev-chosen threshold.", no_answer_table(results, dataset)]
        parts += ["F1 (Arabic variant) by question word:", breakdown_table(results, dataset, "by_question_word"),
                  "F1 (Arabic variant) by gold answer length in words:",
                  breakdown_table(results, dataset, "by_answer_length")]
    if results.get("no_answer_data"):
        parts += unanswerable_tables(results)
    if results.get("open"):
        parts += open_tables(results)
    if results.get("pretraining"):
        parts += ["## Pretraining runs", "Last logged training values and last held-out evaluation "
                  "(fixed masks on held-out documents) of each run given with --pretraining-log.",
                  pretraining_table(results)]
    same = results["paper_table6"].get("comparable")
    parts += [f"## Reference: the AraBERT paper's Table 6 ({'same protocol' if same else 'not comparable'})",
              results["paper_table6"]["note"], paper_table(results)]
    return "\n\n".join(parts) + "\n"


def csv_report(results: dict) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["dataset", "system", "kind", "variant", "metric", "value", "ci_low", "ci_high", "questions",
                     "missing", "reference", "diff_vs_reference", "diff_low", "diff_high", "p_value", "mcnemar_p"])
    kinds = {s["label"]: s["kind"] for s in results["systems"]}
    for dataset, entry in results["datasets"].items():
        for label, summary in entry["systems"].items():
            for key in results["score_keys"]:
                variant, metric = key.split("_")
                score = summary["scores"][key]
                paired = summary.get("paired_vs_reference", {}).get(key, {})
                writer.writerow([dataset, label, kinds[label], variant, metric, f"{score['mean']:.4f}",
                                 f"{score['low']:.4f}", f"{score['high']:.4f}", summary["questions"],
                                 summary["missing"], results["reference"]]
                                + [f"{paired[k]:.4g}" if k in paired else "" for k in
                                   ("diff", "low", "high", "p_value", "mcnemar_p")])
    for name, row in results["paper_table6"]["rows"].items():
        for metric, value in row.items():
            writer.writerow(["arcd-test (AraBERT paper, Table 6)", name, "published", "soqal", metric, value]
                            + [""] * 10)
    return buffer.getvalue()


PRETRAINING_COLUMNS = (
    ("eval_mlm_loss", "held-out MLM loss"), ("eval_mlm_perplexity", "perplexity"),
    ("eval_mlm_accuracy", "masked accuracy"), ("eval_generator_loss", "held-out generator loss"),
    ("eval_generator_accuracy", "generator accuracy"), ("eval_rtd_loss", "held-out RTD loss"),
    # Accuracy alone flatters a collapsed discriminator (always "original" scores 1 − replaced share): recall shows it.
    ("eval_rtd_accuracy", "RTD accuracy"), ("eval_rtd_recall", "RTD recall"),
    ("eval_span_exact", "span exact"),
)


def pretraining_table(results: dict) -> str:
    runs = results.get("pretraining") or {}
    columns = [(key, name) for key, name in PRETRAINING_COLUMNS if any(key in r["eval"] for r in runs.values())]
    lines = ["| run | steps | tokens | minutes | " + " | ".join(name for _, name in columns) + " |",
             "|---|---:|---:|---:|" + "---:|" * len(columns)]
    for label, run in runs.items():
        cells = [f"{run['eval'][key]:.3f}" if key in run["eval"] else "" for key, _ in columns]
        tokens = f"{run['tokens'] / 1e6:.2f} M" if run.get("tokens") else ""
        lines.append(f"| {label} | {run['steps']} | {tokens} | {run['minutes']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def print_summary(results: dict, stream=None) -> None:
    """One line per dataset × system: the six metrics (×100)."""
    stream = stream or sys.stdout
    for dataset, entry in results["datasets"].items():
        for label, summary in entry["systems"].items():
            cells = " ".join(f"{key}={summary['scores'][key]['mean']:.1f}" for key in results["score_keys"])
            print(f"{dataset:24} {label:20} {cells}  missing={summary['missing']}", file=stream)


# ----------------------------------------------------------------------------------- documents and collections


SETTING_NAMES = {"paragraph": "paragraph given", "documents": "document", "collection": "collection"}
RETRIEVER_LABELS = {"oracle": "—", "bm25": "BM25", "tfidf": "TF-IDF (SOQAL)"}


def _pct(score: dict) -> str:
    return f"{score['mean']:.1f}"


def _setting_name(results: dict, label: str) -> str:
    system = results["open"]["systems"][label]
    documents = next((s["info"].get("documents") for s in results["systems"] if s["label"] == label), None)
    name = SETTING_NAMES[system["setting"]]
    return f"{name}, K={documents}" if documents else name


def open_rows(results: dict, entries: dict) -> list[str]:
    """Rows of the documents-and-collections table: per model its paragraph-given row, then its open systems."""
    systems = results["open"]["systems"]
    lines = ["| model | setting | retriever | characters | EM (SOQAL) | F1 (SOQAL) | SM (SOQAL) | F1 (Arabic) | "
             "ΔF1 (SOQAL) vs paragraph | recall@1 / @5 / @20 | gold read / chosen | ms retrieval | ms a question | "
             "× paragraph |", "|---|---|---|---:|---:|---:|---:|---:|---|---|---|---:|---:|---:|"]
    for label, row in entries.items():
        system = systems[label]
        scores = row["scores"]
        cells = [system["model"], _setting_name(results, label), RETRIEVER_LABELS[system["retriever"]],
                 f"{row['characters']:,.0f}", _pct(scores["soqal_em"]), _cell(scores["soqal_f1"]),
                 _pct(scores["soqal_sm"]), _pct(scores["arabic_f1"])]
        if system["setting"] == "paragraph":
            cells += ["", "", "", "", f"{row['ms']['end_to_end']['mean']:.0f}", "1"]
        else:
            recall = row["recall"]
            paired = row["paired_vs_paragraph"]["soqal_f1"]
            cells += [_diff_cell(paired), " / ".join(_pct(recall[f"@{k}"]) for k in results["open"]["recall_at"]),
                      f"{_pct(recall['read'])} / {_pct(recall['chosen'])}", f"{row['ms']['retrieval']['mean']:.1f}",
                      f"{row['ms']['end_to_end']['mean']:.0f}",
                      "" if row["ms"]["ratio"] is None else f"{row['ms']['ratio']:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def grid_table(results: dict, entries: dict) -> str:
    weights = sorted({cell["null_weight"] for row in entries.values() for cell in row.get("grid", [])})
    lines = ["| system | passages read | " + " | ".join(f"null weight {w:g}" for w in weights) + " | ms a question |",
             "|---|---:|" + "---|" * len(weights) + "---:|"]
    for label, row in entries.items():
        if "grid" not in row:
            continue
        for passages in sorted({cell["passages_read"] for cell in row["grid"]}):
            cells = {cell["null_weight"]: cell for cell in row["grid"] if cell["passages_read"] == passages}
            shown = []
            for weight in weights:
                cell = cells[weight]
                own = passages == row["passages_read"] and weight == row["passage_null_weight"]
                mark = f"**{_cell(cell['soqal_f1'])}** (the model's)" if own else \
                    f"{_cell(cell['soqal_f1'])} ({_diff_cell(cell['vs_model']).split(' p')[0]})"
                shown.append(mark)
            ms = next(iter(cells.values()))["ms"]
            lines.append(f"| {label} | {passages} | " + " | ".join(shown) + f" | {ms:.0f} |")
    return "\n".join(lines)


def no_answer_curve_table(keeps: list[float], entries: dict, negatives: str) -> str:
    """One row per system of `no_answer_summary`s: at the model's threshold, then NoAns accuracy (threshold) at the
    thresholds keeping each share of the answerable answered."""
    lines = [f"| system | answerable / {negatives} | threshold | answered (%) | HasAns F1 (SOQAL) | NoAns accuracy | "
             + " | ".join(f"keeping {100 * k:.0f}%: refused (threshold)" for k in keeps) + " |",
             "|---|---|---:|---:|---:|---|" + "---|" * len(keeps)]
    for label, found in entries.items():
        if not found:
            continue
        at = found["at_model_threshold"]
        curve = {point["keep"]: point for point in found["curve"]}
        cells = [f"{curve[k]['no_ans_accuracy']['mean']:.1f} ({curve[k]['threshold']:.2f})" if k in curve else ""
                 for k in keeps]
        lines.append(f"| {label} | {found['answerable']} / {found['unanswerable']} | {at['threshold']:.2f} | "
                     f"{at['answered']:.1f} | {at['has_ans_f1']['soqal']:.1f} | {_cell(at['no_ans_accuracy'])} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


def unanswerable_tables(results: dict) -> list[str]:
    """The --no-answer-data section of table.md."""
    parts = ["## No answer: unanswerable questions with their paragraph",
             "Each set's questions marked is_impossible, asked of the paragraph they were written against, with "
             "allow_no_answer: no answer where the null margin (no-answer score − best span's) passes the threshold. "
             "Answerable: every --data question, asked of its paragraph. The model's threshold is its "
             "`null_score_diff_threshold`; the curve's thresholds keep a share of the answerable answered."]
    for key, entry in results["no_answer_data"].items():
        drawn = f" (drawn from its {entry['of']:,} with the seed)" if entry["questions"] < entry["of"] else ""
        parts += [f"### {key}", f"{entry['questions']:,} unanswerable questions{drawn} (`{entry['source']}`, "
                  f"licence: {entry['license'] or 'as the file states'}).",
                  no_answer_curve_table(entry["keep_answered"], entry["systems"], "unanswerable")]
    return parts


def open_tables(results: dict) -> list[str]:
    """The documents-and-collections section of table.md (`evaluate --documents / --collection`)."""
    found = results["open"]
    datasets = list(results["datasets"])
    collection = found.get("collection") or {}
    parts = ["## Documents and collections",
             "Each question asked of its paragraph (one at a time, timed), of its article among K others of its set "
             "(documents), and of one collection of every set's paragraphs plus the distractors (collection); read by "
             "each retriever's best passages as `answer` reads them. Recall: the passage holding the answer's start "
             "among the first k (documents), the gold paragraph among the first k passages' documents (collection); "
             "gold read / chosen: among the passages read, the passage the answer came from. ms: one thread's time "
             "a question, retrieval (for a document: its index built and searched) and end to end; × paragraph: "
             "end to end over the paragraph's. Δ: paired against the same model's paragraph-given answers (95% CI, "
             "paired-bootstrap p)."]
    if collection:
        distractors = collection.get("distractors") or {}
        passages = ", ".join(f"{RETRIEVER_LABELS[name]} {count:,}" for name, count in collection["passages"].items())
        lines = distractors.get("paragraph_lines", 0)
        parts.append(f"Collection: {collection['paragraphs']:,} paragraphs of {' + '.join(datasets)} and "
                     f"{distractors.get('documents', 0):,} distractor documents ({lines:,} paragraph lines), "
                     f"{collection['documents']:,} documents in all; passages: {passages}. "
                     f"{collection['withheld_articles']} of {collection['articles']} articles withheld from the "
                     "no-answer collection.")
    parts += [f"Pooled over {' + '.join(datasets)}:", "\n".join(open_rows(results, found["pooled"]))]
    if len(datasets) > 1:
        for dataset in datasets:
            entry = results["datasets"][dataset]
            rows = {label: {**row, "scores": entry["systems"][label]["scores"]}
                    for label, row in entry.get("open", {}).items()}
            parts += [f"{dataset}:", "\n".join(open_rows(results, rows))]
    parts += ["The passages read × the null weight (F1, SOQAL, pooled; in brackets the paired difference to the "
              "model's own setting; `passages_read` and `passage_null_weight` in qa/transformer/settings.py were "
              "chosen on this grid):", grid_table(results, found["pooled"])]
    if any(row.get("no_answer") for row in found["pooled"].values()):
        parts += ["No answer (collection): the questions of the withheld articles asked of the collection without "
                  "them, with allow_no_answer: no answer where the chosen passage's null margin passes the threshold "
                  "(the model's `index_null_threshold`, then the thresholds that keep a share of the answerable "
                  "questions answered). HasAns F1 counts a withheld answer as 0.",
                  no_answer_curve_table(results["open"]["keep_answered"],
                                        {label: row.get("no_answer") for label, row in found["pooled"].items()},
                                        "withheld")]
    return parts
