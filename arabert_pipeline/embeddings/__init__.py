"""Static word embeddings: word2vec and fastText (gensim) on a corpus written by `arabert-pipeline preprocess`, and
the polysemy contrast between them and an encoder's contextual vectors.

    train_embeddings(["runs/corpus/train.arabertv02.txt.xz"], "runs/w2v", model="word2vec", dim=300)
    Embeddings.load("runs/w2v").neighbours("كتاب", k=10)

`train.py` trains and saves (`arabert-pipeline train-embeddings`), `vectors.py` loads without unpickling anything
and answers neighbour queries (`arabert-pipeline neighbours`), `polysemy.py` measures how well static and contextual
vectors separate the senses of Arabic homographs (`scripts/polysemy.py`).
"""
from __future__ import annotations

from .vectors import Embeddings

__all__ = ["Embeddings", "train_embeddings"]


def train_embeddings(*args, **kwargs):
    from .train import train_embeddings as train

    return train(*args, **kwargs)
