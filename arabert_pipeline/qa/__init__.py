"""QA stage: SQuAD v1.1 data and registry (data.py), exact answer alignment through the model's preprocessing
(align.py), sliding windows (features.py), n-best span decoding (postprocess.py), inference returning spans of the
original context (infer.py: QAModel, Answer, predict_dataset), fine-tuning (finetune.py), train/eval leakage
(leakage.py) and the `finetune` verb (cli.py). Import the submodules; this package imports nothing heavy.
"""
