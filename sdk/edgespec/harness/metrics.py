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


# --- BLEU, and the task fine-tune's scores with confidence intervals (edgespec.corpus.task_data) ---


def bleu_tokens(text: str) -> list[str]:
    """mteval-v13a's tokenization (sacrebleu's default, "13a"): punctuation and symbols split
    off, periods and commas too unless between digits, a dash after a digit."""
    text = text.replace("<skipped>", "").replace("-\n", "").replace("\n", " ")
    if "&" in text:
        text = text.replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">")
    text = re.sub(r"([\{-\~\[-\` -\&\(-\+\:-\@\/])", r" \1 ", f" {text} ")
    text = re.sub(r"([^0-9])([\.,])", r"\1 \2 ", text)
    text = re.sub(r"([\.,])([^0-9])", r" \1 \2", text)
    text = re.sub(r"([0-9])(-)", r"\1 \2 ", text)
    return text.split()


def bleu_stats(prediction: str, reference: str, max_order: int = 4) -> list[int]:
    """One sentence's BLEU sufficient statistics: [hypothesis length, reference length,
    clipped matches of orders 1..max_order, hypothesis n-grams of orders 1..max_order]."""
    hyp, ref = bleu_tokens(prediction), bleu_tokens(reference)
    grams = lambda toks, n: Counter(tuple(toks[i : i + n]) for i in range(len(toks) - n + 1))  # noqa: E731
    matches = [sum((grams(hyp, n) & grams(ref, n)).values()) for n in range(1, max_order + 1)]
    totals = [max(0, len(hyp) - n + 1) for n in range(1, max_order + 1)]
    return [len(hyp), len(ref), *matches, *totals]


def bleu(predictions: list[str], references: list[str], max_order: int = 4) -> float:
    """Corpus BLEU in [0, 1] (sacrebleu's corpus_bleu / 100: 13a tokens, one reference):
    BP * exp(mean_n log p_n), p_n the clipped n-gram precision summed over the corpus, BP =
    exp(1 - r/c) when the c hypothesis tokens are fewer than the r reference tokens. Smoothing
    "exp" (mteval-v13a; Chen & Cherry 2014, method 3): the k-th order with no match counts
    1 / (2^k * its n-grams); no match at all gives 0."""
    stats = [sum(col) for col in zip(*(bleu_stats(p, r, max_order) for p, r in zip(predictions, references, strict=True)))]
    return bleu_of_stats(stats, max_order) if stats else 0.0


def bleu_of_stats(stats: list[int] | list[float], max_order: int = 4) -> float:
    """`bleu` from summed `bleu_stats`."""
    import math

    c, r, matches, totals = stats[0], stats[1], stats[2 : 2 + max_order], stats[2 + max_order : 2 + 2 * max_order]
    if c == 0 or not any(matches):
        return 0.0
    log_p, smooth = 0.0, 1.0
    for m, t in zip(matches, totals):
        if t == 0:  # the hypotheses are shorter than this order: a zero precision
            return 0.0
        if m == 0:
            smooth *= 2
        log_p += math.log(m / t if m else 1 / (smooth * t))
    return math.exp(min(0.0, 1 - r / c) + log_p / max_order)


def bootstrap_interval(
    values: list, statistic: Callable | None = None, groups: list | None = None, samples: int = 2000, seed: int = 0, level: float = 0.95
) -> tuple[float, float, float]:
    """(statistic, low, high): the statistic of per-item values [N, ...] (a function of an
    array of rows; default: their mean) and its percentile-bootstrap interval (`samples` resamples with replacement, fixed
    seed). With groups (one label per item), whole groups are resampled (a cluster
    bootstrap: items of one template or family are not independent)."""
    import numpy as np

    values = np.asarray(values, dtype=float)
    statistic = statistic or (lambda v: float(v.mean()))
    labels = np.unique(np.asarray(groups if groups is not None else np.arange(len(values))), return_inverse=True)[1]
    members = [np.flatnonzero(labels == g) for g in range(labels.max() + 1)]
    rng = np.random.default_rng(seed)
    stats = [statistic(values[np.concatenate([members[g] for g in rng.integers(0, len(members), len(members))])]) for _ in range(samples)]
    lo, hi = np.quantile(stats, [(1 - level) / 2, (1 + level) / 2])
    return statistic(values), float(lo), float(hi)


def task_scores(examples: list, predictions: list[str], samples: int = 2000, seed: int = 0) -> dict[str, tuple[float, float, float]]:
    """Each of the task's metrics (`FINETUNE_TASKS[task].metrics`) over `task_data.TaskExample`s and the
    model's answers to them: (score, low, high), a 95% cluster-bootstrap interval over the
    examples' groups (`bootstrap_interval`). chrF and execution match: the mean of per-example
    scores; BLEU: corpus BLEU of the resampled examples."""
    from edgespec.corpus.task_data import FINETUNE_TASKS

    if not examples or len(examples) != len(predictions):
        raise ValueError(f"task_scores: {len(predictions)} predictions for {len(examples)} examples")
    per_item = {  # metric -> (per-example statistics, the statistic of a set of them)
        "chrf": (lambda p, ex: [chrf(p, ex.reference)], None),
        "sql_execution": (lambda p, ex: [sql_match(p, ex)], None),
        "bleu": (lambda p, ex: bleu_stats(p, ex.reference), lambda s: bleu_of_stats(s.sum(0))),
    }
    groups = [ex.group for ex in examples]
    out = {}
    for metric in FINETUNE_TASKS[examples[0].task].metrics:
        item, statistic = per_item[metric]
        out[metric] = bootstrap_interval([item(p, ex) for p, ex in zip(predictions, examples)], statistic, groups, samples, seed)
    return out
