"""Sequence classification (sentiment, sarcasm, any single-label task) beside qa/, on what every fine-tuning task
shares (finetuning/): AraBERT's second kind of task.

    data.py       labelled texts: CSV / TSV / JSON lines files, ArSarcasm-v2 and its seeded stratified dev split
    metrics.py    accuracy, macro-F1, F1-PN, per-class F1, from confusion matrices (bootstrap-ready)
    model.py      TextClassifier (torch) and OnnxTextClassifier (ONNX Runtime, no torch): texts → probabilities
    finetune.py   `finetune --task classification` on the engine (finetuning/tasktrainer.py)
    baselines.py  the reference rows: TF-IDF word + character n-grams with logistic regression, the majority class
    lexical.py    a classifier's TF-IDF companion, averaged with it at answer time
    addlexical.py `add-lexical`: the companion fitted, weighed on dev and written beside the model
    cli.py        the task's flags of `finetune`; `add-lexical`
"""
