"""Pretraining stage: BERT or DeBERTa pretraining (MLM, ELECTRA/DeBERTaV3, span selection), or XLNet's permutation
language modelling, on a preprocessed corpus.

    from arabert_pipeline.pretrain.config import PretrainConfig
    from arabert_pipeline.pretrain.trainer import pretrain
    pretrain(PretrainConfig(tokenizer="runs/tok", corpus=["corpus.txt"], output="runs/mini", model_size="mini"))

Files, in reading order: config.py (options, size presets), data.py (token cache, packing, batch plan),
objectives.py (registry; how to add an objective), mlm.py (BERT masking, masked-only head), deberta.py (DeBERTa
encoder settings, enhanced mask decoder), electra.py, span_selection.py, xlnet.py (permutation LM), trainer.py (loop,
checkpoints, multi-GPU launch commands), cli.py (`arabert-pipeline pretrain`).
"""
