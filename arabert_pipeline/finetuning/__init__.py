"""What every fine-tuning task shares, written once. Question answering (qa/) is the first task; sequence
classification and named entities (issue 40) are the next, as packages beside it (classification/, ner/: the layer
contract in pyproject.toml already names them), each importing this package and none importing another task.

    sets.py       reading a run's training, dev, evaluation and held-out sets through the task's reader, and the
                  leakage policy (refuse / drop / allow) on the training sets
    selection.py  FinetuneEngine: the training engine's hook for a task (the epoch kept by the dev metric, early
                  stopping, the best weights, the schedule's length)
    modeldir.py   a fine-tuned model dir's metadata (local or hub) and the recorded-preprocessing check
    export.py     a model dir's forward as model.onnx reading its weights from model.safetensors, checked against torch
    runtime.py    ONNX Runtime sessions for the answering backends (threads, stale exports refused, int8 copies)
    weightscli.py `arabert-pipeline weights`: a model dir's weights as a plain transformers checkpoint, or in int8 rows
    rnn.py        DrQA's stacked BiLSTM, shared by the static QA reader and the NER BiLSTM baseline

A task supplies its data format and reader, its leakage finder, its model head, its metric and its decoding; the
Pipeline backends run its graph through runtime.py. Import the submodules; this package imports nothing heavy.
"""
