"""Writes notebooks/evaluation.ipynb; the cells below are the notebook's source of truth.

    python notebooks/make_evaluation_notebook.py            # the notebook without outputs
    python notebooks/make_evaluation_notebook.py --execute  # run it on $ARABERT_PIPELINE_EVAL_DIR or
                                                            # notebooks/results/table6/test and store the outputs
                                                            # (what is committed)
"""
from __future__ import annotations

import argparse
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

NOTEBOOK = Path(__file__).with_name("evaluation.ipynb")

CELLS = [
    ("md", """\
# Side-by-side evaluation of Arabic QA models

This notebook shows the results of one `arabert-pipeline evaluate` run: the table of Exact Match (EM), F1 and
Sentence-Match (SM) with 95% confidence intervals, the paired comparisons, the plots, and what the numbers mean.
It recomputes nothing: everything is read from the run directory (`results.json`, `plots/`, `per_question/`).

The committed results live in `notebooks/results/`, one folder per experiment, each written by the script named
in its section: `table6/` (`scripts/reproduce_table6.sh`), `default-model/` (`scripts/train_default_model.sh`),
`qa-levers/` (`scripts/qa_levers.sh`), `objectives/` (`scripts/compare_objectives.sh`), `architectures/`
(`scripts/compare_architectures.sh`). The first sections read
`table6/test/` (the test report of the Table 6 comparison; its dev report is in `table6/dev/`); set
`ARABERT_PIPELINE_EVAL_DIR` to read another run there instead. To refresh the notebook after a
script has rewritten its folder:

```
python notebooks/make_evaluation_notebook.py --execute
```"""),
    ("code", """\
import os
from pathlib import Path

from IPython.display import Image, Markdown, display

from arabert_pipeline.evaluate import load, metrics, report, tables

RESULTS = Path("results")  # the committed experiments, beside this notebook
RUN = load.results_dir(default=RESULTS / "table6" / "test")  # or $ARABERT_PIPELINE_EVAL_DIR
results = load.load_results(RUN)
DATASETS = list(results["datasets"])
print("run directory:", os.path.relpath(RUN))
print("datasets:     ", ", ".join(DATASETS))
print("reference:    ", results["reference"], "(paired differences are taken against it)")
display(Markdown(tables.systems_table(results)))"""),
    ("md", """\
**What is compared.** Three encoders that differ only in preprocessing + tokenizer (`scripts/reproduce_table6.sh`,
docs/experiments/table6.md): AraBERTv1-style (Farasa-segmented text, SentencePiece unigram 32k), AraBERTv0.1-style
(normalized unsegmented text, unigram 32k) and "mBERT", which offline means mBERT's cased WordPiece vocabulary
(`shared/data/vocab/mbert-cased-vocab.txt`, 119,547 entries) on raw text, not `bert-base-multilingual-cased`. Each is
the same DeBERTa-v2 L4/H256 pretrained for the same 60 core-minutes on the same corpus, fine-tuned twice (seeds 0
and 1, labels `-s0`, `-s1`) with the same QA recipe, its decoder chosen on dev. The AraBERT paper argues that an
Arabic-specific vocabulary (and Farasa segmentation) beats mBERT's multilingual one; these rows isolate exactly
that variable. Baselines (`first-sentence`, `random-sentence`, `tfidf-sentence`, ...) need no model: they answer with
a whole sentence or a span picked by word overlap and are reference rows, not competitors."""),
    ("md", """\
## Two ways to score an answer

Every metric is computed twice:

* **SOQAL** reimplements SOQAL's `bert/evaluate.py`, the script behind the AraBERT paper's ARCD table, including its
  quirks: it removes *every* "ال" even inside words ("قال الرجل" → "ق رجل"), leaves diacritics, Arabic punctuation
  and alef forms alone (so "الرجل،" ≠ "الرجل" and "مُحَمَّد" ≠ "محمد"), and splits sentences with English Punkt,
  for which "؟" is not a sentence end. Only the first gold answer counts for SM.
* **Arabic** is what the metric means to measure: the article is stripped only as a word prefix (ال، وال، بال، فال،
  كال، لل), diacritics, tatweel and all punctuation are removed, alef / alef maksura / teh marbuta forms are unified,
  sentences also end at "؟" and newlines, and the gold sentence is found at the answer's offset.

The cell below runs both normalizations on a few strings."""),
    ("code", """\
for text in ["قال الرجل", "الرَّجُلُ،", "أحمد إلى القاهرة", "والكتاب للطالب", "The U.S. Army"]:
    print(f"{text:20} SOQAL: {metrics.soqal_normalize(text)!r:24} Arabic: {metrics.arabic_normalize(text)!r}")"""),
    ("md", """\
## Headline results

Each cell is a mean ×100 over **all** questions of the dataset (a question without a prediction scores 0; the
`missing` column counts them) with its 95% bootstrap confidence interval. The bar plot shows the same numbers; the
error bars are the CIs."""),
    ("code", """\
for dataset in DATASETS:
    display(Markdown(f"### {dataset}\\n\\n{tables.dataset_note(results, dataset)}\\n\\n"
                     + tables.scores_table(results, dataset)))
    display(Image(filename=str(RUN / "plots" / f"{dataset}_metrics.png")))"""),
    ("md", """\
## Are the differences real?

Two systems scored on the same questions are compared question by question: the table gives, for every other
system, the reference system's score minus its score, the 95% CI of that difference (questions resampled jointly
for both systems) and a two-sided paired-bootstrap p-value; for EM also the exact McNemar test. Overlapping CIs in
the headline table do not mean "no difference": the paired test is the sharper one, because both systems find the
same questions easy or hard. A difference whose CI excludes 0 (p < 0.05) is unlikely to be resampling noise; it still
says nothing about other datasets or random seeds of fine-tuning."""),
    ("code", """\
for dataset in DATASETS:
    table = tables.paired_table(results, dataset)
    display(Markdown(f"### {dataset}\\n\\n" + (table or "Only one system: nothing to compare.")))"""),
    ("md", """\
## Where the answers go wrong

F1 (Arabic variant) by the question's interrogative and by the length of the gold answer. Buckets are small (see
`n`), so differences of a few points between buckets are noise. Questions asking *when* (متى) or *how many* (كم)
usually have short answers (a date, a number) where a partial span earns little; *why* (لماذا) and *how* (كيف)
answers are long clauses where partial overlap earns partial credit; whole-sentence baselines do well on those."""),
    ("code", """\
for dataset in DATASETS:
    display(Markdown(f"### {dataset}\\n\\n" + tables.breakdown_table(results, dataset, "by_question_word")))
    display(Image(filename=str(RUN / "plots" / f"{dataset}_f1_by_question_word.png")))
    display(Markdown(tables.breakdown_table(results, dataset, "by_answer_length")))
    display(Image(filename=str(RUN / "plots" / f"{dataset}_f1_by_answer_length.png")))"""),
    ("md", """\
## When the two metric variants disagree

The questions of the reference system where SOQAL EM and Arabic EM differ: usually diacritics in the gold answer,
Arabic punctuation at the edge of a span, or "ال" inside a word that SOQAL deletes. Sentence-Match also differs where
a "؟" or a newline separates prediction and answer (same sentence for SOQAL, not for the Arabic variant)."""),
    ("code", """\
def cell(text):
    return (text or "∅")[:60].replace("|", "/").replace("\\n", " ")


reference = results["reference"]
for dataset in DATASETS:
    rows = load.load_per_question(RUN, dataset, reference)
    em = [r for r in rows if r["soqal_em"] != r["arabic_em"]]
    sm = [r for r in rows if r["soqal_sm"] != r["arabic_sm"]]
    lines = [f"### {dataset} ({reference})", "", f"EM differs on {len(em)} of {len(rows)} questions, SM on {len(sm)}."]
    examples = (em[:5] + sm)[:8]
    if examples:
        lines += ["", "| prediction | gold | EM SOQAL | EM Arabic | SM SOQAL | SM Arabic |",
                  "|---|---|---|---|---|---|"]
    for r in examples:
        lines.append(f"| {cell(r['prediction'])} | {cell(r['gold'][0])} | {r['soqal_em']:.0f} | {r['arabic_em']:.0f} "
                     f"| {r['soqal_sm']:.0f} | {r['arabic_sm']:.0f} |")
    display(Markdown("\\n".join(lines)))"""),
    ("md", """\
## How hard is Sentence-Match?

SM only asks for the right sentence, so its floor is high: the first-sentence baseline alone reaches about half
of ARCD-test, and it rises as contexts get shorter. The sentence counts below are per context, for each splitter.
On ARCD-test the first-sentence baseline's SOQAL F1 (14.5 with this repository's data) matches the reference value for
that baseline, a check of the SOQAL reimplementation end to end."""),
    ("code", """\
for dataset, entry in results["datasets"].items():
    sentences = entry["sentences_per_context"]
    baselines = {label: s["scores"] for label, s in entry["systems"].items() if label in report.BASELINES}
    line = ", ".join(f"{label}: SM {v['soqal_sm']['mean']:.1f} (SOQAL) / {v['arabic_sm']['mean']:.1f} (Arabic), "
                     f"F1 {v['soqal_f1']['mean']:.1f} (SOQAL)" for label, v in baselines.items())
    print(f"{dataset}: {sentences['punkt']:.1f} Punkt vs {sentences['arabic']:.1f} Arabic sentences per context; "
          + (line or "no baselines in this run"))"""),
    ("md", """\
## The pretraining behind the models

When the evaluation was run with `--pretraining-log LABEL=RUN/log.jsonl`, the pretraining runs behind the models:
their loss curves against tokens read (lines: training loss, dots: held-out evaluation with fixed masks) and their
last held-out metrics. An ELECTRA run's masked-token loss is that of its small generator, so it is not comparable
with an MLM run's loss; compare objectives by the QA scores above, at equal CPU budget."""),
    ("code", """\
if results.get("pretraining"):
    display(Markdown(tables.pretraining_table(results)))
    display(Image(filename=str(RUN / "plots" / "pretraining.png")))
else:
    print("no pretraining logs in this run (evaluate --pretraining-log LABEL=RUN/log.jsonl)")"""),
    ("md", """\
## Next to the paper's Table 6

The AraBERT paper reports EM / F1 / SM on ARCD-test with SOQAL's script, so the comparable column here is the SOQAL
variant. The settings differ plainly: the paper's models are BERT-base (12 layers, hidden 768) pretrained on ~24 GB
(AraBERT) or 104 Wikipedias (mBERT) and fine-tuned with Arabic-SQuAD's 48k questions; ours are L4/H256 models
pretrained for 60 core-minutes on a 17.7M-word news corpus and fine-tuned offline on ARCD-train (less the arcd-dev
articles) + XQuAD-ar. The question the comparison can answer is whether the *ordering* of vocabularies holds at small
scale, not whether the absolute numbers match."""),
    ("code", """\
paper = results["paper_table6"]
lines = ["| model | EM | F1 | SM | source |", "|---|---|---|---|---|"]
lines += [f"| {name} | {r['em']} | {r['f1']} | {r['sm']} | AraBERT paper, Table 6 |"
          for name, r in paper["rows"].items()]
if "arcd-test" in results["datasets"]:
    for label, summary in results["datasets"]["arcd-test"]["systems"].items():
        s = summary["scores"]
        lines.append(f"| {label} | {s['soqal_em']['mean']:.1f} | {s['soqal_f1']['mean']:.1f} | "
                     f"{s['soqal_sm']['mean']:.1f} | this run, SOQAL variant |")
display(Markdown(paper["note"] + "\\n\\n" + "\\n".join(lines)))"""),
    ("md", """\
### The verdict's evidence: seeds, seed means, tokenization

`pooled.md` pools ARCD-test and TyDiQA-ar dev, paired against the AraBERTv1-style model's first seed, and then
averages each system's two fine-tuning seeds per question before the paired bootstrap (the sharper comparison);
`seeds.md` puts each system's seed spread beside one seed's CI width; `tokenization.md` measures what each tokenizer
does to the test questions (tokens per word, questions that fit one window, answers exact in tokens, answers that
start inside a word). The dev report (`table6/dev/`) shows the same systems on the dev sets their decoders were
chosen on."""),
    ("code", """\
for name in ("pooled.md", "seeds.md", "tokenization.md"):
    if (RUN / name).exists():
        display(Markdown((RUN / name).read_text(encoding="utf-8")))"""),
    ("md", """\
## The shipped default model on the test sets

A second evaluate run (`notebooks/results/default-model/`, written by `scripts/train_default_model.sh`'s evaluation
step): the model that ships in the package (issue 39: a DeBERTa L6/H384 pretrained on lent GPUs, 7.5 minutes and 3
more, fine-tuned on 56,687 synthetic questions from the corpus and then the real training sets, beside the DrQA
reader, "عام" dropped from the front of answers), chosen on dev (next sections), scored once on the test sets next to
the lexical baselines and the previous default (the same weights, "عام" kept), all scored the same way (answers
widened to whole words); with `--no-answer`, SQuAD 2.0-style scores too. Paired differences are against the first
system, the shipped model (its model card: the leading word, chosen on dev)."""),
    ("code", """\
def show_run(directory, plotted="arcd-test"):
    \"\"\"Systems, scores and paired differences (against the run's first system) of another evaluate run.\"\"\"
    if not (directory / "results.json").exists():
        print("no evaluate run at", directory)
        return
    other = load.load_results(directory)
    display(Markdown(tables.systems_table(other)))
    for dataset in other["datasets"]:
        display(Markdown(f"### {dataset}\\n\\n" + tables.scores_table(other, dataset) + "\\n\\n"
                         + tables.paired_table(other, dataset)))
    display(Image(filename=str(directory / "plots" / f"{plotted}_metrics.png")))
    if other.get("pretraining"):
        display(Markdown(tables.pretraining_table(other)))
        display(Image(filename=str(directory / "plots" / "pretraining.png")))
    if (directory / "pooled.md").exists():  # scripts/pooled_table.py: both dev or test sets at once
        display(Markdown((directory / "pooled.md").read_text(encoding="utf-8")))


show_run(RESULTS / "default-model")"""),
    ("md", """\
## The Table 6 comparison on dev

`notebooks/results/table6/dev/`: the encoders of the first sections on arcd-dev + MLQA-ar dev, where each model's
decoder (sentence prior and temperature, answers inside one sentence, expected-F1 decoding) was chosen. Nothing was
chosen after the test report was written."""),
    ("code", """\
show_run(RESULTS / "table6" / "dev", plotted="arcd-dev")"""),
    ("md", """\
## The choice of the shipped default, on dev

The dev report the current default was chosen on (`notebooks/results/default-model-dev/`): the shipped model as it
ships against the previous default (the same weights, "عام" kept) on arcd-dev + MLQA-ar dev; the pooled table with F1
inside the right sentence is in its `pooled.md`. The ablation behind the weights (`notebooks/results/synthetic-qa-dev/`,
docs/experiments/synthetic-qa.md): the GPU encoder on the real sets alone and with the reader, on the synthetic
questions only, synthetic then real alone and with the reader, each with its decoder chosen on the same dev sets;
`answer-types.md` holds the question-word × answer-type table before and after the synthetic stage. The reader trained
on synthetic questions before the real ones, beside the shipped transformer (`notebooks/results/reader-synthetic-dev/`):
no gain on dev, not shipped. The same transformer with a reader on 300-d fastText vectors
(`notebooks/results/reader-ft300-dev/`): level on dev, not shipped. Seeds of the last QA stage from the shipped
weights, souped on dev on a lent GPU (`notebooks/results/soup-dev/soup.json`): every seed fell below its start, and
the soup kept the shipped weights."""),
    ("code", """\
show_run(RESULTS / "default-model-dev", plotted="arcd-dev")
show_run(RESULTS / "synthetic-qa-dev", plotted="arcd-dev")
if (RESULTS / "synthetic-qa-dev" / "answer-types.md").exists():
    display(Markdown((RESULTS / "synthetic-qa-dev" / "answer-types.md").read_text(encoding="utf-8")))
show_run(RESULTS / "reader-synthetic-dev", plotted="arcd-dev")
show_run(RESULTS / "reader-ft300-dev", plotted="arcd-dev")
if (RESULTS / "soup-dev" / "soup.json").exists():
    import json

    soup = json.loads((RESULTS / "soup-dev" / "soup.json").read_text(encoding="utf-8"))["soup"]
    print("dev alone:", {name: round(score, 2) for name, score in soup["dev_alone"].items()})
    print("soups tried:", [(row["added"], round(row["dev"], 2), row["kept"]) for row in soup["tried"]])"""),
    ("md", """\
## Documents and collections: the question without its paragraph (dev; the test sets read once)

`notebooks/results/open-collection/` (`arabert-pipeline evaluate --documents 5 --collection`, the command in
docs/experiments/documents.md): the shipped model asked each arcd-dev and MLQA-ar dev question of its paragraph (the
oracle), of its article among five others of its set (a document of about 10,000 characters, read by its best
passages as `answer` reads a long context), and of one collection of both sets' paragraphs and 50,000 news paragraph
lines (as `answer --index` reads it), by the package's BM25 and by SOQAL's TF-IDF. Recall of the gold passage or
paragraph, end-to-end time a question on one thread against the paragraph's, the grid of passages read × null weight
that chose the shipped `passages_read` and `passage_null_weight`, and questions whose article the collection lacks,
which should get no answer. `notebooks/results/open-collection-test/`: the same once on ARCD-test and TyDiQA-ar dev
for the shipped settings (nothing chosen on it). Then `notebooks/results/no-answer-aqad/` (`evaluate --no-answer
--no-answer-data aqad-unanswerable`): the same no-answer threshold on 1,000 of AQAD's unanswerable questions, each
asked of its own paragraph."""),
    ("code", """\
def show_open(directory):
    \"\"\"The documents-and-collections tables and plot of an evaluate run.\"\"\"
    if not (directory / "results.json").exists():
        print("no evaluate run at", directory)
        return
    run = load.load_results(directory)
    if not run.get("open"):
        print("no documents or collection in", directory)
        return
    for part in tables.open_tables(run):
        display(Markdown(part))
    if (directory / "plots" / "open.png").exists():
        display(Image(filename=str(directory / "plots" / "open.png")))


show_open(RESULTS / "open-collection")
show_open(RESULTS / "open-collection-test")
if (RESULTS / "no-answer-aqad" / "results.json").exists():
    for part in tables.unanswerable_tables(load.load_results(RESULTS / "no-answer-aqad")):
        display(Markdown(part))"""),
    ("md", """\
## Answer-quality levers, chosen on dev

`scripts/qa_levers.sh` (`notebooks/results/qa-levers/`): one pretrained encoder (the shipped model's) fine-tuned with
one lever changed at a time (span-selection pretraining among them), each scored on the dev split only — arcd-dev
(15 of ARCD-train's articles, never trained on) and MLQA-ar dev — with plain decoding and with the sentence prior;
then the decoding levers on the chosen run's weights: answers kept inside one sentence (+sentence) and expected-F1
decoding (+ef1). ARCD-test and TyDiQA-ar dev are not read here. Paired differences are against the first system, the
previous recipe (2 epochs, plain decoding)."""),
    ("code", """\
show_run(RESULTS / "qa-levers", plotted="arcd-dev")"""),
    ("md", """\
## Objectives at equal CPU budget: MLM vs ELECTRA, each with and without span selection

`scripts/compare_objectives.sh` (`notebooks/results/objectives/`): two L4/H256 models pretrained side by side, one
core each, for the same wall-clock minutes on the shipped model's corpus and tokenizer (MLM as the shipped recipe;
ELECTRA at ELECTRA-Small's learning rate with separate generator/discriminator embeddings), then each continued by
span-selection pretraining for the same minutes, all four fine-tuned with the `offline` protocol. Paired differences
are against the first system, MLM."""),
    ("code", """\
show_run(RESULTS / "objectives")"""),
    ("md", """\
## Architectures at equal CPU budget: BERT-MLM vs DeBERTa-MLM vs DeBERTaV3

`scripts/compare_architectures.sh` (`notebooks/results/architectures/`): three L4/H256 encoders on the shipped
model's corpus and tokenizer, pretrained one after the other for the same wall-clock minutes on one core each —
BERT with MLM, DeBERTa-v2 with MLM and its enhanced mask decoder, DeBERTaV3 (a DeBERTa generator and discriminator,
replaced-token detection, gradient-disentangled embedding sharing) — each fine-tuned with the shipped model's recipe
(without AQAD) and decoded with its decoder (sentence prior chosen on dev, answers within one sentence, expected F1).
Chosen on dev (first table), reported on ARCD-test and TyDiQA-GoldP-ar dev (second). Paired differences are against
the first system, BERT-MLM."""),
    ("code", """\
show_run(RESULTS / "architectures" / "dev", plotted="arcd-dev")"""),
    ("code", """\
show_run(RESULTS / "architectures" / "test")"""),
    ("md", """\
## The seeds' other objectives: SpanBERT and XLNet at equal CPU budget

`scripts/compare_architectures.sh` with `NAMES="bert-mlm bert-span bert-span-sbo xlnet-plm"`
(`notebooks/results/seed-objectives/`): BERT with MLM (the reference), BERT with SpanBERT's span masking without and
with its span boundary objective, and XLNet with permutation language modelling, pretrained one after the other for
the same wall-clock minutes on one core each, fine-tuned and decoded as above (XLNet without the question-overlap
token type, which its segment embeddings cannot take). Dev first, then the test sets; paired differences against
BERT-MLM (docs/experiments/seed-objectives.md)."""),
    ("code", """\
show_run(RESULTS / "seed-objectives" / "dev", plotted="arcd-dev")"""),
    ("code", """\
show_run(RESULTS / "seed-objectives" / "test")"""),
    ("md", """\
## Static vectors as a transformer's first token embeddings (dev only)

`pretrain --init-embeddings` (`notebooks/results/static-init/dev/`): two DeBERTa mini encoders pretrained 400 steps
each, one from random token embeddings, one from the word2vec vectors of the shipped reader (projected and rescaled),
fine-tuned and decoded the same way; dev only, a lever for the next default (docs/experiments/static-init.md)."""),
    ("code", """\
show_run(RESULTS / "static-init" / "dev", plotted="arcd-dev")"""),
    ("md", """\
## A longer-pretrained encoder from word2vec (dev only, not shipped)

`notebooks/results/encoder-w2v-100min-dev/`: the shipped recipe on a DeBERTa mini pretrained 100 minutes from word2vec
token embeddings (held-out MLM loss 4.18 against the shipped encoder's 5.12), with the shipped reader re-weighed on
dev, against the default of the time ("arabert-mini (shipped)": the reader trained 10 epochs) and that reader alone.
Level on dev, so the test sets were not read for it (docs/experiments/reader-companion.md)."""),
    ("code", """\
show_run(RESULTS / "encoder-w2v-100min-dev", plotted="arcd-dev")"""),
    ("md", """\
## The encoder pretrained 60 minutes more, and task-adaptive pretraining (dev only, not shipped)

`notebooks/results/encoder-longer-dev/`: the same recipe on the 100-minute encoder pretrained 60 minutes more on the
news corpus (160 minutes in all, held-out MLM loss 3.96), and on that encoder after 15 minutes of MLM on the QA
training sets' own paragraphs (`export-contexts`), each with the shipped reader re-weighed on dev, against the
100-minute candidate, the default of the time ("arabert-mini (shipped)": the reader trained 10 epochs) and that reader
alone. Both level with it on dev, so the test sets were not read for them (docs/experiments/reader-companion.md)."""),
    ("code", """\
show_run(RESULTS / "encoder-longer-dev", plotted="arcd-dev")"""),
    ("md", """\
## The longer-pretrained encoder beside the shipped 20-epoch reader (dev only, not shipped)

`notebooks/results/encoder-longer-dev/with-20-epoch-reader/`: the 160-minute encoder's QA model with the reader the
shipped model uses (trained 20 epochs) weighed beside it on dev, against the shipped model and that reader alone.
Level with the shipped model (−0.5 [−2.2, +1.1]), so the test sets were not read for it
(docs/experiments/reader-companion.md)."""),
    ("code", """\
show_run(RESULTS / "encoder-longer-dev" / "with-20-epoch-reader", plotted="arcd-dev")"""),
    ("md", """\
## A second seed of the 20-epoch reader (dev only)

`notebooks/results/reader-seeds-dev/`: the shipped transformer with a reader trained 20 epochs with seed 7 instead of
the shipped seed 42, weighed on dev the same way, against the shipped model and the previous default (10 epochs, seed
42): how much of the shipped model's dev gain a different seed keeps (docs/experiments/reader-companion.md)."""),
    ("code", """\
show_run(RESULTS / "reader-seeds-dev", plotted="arcd-dev")"""),
    ("md", """\
## AraBERT's other tasks: sentiment and named entities

`scripts/tasks_experiments.sh` (`notebooks/results/sentiment/`, `notebooks/results/ner/`): the previous default's
mini encoder (DeBERTa L4/H256, `arabert-mini` as of commit `ac94850`) fine-tuned for ArSarcasm-v2 sentiment (F1-PN,
the shared task's metric; dev = 10% of its training tweets, stratified, seed 0) and for ANERcorp named entities (the
AraBERT authors' split; entity micro- and macro-F1 as seqeval scores them), its epoch chosen on dev, exported to the
int8 ONNX form the package ships. Each folder holds the int8-vs-fp32 check on dev (`dev-int8-check/`), then one
`evaluate --task` run over dev and test (`report/`) with the baselines fitted on train and chosen on dev: TF-IDF of
word and character n-grams with logistic regression and the majority class; a CRF, a BiLSTM over static word2vec
vectors and the most frequent tag. Paired differences are against the then-shipped int8 model. Both mini models lose
to the best baseline on test (docs/experiments/tasks.md). The mBERT-vocabulary encoder of the Table 6 comparison is
in the last section (scripts/tasks_vocabularies.sh)."""),
    ("code", """\
import json


def show_task(directory):
    \"\"\"A task experiment's int8 check on dev, its dev + test report and its fine-tuning speed.\"\"\"
    tables = [directory / part / "table.md" for part in ("dev-int8-check", "dev", "report")]
    if not any(table.exists() for table in tables):
        print("no evaluate run in", directory)
    for table in filter(Path.exists, tables):
        display(Markdown(f"### {directory.name}: {table.parent.name}\\n\\n" + table.read_text(encoding="utf-8")))
    summary = directory / "finetuning.json"
    if summary.exists():
        s = json.loads(summary.read_text(encoding="utf-8"))
        print(f"fine-tuning: {s['train_examples']:,} texts or sentences, {s['steps']} steps in {s['seconds']:.0f} s "
              f"({s['rows_per_second']} rows/s, {s['tokens_per_second']} tokens/s), peak RSS {s['peak_rss_gib']} GiB;"
              f" dev {s['dev_metric']} per epoch {[round(x, 2) for x in s['dev_scores']]}, epoch {s['epoch']} kept")


show_task(RESULTS / "sentiment")"""),
    ("code", """\
show_task(RESULTS / "ner")"""),
    ("md", """\
### Sarcasm (not shipped)

`scripts/tasks_experiments.sh RUNS sarcasm` (`notebooks/results/sarcasm/`): the same mini encoder and setting as
sentiment, the epoch chosen on dev by the shared task's metric (F1 of the sarcastic class), stopped after one epoch
without progress; the int8 check on dev, then one report over dev and test with the TF-IDF and majority baselines.
Level with TF-IDF on both (docs/experiments/tasks.md). The report labels the int8 form "(shipped)", the script's name
for the form it checks; this model stays in the runs directory."""),
    ("code", """\
show_task(RESULTS / "sarcasm")"""),
    ("md", """\
### From the shipped QA model's encoder (L6/H384), and the NER model shipped in 4-bit

`scripts/tasks_larger_encoder.sh` (`notebooks/results/sentiment-L6/`, `notebooks/results/ner-L6/`,
`notebooks/results/ner-L6-4bit/`): the same two tasks from the GPU-pretrained DeBERTa L6/H384 encoder, in int8
(33 MB: over the 20 MB a shipped model may take), then the NER model with 4-bit weights (`export-onnx --standalone DIR
--weight-bits 4`, 15 MB), checked against int8 on dev (`dev/`) and read once on test as the shipped `arabert-ner`
(`report/`). NER beats the CRF on test; sentiment stays under TF-IDF."""),
    ("code", """\
for name in ("sentiment-L6", "ner-L6", "ner-L6-4bit"):
    show_task(RESULTS / name)"""),
    ("md", """\
### AraBERT's vocabulary against mBERT's on the tasks (the Table 6 encoders)

`scripts/tasks_vocabularies.sh` (`notebooks/results/tasks-vocabularies/`): the three encoders of the Table 6
comparison (DeBERTa-v2 L4/H256, 60 core-minutes of pretraining each: Farasa-segmented text with a unigram vocabulary,
unsegmented text with a unigram vocabulary, raw text with mBERT's WordPiece vocabulary) fine-tuned with the mini
recipe for sentiment and NER, their epochs chosen on dev, then one evaluate run per task over dev and test with the
baselines; paired differences against the AraBERTv0.1-style model."""),
    ("code", """\
def show_table(table, heading=""):
    \"\"\"One evaluate run's table.md, under an optional heading.\"\"\"
    if not table.exists():
        print("no evaluate run at", table.parent)
        return
    display(Markdown((f"### {heading}\\n\\n" if heading else "") + table.read_text(encoding="utf-8")))


for name in ("sentiment", "ner"):
    show_table(RESULTS / "tasks-vocabularies" / name / "table.md", heading=name)"""),
    ("md", """\
### Task-adaptive pretraining for sentiment (not shipped)

`notebooks/results/sentiment-tapt/` (the commands are in docs/experiments/tasks.md): the shipped sentiment model's
encoder given 8 CPU-minutes of MLM on the training tweets, then the same fine-tuning; one evaluate run over dev and
test against the shipped model and the baselines. Level with the shipped model, under TF-IDF on test."""),
    ("code", """\
show_table(RESULTS / "sentiment-tapt" / "report" / "table.md")
if (RESULTS / "sentiment-tapt" / "tapt.json").exists():
    print(json.loads((RESULTS / "sentiment-tapt" / "tapt.json").read_text(encoding="utf-8")))"""),
    ("md", """\
### A lexical companion for sentiment (shipped)

`scripts/tasks_experiments.sh RUNS sentiment-lexical` (`notebooks/results/sentiment-lexical/`): the shipped int8
sentiment model with a TF-IDF companion (`add-lexical`: word and character n-grams, logistic regression), its
probabilities averaged with the encoder's at a weight chosen on dev; one evaluate run over dev and test against the
encoder alone and the baselines. +2.0 over the encoder alone on test, level with TF-IDF; now shipped."""),
    ("code", """\
show_table(RESULTS / "sentiment-lexical" / "report" / "table.md")
if (RESULTS / "sentiment-lexical" / "bench.json").exists():
    speed = json.loads((RESULTS / "sentiment-lexical" / "bench.json").read_text(encoding="utf-8"))["tasks"]["sentiment"]
    print({side: round(speed["cold_start"][side]["cold_start_s"], 2) for side in ("ours", "hf")},
          {name: round(row["texts_per_s_batch32"]) for name, row in speed["systems"].items()})"""),
]


def build() -> nbformat.NotebookNode:
    # Fixed cell ids keep regenerated notebooks diff-friendly.
    cells = [(new_markdown_cell if kind == "md" else new_code_cell)(text, id=f"cell-{i:02d}")
             for i, (kind, text) in enumerate(CELLS)]
    notebook = new_notebook(cells=cells)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    notebook.metadata["language_info"] = {"name": "python"}
    return notebook


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--execute", action="store_true", help="run the notebook and keep its outputs")
    args = parser.parse_args()
    notebook = build()
    if args.execute:
        from nbclient import NotebookClient

        NotebookClient(notebook, timeout=300, resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    nbformat.validate(notebook)
    nbformat.write(notebook, str(NOTEBOOK))
    print(f"wrote {NOTEBOOK}")


if __name__ == "__main__":
    main()
