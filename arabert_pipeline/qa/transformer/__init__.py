"""The transformer reader: a pretrained encoder fine-tuned for extractive QA, along its data flow.

    config.py            FinetuneConfig (a field per `finetune` flag) and the named protocols
    features.py          question + preprocessed context → windows (and batches of them, `collate`)
    architectures.py     what differs per encoder architecture (XLNet)
    finetune.py          QATrainer on the training engine (finetuning.FinetuneEngine): `finetune`
    settings.py          QASettings: the windows and the decoding, stored in the model dir; their ranges
    model.py             QAModel: prepare → windows → logits → decode, and the torch backend
    onnx.py              OnnxQAModel: the ONNX Runtime backend (no torch)
    decode.py            window logits → answers: n-best spans, expected-F1 ranking, probabilities, whole words
    bonuses.py           what span scores may add: the sentence prior, the reader companion
    companion.py         the static reader (qa/static/) beside the transformer, exported to ONNX in MODEL_DIR/reader/
    calibration.py       answer scores mapped to the dev rate of right answers
    tune.py              decoding settings, no-answer threshold and calibration chosen on dev: `tune-decoding`
    export.py            the model's forward as model.onnx: `export-onnx`
    cli.py               the verbs above
"""
