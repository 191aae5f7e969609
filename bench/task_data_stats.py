"""The task fine-tune's gold data (`edgespec.corpus.task_data`) at a glance: examples per task
and split, answer and prompt lengths in SmolLM2-135M-Instruct tokens, SQL templates per split,
and the leak checks (what the two splits share: source keys, English texts / questions,
references, split units, shared sentences; all 0 by construction).

    python bench/task_data_stats.py > docs/results/task_data_stats.json
"""

from __future__ import annotations

import argparse
import json
import statistics

from edgespec.corpus import task_data as T


def distribution(values: list[int]) -> dict[str, float]:
    """Min, deciles 1/5/9, max and mean of token counts."""
    if not values:  # an empty split (translation has no heldout_fillings: it has no templates)
        return {}
    deciles = statistics.quantiles(values, n=10, method="inclusive")
    return {"min": min(values), "p10": deciles[0], "median": deciles[4], "p90": deciles[8], "max": max(values), "mean": round(statistics.fmean(values), 1)}


def source_text(x: T.TaskExample) -> str:
    """The English text of a description, the question of an SQL example."""
    return x.prompt.split("\n\n", 1)[1] if x.task.startswith("translation") else x.source.removeprefix("chinook/")


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    count = T.count_tokens()
    out: dict = {"tokenizer": T.TOKENIZER_SOURCE, "tasks": {}}
    for name, task in T.FINETUNE_TASKS.items():
        splits = {s: T.task_examples(name, s) for s in T.TASK_SPLITS}
        texts = {s: {source_text(x) for x in v} for s, v in splits.items()}
        sentences = {s: {t for x in v for t in T.long_sentences(x)} for s, v in texts.items()}
        out["tasks"][name] = {
            "source": task.source,
            "metrics": list(task.metrics),
            "max_new_tokens": task.max_new_tokens,
            "examples": {s: len(v) for s, v in splits.items()},
            "groups": {s: len({x.group for x in v}) for s, v in splits.items()},
            "answer_tokens": {s: distribution([count(x.reference) for x in v]) for s, v in splits.items()},
            "prompt_tokens": {s: distribution([count(x.prompt) for x in v]) for s, v in splits.items()},
            "in_both_splits": {
                **T.split_overlap(name),
                "source_text": len(texts["train"] & texts["heldout"]),
                "long_sentence": len(sentences["train"] & sentences["heldout"]),
            },
        }
    # a template's split (heldout_fillings holds new fillings of the train templates)
    templates = {s: sorted(t.name for t in T.SQL_TEMPLATES if T.template_split(t.name) == s) for s in ("train", "dev", "heldout")}
    out["tasks"]["sql_chinook"]["templates"] = {
        "count": {s: len(v) for s, v in templates.items()},
        "heldout": templates["heldout"],
        "in_both_splits": len(set(templates["train"]) & set(templates["heldout"])),
        "phrasings": sum(len(t.questions) for t in T.SQL_TEMPLATES),
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
