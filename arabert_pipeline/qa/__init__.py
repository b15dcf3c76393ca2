"""The question-answering stage, laid out along its data flow (dependencies one way, top to bottom; the contract is
pyproject.toml's [tool.importlinter]):

The shared contract, which both readers, `evaluate` and the scripts read:
    data.py        SQuAD v1.1 files and the registry of Arabic QA sets; a run's sets read and guarded
                   (read_squad_sets, through finetuning/sets.py)
    align.py       gold answers through a preprocessing's offset map (QAPreprocessing, AlignedText)
    overlap.py     words a question and a context share (match keys, IDF, sentence overlap)
    leakage.py     contexts and questions of training data found in evaluation data
    metrics.py     EM / F1 / Sentence-Match, SOQAL-compatible and Arabic-correct; DEV_METRIC, the one dev metric
    synthetic.py   typed synthetic QA from an unlabelled corpus (`make-synthetic-qa`); cloze.py: its questions
    contexts.py    training sets' paragraphs as a pretraining corpus (`export-contexts`)

static/        the static reader: DrQA's document reader over static word vectors (`train-reader`, `reader-predict`)
transformer/   the transformer reader: fine-tuning, settings, the torch and ONNX backends, decoding, tuning, export
               (`finetune`, `tune-decoding`, `export-onnx`); the static reader joins it as its companion
cli.py         every QA verb, registered in this order

What QA shares with the other fine-tuning tasks (set reading and the leakage policy, the engine hook, ONNX export
and runtime, the recorded-preprocessing check) is in finetuning/. Import the submodules; this package imports nothing
heavy.
"""
