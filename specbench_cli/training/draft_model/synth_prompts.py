"""Synthetic instruction prompts for self-distillation (SFT / MSN training data).

The shipped seed set (78 instructions) is too small to fine-tune a whole model on, and this
machine reaches no dataset hub, so more prompts are made by crossing hand-written task templates
with topic lists. Every prompt is written for this project: none is a Spec-Bench question
(tests/training/test_msn.py checks there is no exact or near-exact overlap with question.jsonl).

    python -m specbench_cli.training.draft_model.synth_prompts -o prompts.jsonl -n 600 [--seed 0]

writes rows {"id", "category", "instruction"}, the seed-file format `train drafter
distill-data --seeds` reads. The order is a seeded shuffle that stays balanced over
categories, so any prefix is a fair sample.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
from pathlib import Path

TOPICS = ("a lighthouse", "autumn rain", "a city bus", "honeybees", "a chess club", "the moon landing",
          "a bakery", "mountain hiking", "recycling", "a lost umbrella", "solar panels", "a school library",
          "coral reefs", "a night train", "volcanoes", "a street market", "winter sports", "a robot gardener",
          "the printing press", "a rainy Monday", "public parks", "a jazz concert", "desert plants",
          "a family dinner", "ocean tides", "an old bicycle", "electric cars", "a village festival",
          "clouds", "a museum visit")
CONCEPTS = ("photosynthesis", "inflation", "gravity", "the water cycle", "compound interest", "vaccines",
            "plate tectonics", "supply and demand", "machine learning", "the immune system", "electricity",
            "democracy", "the greenhouse effect", "DNA", "black holes", "recursion", "sound waves",
            "the Roman Empire", "magnetism", "evolution", "encryption", "the stock market", "erosion",
            "the internet", "nutrition labels")
CODE_TASKS = ("reverses a string", "checks whether a number is prime", "counts the vowels in a string",
              "returns the factorial of n", "merges two sorted lists", "removes duplicates from a list",
              "finds the longest word in a sentence", "converts Celsius to Fahrenheit",
              "computes the average of a list of numbers", "checks whether a string is a palindrome",
              "returns the n-th Fibonacci number", "flattens a nested list", "counts word frequencies in a text",
              "returns the largest element of a list", "sorts a list of tuples by their second item")
LANGS = ("Python", "JavaScript")
TARGETS = ("French", "Spanish", "German")
SENTENCES = ("The weather is nice today.", "I would like a cup of tea, please.", "Where is the train station?",
             "We are going to the beach tomorrow.", "My brother reads a book every week.",
             "The shop closes at six in the evening.", "Thank you for your help.", "The cat sleeps on the sofa.")
ROLES = ("a tour guide", "a chef", "a librarian", "a ship captain", "a fitness coach", "a museum curator",
         "a detective", "a gardener", "a pilot", "a science teacher")

TEMPLATES = {
    "writing": ("Write a short poem about {topic}.", "Write a short story about {topic}.",
                "Write a product description for something related to {topic}.",
                "Write a short blog introduction about {topic}."),
    "roleplay": ("You are {role}. Introduce yourself and describe a typical day.",
                 "Pretend to be {role} and give three tips to a beginner."),
    "qa": ("Explain {concept} in simple terms.", "What are three common misconceptions about {concept}?",
           "Why is {concept} important?"),
    "stem": ("Describe how {concept} works, step by step.", "Give an everyday example of {concept}."),
    "coding": ("Write a {lang} function that {code}.",),
    "math": ("What is {a} plus {b}? Explain your steps.", "What is {a} times {c}? Show your work.",
             "A box holds {c} apples. How many apples are in {d} boxes?",
             "Tom has {a} marbles and gives away {c}. How many are left?"),
    "translation": ("Translate into {target}: {sentence}",),
    "summarization": ("Summarise in two sentences why {concept} matters.",
                      "Give a three-point summary of the history of {topic}."),
    "extraction": ("List five words related to {topic}.", "Name three facts about {concept} as a bullet list."),
}


def _fill(category: str, template: str) -> list[str]:
    """All instructions one template yields (its slots crossed with their lists)."""
    if category == "math":
        nums = [(17, 25, 6, 4), (48, 37, 9, 7), (120, 85, 12, 3), (63, 29, 8, 11), (250, 175, 15, 6)]
        return [template.format(a=a, b=b, c=c, d=d) for a, b, c, d in nums]
    slots = {"topic": TOPICS, "concept": CONCEPTS, "role": ROLES, "code": CODE_TASKS, "lang": LANGS,
             "target": TARGETS, "sentence": SENTENCES}
    used = [k for k in slots if "{" + k + "}" in template]
    return [template.format(**dict(zip(used, combo))) for combo in itertools.product(*(slots[k] for k in used))]


def make_prompts(n: int | None = None, seed: int = 0) -> list[dict]:
    """Up to `n` distinct prompts (all when None), interleaved over categories after a seeded
    shuffle within each category. Returns rows {"id", "category", "instruction"}."""
    rng = random.Random(seed)
    pools = {}
    for cat, templates in TEMPLATES.items():
        pool = sorted({p for t in templates for p in _fill(cat, t)})
        rng.shuffle(pool)
        pools[cat] = pool
    rows, i = [], 0
    while any(pools.values()) and (n is None or len(rows) < n):
        for cat, pool in pools.items():
            if pool and (n is None or len(rows) < n):
                rows.append({"id": f"synth-{len(rows):05d}", "category": cat, "instruction": pool.pop()})
        i += 1
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", required=True, type=Path)
    ap.add_argument("-n", "--count", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rows = make_prompts(args.count, args.seed)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    from specbench_cli.atomic import atomic_write

    atomic_write(args.output, "".join(json.dumps(r) + "\n" for r in rows))
    print(f"{len(rows)} prompts -> {args.output}")


if __name__ == "__main__":
    main()
