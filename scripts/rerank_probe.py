"""Issue 25, lever 4, measured: does a reranker over the decoder's candidate spans find the answer inside the sentence?

    ARABERT_PIPELINE_DATA=../shared/data python scripts/rerank_probe.py arabert_pipeline/models/arabert-mini \
        --dev arcd-dev mlqa-ar-dev --train arcd-train-rest xquad-ar > docs/experiments/rerank-probe.txt

The shipped model's answers are twice as long as the gold ones (median 8 words against 4), and its 200 candidates
hold a span of far higher F1 than the one it answers with (the oracle). This probe re-scores each candidate as

    w_score × (the decoder's score: logits + sentence prior + reader) + Σ_k w_k × feature_k(question, span)

with features a reader checks by eye (FEATURES): how many words the span has, whether it repeats the question, whether
it starts or ends on a function word or at a clause boundary, how far it is from the question's words in its
sentence, and whether its type agrees with the question word (a date for متى, a number for كم, ...); then decodes as
the model does (expected F1 over the softmax of the new scores, at the temperatures of tune-decoding's grid).

Fitted three ways, each judged on dev questions the weights were not fitted on (5 folds by article over the pooled dev
sets, or fitted on the training questions and scored on all of dev):
- listwise, maximizing the expected F1 of the candidates under softmax(scores) (non-convex, started from the decoder);
- listwise, the cross-entropy of softmax(scores) against the candidates' F1^p (convex);
- pointwise, a ridge regression / gradient-boosted trees predicting each candidate's F1 from the features, the score
  gap to the best candidate, its rank and its expected F1 under the decoder's distribution; the answer is the argmax.
Single features added to the decoder with a fixed weight are scanned too. Nothing here ships: the numbers decided
that (docs/experiments/reader-companion.md, "A reranker over the candidates").
"""
from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence

import numpy as np

from arabert_pipeline.qa.overlap import STOPWORDS, match_keys, normalize_word, question_keys, sentence_spans

_WORD_RE = re.compile(r"\S+")
# Months (Gregorian in both the Egyptian and the Levantine names, Hijri) and words that make a span a date or a period.
_DATE_WORDS = frozenset(normalize_word(w) for w in """
    يناير فبراير مارس ابريل أبريل مايو يونيو يونيه يوليو يوليه أغسطس اغسطس سبتمبر أكتوبر اكتوبر نوفمبر ديسمبر
    كانون شباط آذار نيسان أيار حزيران تموز آب أيلول تشرين محرم صفر ربيع جمادى رجب شعبان رمضان شوال القعدة الحجة
    عام العام سنة السنة سنوات القرن قرن هـ ه م ق.م ميلادي الميلادي هجري الهجري الميلادية الهجرية""".split())
_DIGIT_RE = re.compile(r"[0-9\u0660-\u0669\u06f0-\u06f9]")
_NUMBER_WORDS = frozenset(normalize_word(w) for w in """
    واحد اثنان اثنين ثلاث ثلاثة أربع أربعة خمس خمسة ست ستة سبع سبعة ثمان ثمانية تسع تسعة عشر عشرة عشرين عشرون
    ثلاثين أربعين خمسين مائة مئة مئات ألف آلاف الف مليون ملايين مليار نصف ربع ثلث""".split())
# The question's first question word (after a proclitic و/ف and a preposition), as a type of answer expected.
_QUESTION_WORDS = {
    "متي": "when", "كم": "how_many", "من": "who", "اين": "where", "ما": "what", "ماذا": "what", "ماهو": "what",
    "ماهي": "what", "اي": "which", "ايه": "which", "كيف": "how", "لماذا": "why", "لم": "why", "هل": "yes_no",
}
QUESTION_TYPES = ("when", "how_many", "who", "where", "what", "which", "how", "why", "yes_no", "other")
# Words in a question that ask for a date or a number whatever its question word ("في أي عام", "ما عدد").
_ASKS_DATE = frozenset(normalize_word(w) for w in "عام سنة السنة العام تاريخ قرن القرن يوم شهر".split())
_ASKS_NUMBER = frozenset(normalize_word(w) for w in "عدد نسبة مساحة طول ارتفاع عمر كمية مسافة".split())
_LENGTH_BUCKETS = ((1, 1), (2, 2), (3, 3), (4, 5), (6, 8), (9, 10_000))
_BOUNDARY_PUNCTUATION = frozenset(",.;:!?،؛؟…()[]«»\"'-–—")
_ANSWER_TYPES = ("digit", "date_word", "number_word", "log_words")
_LENGTH_NAMES = tuple(f"words_{low}" if low == high else f"words_{low}_{min(high, 99)}"
                      for low, high in _LENGTH_BUCKETS)

FEATURES: tuple[str, ...] = (
    "score",
    *_LENGTH_NAMES,
    "question_word_share", "starts_with_function_word", "ends_with_function_word",
    "after_boundary", "before_boundary", "log_distance_to_question_word", "no_question_word_in_sentence",
    "asks_date_x_digit", "asks_date_x_date_word", "asks_number_x_digit", "asks_number_x_number_word",
    *(f"{kind}_x_{answer}" for kind in QUESTION_TYPES for answer in _ANSWER_TYPES),
)
_INDEX = {name: i for i, name in enumerate(FEATURES)}


def question_type(question: str) -> str:
    """The answer type a question's first question word asks for (QUESTION_TYPES); "other" when it has none."""
    for word in question.split()[:4]:
        word = normalize_word(word)
        for candidate in (word, word[1:] if word[:1] in "وف" else None):
            if candidate in _QUESTION_WORDS:
                return _QUESTION_WORDS[candidate]
    return "other"


def span_features(question: str, context: str, spans: Sequence[tuple[int, int]],
                  scores: Sequence[float]) -> np.ndarray:
    """(candidates × FEATURES) for spans [start, end) of `context` (whole words) with their decoder scores."""
    x = np.zeros((len(spans), len(FEATURES)), dtype=np.float64)
    if not spans:
        return x
    x[:, _INDEX["score"]] = scores
    words = [(m.start(), m.end(), m.group()) for m in _WORD_RE.finditer(context)]
    word_starts = np.asarray([s for s, _, _ in words], dtype=np.int64)
    word_ends = np.asarray([e for _, e, _ in words], dtype=np.int64)
    keys = question_keys(question)
    matches = np.asarray([bool(keys) and not keys.isdisjoint(match_keys(w)) for _, _, w in words], dtype=bool)
    normalized = [normalize_word(w) for _, _, w in words]
    function_word = np.asarray([n in STOPWORDS or not n for n in normalized], dtype=bool)
    sentence_of_word = np.zeros(len(words), dtype=np.int64)
    for number, (start, end) in enumerate(sentence_spans(context)):
        sentence_of_word[(word_starts >= start) & (word_starts < end)] = number
    kind = question_type(question)
    question_words = {normalize_word(w) for w in question.split()}
    asks_date = kind == "when" or bool(question_words & _ASKS_DATE)
    asks_number = kind == "how_many" or bool(question_words & _ASKS_NUMBER)
    for row, (start, end) in enumerate(spans):
        first = int(np.searchsorted(word_ends, start, side="right"))
        stop = max(int(np.searchsorted(word_starts, end, side="left")), first + 1)
        n = stop - first
        for (low, high), name in zip(_LENGTH_BUCKETS, _LENGTH_NAMES, strict=True):
            if low <= n <= high:
                x[row, _INDEX[name]] = 1.0
        content = ~function_word[first:stop]
        if content.any():
            x[row, _INDEX["question_word_share"]] = matches[first:stop][content].mean()
        x[row, _INDEX["starts_with_function_word"]] = function_word[first]
        x[row, _INDEX["ends_with_function_word"]] = function_word[stop - 1]
        before = context[:start].rstrip()
        x[row, _INDEX["after_boundary"]] = not before or before[-1] in _BOUNDARY_PUNCTUATION \
            or sentence_of_word[first] != sentence_of_word[max(first - 1, 0)] or first == 0
        after = context[end:].lstrip()
        x[row, _INDEX["before_boundary"]] = not after or after[0] in _BOUNDARY_PUNCTUATION \
            or context[end - 1] in _BOUNDARY_PUNCTUATION
        same_sentence = np.flatnonzero(matches & (sentence_of_word == sentence_of_word[first]))
        outside = same_sentence[(same_sentence < first) | (same_sentence >= stop)]
        if outside.size:
            distance = np.minimum(np.abs(outside - first), np.abs(outside - (stop - 1))).min()
            x[row, _INDEX["log_distance_to_question_word"]] = math.log1p(distance)
        else:
            x[row, _INDEX["no_question_word_in_sentence"]] = 1.0
        text = context[start:end]
        answer = {"digit": float(bool(_DIGIT_RE.search(text))),
                  "date_word": float(any(w in _DATE_WORDS for w in normalized[first:stop])),
                  "number_word": float(any(w in _NUMBER_WORDS for w in normalized[first:stop])),
                  "log_words": math.log(n)}
        for name, value in answer.items():
            x[row, _INDEX[f"{kind}_x_{name}"]] = value
        x[row, _INDEX["asks_date_x_digit"]] = asks_date * answer["digit"]
        x[row, _INDEX["asks_date_x_date_word"]] = asks_date * answer["date_word"]
        x[row, _INDEX["asks_number_x_digit"]] = asks_number * answer["digit"]
        x[row, _INDEX["asks_number_x_number_word"]] = asks_number * answer["number_word"]
    return x


@dataclasses.dataclass
class Question:
    """One question's candidates (best decoder score first): spans of the original context, features, and each
    candidate's SOQAL F1 against the gold answers (after the end-punctuation trim answers get)."""

    context: str
    spans: list[tuple[int, int]]
    features: np.ndarray
    f1: np.ndarray
    group: str  # its data set and article: cross-validation folds never split an article


def collect(qa, names: Sequence[str]) -> list[Question]:
    """Every candidate the QAModel's decoder weighs (its dev-chosen settings) for the questions of the named sets."""
    from arabert_pipeline.qa.data import read_squad
    from arabert_pipeline.qa.metrics import soqal_normalize, token_f1
    from arabert_pipeline.qa.transformer.decode import trim_spans

    questions = []
    for name in names:
        dataset = read_squad(name, misaligned="keep")
        logits = qa.logits(dataset.examples, 32)
        found = qa.candidates(logits, every_candidate=True)
        for example, (question, aligned), answers in zip(dataset.examples, logits.prepared, found, strict=True):
            context, spans = aligned.original, [(a.start, a.end) for a in answers]
            bounds = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
            starts, ends = trim_spans(context, bounds[:, 0], bounds[:, 1])
            f1 = [max(token_f1(context[s:e], gold, soqal_normalize, empty_matches_empty=False)
                      for gold in example["answers"]["text"])
                  for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]
            questions.append(Question(context, spans, span_features(question, context, spans,
                                                                    [a.score for a in answers]),
                                      np.asarray(f1), f"{name}/{example.get('title', '')}"))
    return questions


def decoded_f1(question: Question, scores: np.ndarray, temperature: float) -> float:
    """The F1 of the answer expected-F1 decoding picks from `scores` (0 for a question without candidates)."""
    from arabert_pipeline.qa.transformer.decode import rank_by_expected_f1

    if not question.spans:
        return 0.0
    order, _ = rank_by_expected_f1(question.context, question.spans, list(scores), temperature)
    return float(question.f1[order[0]])


def expected_f1_loss(weights: np.ndarray, questions: list[Question], power: float):
    """−(mean expected F1 under softmax(features @ weights)), with its gradient (`power` unused)."""
    value, gradient = 0.0, np.zeros_like(weights)
    for q in questions:
        logits = q.features @ weights
        p = np.exp(logits - logits.max())
        p /= p.sum()
        expected = float(p @ q.f1)
        value -= expected
        gradient -= q.features.T @ (p * (q.f1 - expected))  # d E_p[f1] / d logit_i = p_i (f1_i − E)
    n = max(len(questions), 1)
    return value / n, gradient / n


def cross_entropy_loss(weights: np.ndarray, questions: list[Question], power: float):
    """Mean cross-entropy of softmax(features @ weights) against each question's F1^power (normalized), with its
    gradient; convex in the weights."""
    value, gradient = 0.0, np.zeros_like(weights)
    for q in questions:
        logits = q.features @ weights
        shifted = logits - logits.max()
        log_p = shifted - np.log(np.exp(shifted).sum())
        target = q.f1 ** power
        target /= target.sum()
        value -= float(target @ log_p)
        gradient -= q.features.T @ (target - np.exp(log_p))
    n = max(len(questions), 1)
    return value / n, gradient / n


def fit_listwise(loss, questions: list[Question], *, l2: float, temperature: float, power: float = 1.0) -> np.ndarray:
    """Weights minimizing `loss` + l2 × ||weights − prior||², started from (and shrunk towards) the decoder as it is:
    the score at 1 / `temperature`, every other feature at 0. Questions where no candidate scores teach nothing and are
    left out."""
    from scipy.optimize import minimize

    prior = np.zeros(len(FEATURES))
    prior[_INDEX["score"]] = 1.0 / temperature
    usable = [q for q in questions if len(q.f1) and q.f1.max() > 0]

    def penalized(weights: np.ndarray):
        value, gradient = loss(weights, usable, power)
        difference = weights - prior
        return value + l2 * float(difference @ difference), gradient + 2 * l2 * difference

    return minimize(penalized, prior.copy(), jac=True, method="L-BFGS-B", options={"maxiter": 1000}).x


def pointwise_features(question: Question, temperature_grid: Sequence[float]) -> np.ndarray:
    """The span features without the raw score, + the score's gap to the best, log rank, and the expected F1 of the
    candidate under the decoder's distribution at each temperature."""
    from arabert_pipeline.qa.transformer.decode import rank_by_expected_f1

    score = question.features[:, _INDEX["score"]]
    columns = [np.delete(question.features, _INDEX["score"], axis=1), (score - score.max())[:, None],
               np.log1p(np.arange(len(score)))[:, None]]
    for temperature in temperature_grid:
        columns.append(rank_by_expected_f1(question.context, question.spans, list(score), temperature)[1][:, None])
    return np.hstack(columns)


def folds(groups: Sequence[str], k: int, seed: int = 0) -> np.ndarray:
    """A fold number per question, whole groups (articles) per fold, groups shuffled with `seed`."""
    names = sorted(set(groups))
    order = np.random.default_rng(seed).permutation(len(names))
    fold_of = {names[i]: rank % k for rank, i in enumerate(order)}
    return np.asarray([fold_of[g] for g in groups])


def main() -> None:
    import argparse

    from sklearn.ensemble import HistGradientBoostingRegressor
    from sklearn.linear_model import Ridge

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", help="a QA model dir with its dev-chosen decoder")
    parser.add_argument("--dev", nargs="+", required=True, help="dev sets (the model never trained on them)")
    parser.add_argument("--train", nargs="*", default=[], help="the model's training sets, to fit on (optional)")
    parser.add_argument("--folds", type=int, default=5)
    args = parser.parse_args()
    from arabert_pipeline.qa.transformer.model import QAModel

    qa = QAModel.load(args.model)
    temperature = qa.settings.expected_f1_temperature
    temperatures = (0.5, 1.0, 2.0)
    dev = collect(qa, args.dev)
    train = collect(qa, args.train) if args.train else []
    fold = folds([q.group for q in dev], args.folds)
    print(f"{len(dev)} dev questions in {len({q.group for q in dev})} articles, {args.folds} folds by article; "
          f"SOQAL F1 x100 of the decoded answer")
    print(f"decoder as shipped (expected F1 at temperature {temperature:g}): "
          f"{100 * np.mean([decoded_f1(q, q.features[:, 0], temperature) for q in dev]):.2f}")
    print(f"oracle (the best of its candidates): {100 * np.mean([q.f1.max() if len(q.f1) else 0 for q in dev]):.2f}")

    def cross_validated(fit_weights) -> dict[float, float]:
        results = {t: np.zeros(len(dev)) for t in temperatures}
        for k in range(args.folds):
            weights = fit_weights([q for q, f in zip(dev, fold, strict=True) if f != k])
            for i in np.flatnonzero(fold == k):
                for t in temperatures:
                    results[t][i] = decoded_f1(dev[i], dev[i].features @ weights, t)
        return {t: 100 * float(v.mean()) for t, v in results.items()}

    def show(label: str, by_temperature: dict[float, float]) -> None:
        print(f"{label}: " + ", ".join(f"T {t:g} {v:.2f}" for t, v in by_temperature.items()), flush=True)

    for l2 in (1e-3, 1e-2):
        show(f"listwise expected F1, l2 {l2:g}, CV", cross_validated(
            lambda qs, l2=l2: fit_listwise(expected_f1_loss, qs, l2=l2, temperature=temperature)))
    for power in (1.0, 8.0, 30.0):
        show(f"listwise cross-entropy to F1^{power:g}, l2 1e-3, CV", cross_validated(
            lambda qs, power=power: fit_listwise(cross_entropy_loss, qs, l2=1e-3, temperature=temperature,
                                                 power=power)))
    if train:
        weights = fit_listwise(expected_f1_loss, train, l2=1e-3, temperature=temperature)
        show("listwise expected F1 fitted on the training questions",
             {t: 100 * float(np.mean([decoded_f1(q, q.features @ weights, t) for q in dev])) for t in temperatures})

    rows = [pointwise_features(q, temperatures) if q.spans else None for q in dev]
    regressors = {"ridge": lambda: Ridge(alpha=1.0), "boosted trees": lambda: HistGradientBoostingRegressor(
        learning_rate=0.05, max_iter=200, max_leaf_nodes=15, min_samples_leaf=100, random_state=0)}

    def argmax_f1(model, i: int) -> float:
        return 0.0 if rows[i] is None else float(dev[i].f1[int(np.argmax(model.predict(rows[i])))])

    for name, make in regressors.items():
        scores = np.zeros(len(dev))
        for k in range(args.folds):
            fitted = [i for i in range(len(dev)) if fold[i] != k and rows[i] is not None]
            model = make().fit(np.vstack([rows[i] for i in fitted]), np.concatenate([dev[i].f1 for i in fitted]))
            for i in np.flatnonzero(fold == k):
                scores[i] = argmax_f1(model, i)
        print(f"pointwise {name}, CV: {100 * scores.mean():.2f}")
        if train:
            kept = [q for q in train if q.spans]
            model = make().fit(np.vstack([pointwise_features(q, temperatures) for q in kept]),
                               np.concatenate([q.f1 for q in kept]))
            print(f"pointwise {name}, fitted on the training questions: "
                  f"{100 * np.mean([argmax_f1(model, i) for i in range(len(dev))]):.2f}", flush=True)

    print("one feature added to the decoder with a fixed weight (no fit; the best of the weights tried):")
    for name in FEATURES[1:19]:
        best = max((100 * float(np.mean([decoded_f1(q, q.features[:, 0] + w * q.features[:, _INDEX[name]],
                                                    temperature) for q in dev])), w)
                   for w in (-8, -4, -2, -1, 1, 2, 4, 8))
        print(f"  {name}: {best[0]:.2f} at weight {best[1]:+g}")


if __name__ == "__main__":
    main()
