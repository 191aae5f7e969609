"""Task metrics, each `(prediction, example) -> score in [0, 1]`.

- ROUGE-L F1 over lower-cased alphanumeric tokens (rouge-score's default tokenizer, no stemming).
- chrF (beta = 2, character n-grams 1..6, whitespace removed): sacrebleu's sentence chrF / 100.
- SQuAD exact match and token F1 (lower case, punctuation and English articles removed).
- Numeric accuracy: the last number in the prediction equals the reference number.
- SQL execution match: both queries run on the suite's SQLite database and return the same rows.
- Retrieval-QA accuracy: the normalized answer occurs in the normalized prediction.
- Speech: phoneme and word error rates (edit distance over the reference length).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Callable

from edgespec.corpus.example import Example


def _lcs(a: list[str], b: list[str]) -> int:
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def edit_distance(a: list[str], b: list[str]) -> int:
    """Levenshtein distance between two token sequences (substitutions, insertions, deletions)."""
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def error_rate(hypotheses: list[list[str]], references: list[list[str]]) -> float:
    """Corpus error rate: total edit distance / total reference length (PER on phonemes, WER on words)."""
    edits = sum(edit_distance(h, r) for h, r in zip(hypotheses, references, strict=True))
    return edits / max(1, sum(len(r) for r in references))


def rouge_tokens(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9]+", " ", text.lower()).split()


def rouge_l(prediction: str, reference: str) -> float:
    p, r = rouge_tokens(prediction), rouge_tokens(reference)
    if not p or not r:
        return 0.0
    lcs = _lcs(p, r)
    if lcs == 0:
        return 0.0
    prec, rec = lcs / len(p), lcs / len(r)
    return 2 * prec * rec / (prec + rec)


def _char_ngrams(text: str, n: int) -> Counter:
    s = "".join(text.split())
    return Counter(s[i : i + n] for i in range(len(s) - n + 1))


def chrf(prediction: str, reference: str, max_order: int = 6, beta: float = 2.0) -> float:
    """Sentence chrF in [0, 1]: character n-gram precision and recall, each averaged over the
    orders 1..6 that both strings are long enough for, combined as F_beta (sacrebleu's default)."""
    prec_sum = rec_sum = 0.0
    orders = 0
    for n in range(1, max_order + 1):
        hyp, ref = _char_ngrams(prediction, n), _char_ngrams(reference, n)
        n_hyp, n_ref = sum(hyp.values()), sum(ref.values())
        if n_hyp == 0 or n_ref == 0:
            continue
        match = sum((hyp & ref).values())
        prec_sum += match / n_hyp
        rec_sum += match / n_ref
        orders += 1
    if orders == 0 or prec_sum + rec_sum == 0:
        return 0.0
    p, r, b2 = prec_sum / orders, rec_sum / orders, beta * beta
    return (1 + b2) * p * r / (b2 * p + r)


def normalize_answer(text: str) -> str:
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def exact_match(prediction: str, reference: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(reference))


def token_f1(prediction: str, reference: str) -> float:
    p, r = normalize_answer(prediction).split(), normalize_answer(reference).split()
    if not p or not r:
        return float(p == r)
    common = sum((Counter(p) & Counter(r)).values())
    if common == 0:
        return 0.0
    prec, rec = common / len(p), common / len(r)
    return 2 * prec * rec / (prec + rec)


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


def last_number(text: str) -> float | None:
    found = _NUMBER.findall(text)
    if not found:
        return None
    try:
        return float(found[-1].replace(",", ""))
    except ValueError:
        return None


def numeric_match(prediction: str, reference: str) -> float:
    got, want = last_number(prediction), last_number(reference)
    if got is None or want is None:
        return 0.0
    return float(abs(got - want) <= 1e-6 * max(1.0, abs(want)))


def contains_answer(prediction: str, reference: str) -> float:
    ans = normalize_answer(reference)
    return float(bool(ans) and f" {ans} " in f" {normalize_answer(prediction)} ")


def sql_match(prediction: str, example: Example) -> float:
    from edgespec.corpus.sqldb import execution_match, extract_sql

    return float(execution_match(extract_sql(prediction), example.reference))


# name -> scorer(prediction, example); the suite names its metric
METRICS: dict[str, Callable[[str, Example], float]] = {
    "rouge_l": lambda p, ex: rouge_l(p, ex.reference),
    "chrf": lambda p, ex: chrf(p, ex.reference),
    "exact_match": lambda p, ex: exact_match(p, ex.reference),
    "f1": lambda p, ex: token_f1(p, ex.reference),
    "numeric": lambda p, ex: numeric_match(p, ex.reference),
    "sql_execution": sql_match,
    "answer_in_output": lambda p, ex: contains_answer(p, ex.reference),
}


def score(metric: str, prediction: str, example: Example) -> float:
    return METRICS[metric](prediction, example)
