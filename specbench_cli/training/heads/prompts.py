"""Varied prompts for draft-head self-distillation, shaped like Spec-Bench's categories.

The first head data (`heads_data.heads_prompts`, 302 templated prompts) made heads that overfit:
held-out top-1 0.39 against 0.6-0.75 on their training batches, and on Spec-Bench their
1-alpha fell to 0.28. This module writes prompts that resemble Spec-Bench's six task kinds
without being them: MT-bench-like writing / roleplay / reasoning / coding / extraction / STEM /
humanities, "Translate German to English:" with German sentences composed here, "Summarize:" a
news-style passage composed here, open-domain questions, grade-school word problems with random
numbers, and questions to be answered from given passages (RAG). Every slot is filled at random
from pools written for this project (a seeded `random.Random`), so N prompts are N distinct
combinations rather than one template list crossed once. No prompt is a Spec-Bench question:
tests/training/test_heads.py runs `heads_data.spec_bench_overlap` on a large sample.

    python -m specbench_cli.training.heads.prompts -o prompts.jsonl -n 1500 [--seed 1]

writes rows {"id", "category", "instruction"} (the seed-file format of `train drafter
distill-data --seeds`), categories interleaved so any prefix is balanced.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Callable

NAMES = ("Mara", "Jonas", "Priya", "Tomasz", "Aiko", "Felix", "Leila", "Omar", "Greta", "Diego", "Nina",
         "Samuel", "Yusuf", "Clara", "Ravi", "Elena", "Bruno", "Hana", "Kofi", "Ingrid")
TOWNS = ("Westbrook", "Lindenfeld", "Port Alder", "Greystone", "Millhaven", "Oakridge", "Sandvik", "Redcliff",
         "Eastmere", "Bramwell", "Harrowgate", "Kestrel Bay")
THINGS = ("an old piano", "a community garden", "a night market", "a broken compass", "a solar-powered boat",
          "a forgotten diary", "a mountain railway", "a tiny bookshop", "a winter storm", "a street musician",
          "a migrating flock of geese", "a family recipe", "a rooftop observatory", "a delayed flight",
          "a neighbourhood robot", "a river ferry", "an abandoned factory", "a school science fair")
WRITING = ("Write a {form} about {thing}{twist}.", "Compose a {form} in which {name} discovers {thing}{twist}.",
           "Draft a {form} for a local newsletter about {thing}{twist}.",
           "Write a {form} from the point of view of {thing}{twist}.")
FORMS = ("short story", "poem of three stanzas", "persuasive essay", "letter to a friend", "product review",
         "travel diary entry", "speech for a small ceremony", "dialogue between two neighbours", "haiku sequence",
         "motivational blog post", "news report", "fairy tale")
TWISTS = ("", "", " with a surprising ending", ", using a hopeful tone", ", in under 150 words",
          ", aimed at teenagers", ", with a touch of humour", ", that ends with a question")
ROLES = ("a medieval blacksmith", "a deep-sea diver", "a grumpy wizard", "a space station engineer",
         "a 1920s jazz musician", "a wildlife photographer", "a sports commentator", "a patient violin teacher",
         "a ship's cook", "a time traveller from 2300", "a detective in a rainy city", "a beekeeper")
ROLE_TASKS = ("Describe your morning routine.", "Give advice to someone starting in your trade.",
              "Explain the hardest day you ever had.", "Persuade me to visit your workplace.",
              "Answer a customer who complains about {thing}.", "Tell me what you think about {thing}.")
CONCEPTS = ("entropy", "natural selection", "the Doppler effect", "osmosis", "the Pythagorean theorem",
            "neural networks", "plate tectonics", "the greenhouse effect", "supply chains", "the placebo effect",
            "binary search", "catalysts", "ocean acidification", "semiconductors", "the speed of light",
            "prime numbers", "antibiotic resistance", "photovoltaic cells", "tidal forces", "public-key encryption")
HUMANITIES = ("the Renaissance", "the Silk Road", "the printing press", "impressionist painting", "Stoic philosophy",
              "the Industrial Revolution", "the invention of writing", "folk music traditions",
              "the rise of city-states", "utilitarian ethics", "the history of money", "the spread of coffee houses")
EXPLAIN = ("Explain {c} to a curious twelve-year-old.", "What are common misconceptions about {c}?",
           "Describe how {c} affects everyday life, with two examples.", "Compare {c} with {d}.",
           "Write a short lecture outline about {c}.", "Why did {c} matter, and what came after it?")
CODE = ("parses a date string in the form YYYY-MM-DD", "rotates a matrix by 90 degrees",
        "finds all anagrams of a word in a list", "implements a stack with a maximum operation",
        "counts the islands in a grid of 0s and 1s", "validates balanced brackets", "computes a running median",
        "groups words by their first letter", "converts Roman numerals to integers", "finds the k most frequent items",
        "checks whether two strings are one edit apart", "merges overlapping intervals", "builds a trie of words",
        "simulates a bank account with deposits and withdrawals", "reads a CSV file and sums one column")
LANGS = ("Python", "JavaScript", "C++", "Java", "Go", "Rust")
CODE_EXTRA = ("", " Explain its time complexity.", " Include two example calls.", " Add brief comments.",
              " Then describe one edge case.")
ITEMS = ("apples", "notebooks", "tickets", "stamps", "cupcakes", "bricks", "marbles", "seedlings", "postcards")


def _writing(r: random.Random) -> str:
    return r.choice(WRITING).format(form=r.choice(FORMS), thing=r.choice(THINGS), twist=r.choice(TWISTS),
                                    name=r.choice(NAMES))


def _roleplay(r: random.Random) -> str:
    return f"Pretend you are {r.choice(ROLES)}. " + r.choice(ROLE_TASKS).format(thing=r.choice(THINGS))


def _reasoning(r: random.Random) -> str:
    a, b, c = r.sample(NAMES, 3)
    adj = r.choice((("taller", "shortest"), ("older", "youngest"), ("faster", "slowest"), ("richer", "poorest")))
    days = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
    forms = (f"{a} is {adj[0]} than {b}, and {b} is {adj[0]} than {c}. Who is the {adj[1]}? Explain your reasoning.",
             f"If today is {r.choice(days)}, what day of the week will it be in {r.randint(10, 400)} days? Think step by step.",
             f"{a} says {b} is lying. {b} says {c} is lying. {c} says both {a} and {b} are lying. Who tells the truth?",
             f"A box has {r.randint(3, 9)} red and {r.randint(3, 9)} blue socks. How many must {a} take in the dark "
             f"to be sure of a matching pair?",
             f"All {r.choice(ITEMS)} in {r.choice(TOWNS)} are sold on Fridays. {a} bought some there on a Tuesday. "
             f"What can we conclude?")
    return r.choice(forms)


def _math(r: random.Random) -> str:
    n, m, k, p = r.randint(3, 40), r.randint(2, 12), r.randint(2, 9), r.randint(2, 25)
    a, b = r.sample(NAMES, 2)
    it = r.choice(ITEMS)
    forms = (f"{a} buys {n} {it} at ${p} each and pays with a ${(n * p // 50 + 1) * 50} note. How much change does {a} get?",
             f"{a} has {n} {it}. {b} has {k} times as many. Together they give away {m}. How many are left?",
             f"A train travels {n * 10} km in {k} hours. At the same speed, how far does it go in {k + m} hours?",
             f"{a} saves ${p} every week. How many weeks until {a} can buy a bike that costs ${p * n + m}?",
             f"A recipe needs {k} eggs for {m} people. How many eggs are needed for {m * n} people?",
             f"{a} read {n} pages on Monday and {m} more pages each day after that. How many pages by Friday?")
    return r.choice(forms)


def _coding(r: random.Random) -> str:
    return f"Write a {r.choice(LANGS)} function that {r.choice(CODE)}.{r.choice(CODE_EXTRA)}"


def _record(r: random.Random) -> str:
    name, town = r.choice(NAMES), r.choice(TOWNS)
    return (f"{name} opened a shop selling {r.choice(ITEMS)} in {town} in {r.randint(1980, 2023)}. It has "
            f"{r.randint(2, 60)} employees and earned ${r.randint(1, 900)},000 last year. Its manager, "
            f"{r.choice(NAMES)}, plans a second branch in {r.choice(TOWNS)} by {r.randint(2025, 2030)}.")


def _extraction(r: random.Random) -> str:
    text = " ".join(_record(r) for _ in range(r.randint(2, 3)))
    ask = r.choice(("Extract every shop's owner, town and founding year as JSON.",
                    "List the towns mentioned and how many employees work in each.",
                    "Make a table of the shops with their yearly earnings.",
                    "Which shop is the oldest? Answer with its owner and town."))
    return f"{text}\n\n{ask}"


def _stem(r: random.Random) -> str:
    c, d = r.sample(CONCEPTS, 2)
    return r.choice(EXPLAIN).format(c=c, d=d)


def _humanities(r: random.Random) -> str:
    c, d = r.sample(HUMANITIES, 2)
    return r.choice(EXPLAIN).format(c=c, d=d)


DE_SUBJ = ("Der Bürgermeister", "Die Lehrerin", "Mein Nachbar", "Das kleine Unternehmen", "Die Regierung",
           "Der Trainer der Mannschaft", "Eine Gruppe von Studenten", "Die Polizei", "Meine Großmutter",
           "Der neue Direktor")
DE_VERB = ("hat am Montag angekündigt, dass", "erklärte gestern, dass", "glaubt fest daran, dass",
           "hat in einem Interview gesagt, dass", "befürchtet, dass")
DE_CLAUSE = ("die Brücke im Sommer renoviert wird", "die Preise im nächsten Jahr steigen werden",
             "das Museum länger geöffnet bleibt", "viele Menschen mit dem Fahrrad zur Arbeit fahren",
             "der Zug wegen des Wetters ausfällt", "die Schule einen neuen Garten bekommt",
             "das Konzert am Wochenende stattfindet", "mehr Bäume in der Stadt gepflanzt werden",
             "die Mannschaft das Spiel gewinnen kann", "die Bibliothek neue Bücher gekauft hat")
DE_TAIL = ("", " Das sei eine gute Nachricht für alle.", " Viele Bürger sind jedoch skeptisch.",
           " Die Entscheidung fiel nach langen Gesprächen.", " Weitere Details sollen bald folgen.")


def _translation(r: random.Random) -> str:
    return (f"Translate German to English: {r.choice(DE_SUBJ)} {r.choice(DE_VERB)} {r.choice(DE_CLAUSE)}."
            f"{r.choice(DE_TAIL)}")


def _article(r: random.Random, sentences: int) -> str:
    town, a, b = r.choice(TOWNS), *r.sample(NAMES, 2)
    pool = [f"Officials in {town} confirmed on {r.choice(('Monday', 'Thursday', 'Saturday'))} that {r.choice(THINGS)} "
            f"will be the centre of a new local project.",
            f"The plan, led by council member {a}, is expected to cost about ${r.randint(2, 90)} million.",
            f"Residents gathered at the town hall, where {r.randint(40, 900)} people signed a petition.",
            f"'{r.choice(('We have waited years for this', 'This is not what the town needs', 'It is a fair compromise'))},' "
            f"said {b}, who has lived in {town} for {r.randint(3, 60)} years.",
            f"Critics argue that the money should go to {r.choice(('schools', 'roads', 'the hospital', 'housing'))} instead.",
            f"Work is due to begin in {r.choice(('spring', 'the autumn', 'early next year'))} and last {r.randint(2, 30)} months.",
            f"A similar scheme in {r.choice(TOWNS)} attracted {r.randint(5, 90)},000 visitors in its first year.",
            f"The council will vote on the final budget on {r.randint(1, 28)} {r.choice(('March', 'June', 'October'))}."]
    return " ".join(pool[:2] + r.sample(pool[2:], sentences - 2))


def _summarization(r: random.Random) -> str:
    return f"Summarize: {_article(r, r.randint(4, 8))}"


QA = ("What is the largest planet in the solar system?", "Who painted the Mona Lisa?", "How many bones are in the adult human body?",
      "What is the boiling point of water at sea level in Fahrenheit?", "Which ocean is the deepest?",
      "What language has the most native speakers?", "Who developed the theory of general relativity?",
      "What gas do plants absorb from the air?", "Which country has the longest coastline?",
      "What is the smallest prime number?", "Who wrote Pride and Prejudice?", "What is the currency of Japan?",
      "Which element has the chemical symbol Fe?", "How long does light from the Sun take to reach Earth?",
      "What is the tallest mountain in Africa?", "Which instrument has 88 keys?", "Who was the first person in space?",
      "What is the main ingredient of guacamole?", "Which organ produces insulin?", "What is the capital of Canada?")
QA_STYLE = ("", "Answer briefly: ", "Question: ", "I have always wondered: ")


def _qa(r: random.Random) -> str:
    q = r.choice(QA)
    return r.choice(QA_STYLE) + (q if r.random() < 0.7 else q[:-1] + ", and why is that interesting?")


def _rag(r: random.Random) -> str:
    docs = [_record(r) for _ in range(r.randint(2, 3))] + [_article(r, 3)]
    r.shuffle(docs)
    passages = "\n".join(f"Passage {i + 1}: {d}" for i, d in enumerate(docs))
    q = r.choice(("Who manages the shop that earned the most last year?", "How much is the town project expected to cost?",
                  "In which year was the first shop opened?", "Which towns are mentioned, and why?"))
    return f"Answer the question using the passages.\n{passages}\nQuestion: {q}"


GENERATORS: dict[str, Callable[[random.Random], str]] = {
    "writing": _writing, "roleplay": _roleplay, "reasoning": _reasoning, "math_reasoning": _math,
    "coding": _coding, "extraction": _extraction, "stem": _stem, "humanities": _humanities,
    "translation": _translation, "summarization": _summarization, "qa": _qa, "rag": _rag}


def varied_prompts(n: int, seed: int = 1) -> list[dict]:
    """`n` distinct prompts, categories round-robin, ids `vary-<seed>-N`. A category whose pools
    run dry (qa has fewer combinations) is skipped after 50 duplicate draws in a row."""
    r, seen, rows = random.Random(seed), set(), []
    misses = dict.fromkeys(GENERATORS, 0)
    while len(rows) < n and any(v < 50 for v in misses.values()):
        for cat, gen in GENERATORS.items():
            if len(rows) >= n or misses[cat] >= 50:
                continue
            text = gen(r)
            if text in seen:
                misses[cat] += 1
                continue
            misses[cat] = 0
            seen.add(text)
            rows.append({"id": f"vary-{seed}-{len(rows)}", "category": cat, "instruction": text})
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", required=True, type=Path)
    ap.add_argument("-n", "--count", type=int, default=1200)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    if args.count < 1:
        ap.error("--count must be >= 1")
    rows = varied_prompts(args.count, args.seed)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    from specbench_cli.atomic import atomic_write

    atomic_write(args.output, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    print(f"{len(rows)} prompts -> {args.output}")


if __name__ == "__main__":
    main()
