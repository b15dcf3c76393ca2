"""The static reader: a reader without a pretrained transformer, DrQA's document reader (Chen et al. 2017) over the
static word vectors of `train-embeddings`, laid out as DrQA's `drqa/reader/` is, one concern a module:

    config.py    ReaderConfig (a field per `train-reader` flag) and the reader's files
    features.py  words, their features and the gold spans, through the vectors' preprocessing
    model.py     the network (Reader, on finetuning/rnn.py's StackedBiLSTM) and span decoding (best_spans)
    train.py     ReaderTrainer on the training engine (finetuning.FinetuneEngine): `train-reader`
    predict.py   StaticReader: a trained reader loaded, checked and answering: `reader-predict`
    cli.py       the two verbs

It reads the shared contract (qa/data.py, align.py, overlap.py, leakage.py, metrics.py) and nothing of the
transformer reader, which uses it in turn as its companion (qa/transformer/companion.py).
"""
