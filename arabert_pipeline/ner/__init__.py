"""Named entity recognition beside qa/, on what every fine-tuning task shares (finetuning/): AraBERT's third kind of
task.

    data.py       CoNLL token<TAB>tag files and the registered ANERcorp split; BIO checked (or repaired, counted)
    align.py      words ↔ tokens through the preprocessing's offset map; labels on each word's first sub-token
    metrics.py    entity-level micro / macro / per-type F1 as seqeval scores them (bootstrap-ready counts)
    model.py      TokenTagger (torch) and OnnxTokenTagger (ONNX Runtime, no torch): words → tags, text → entities
    finetune.py   `finetune --task ner` on the engine (finetuning/tasktrainer.py)
    baselines.py  the reference rows: most frequent tag, a CRF over word-shape and affix features, a BiLSTM over
                  static word vectors
    cli.py        the task's flags of `finetune`
"""
