"""Answer quality next to speed: scorers, and per-method quality from result rows alone.

A row is scored when it carries `scorer` and `reference` (the runner copies both from the
question, so a report needs nothing but the run folder). Scorers:

    gsm8k      exact match of the final number (Spec-Bench's math_reasoning, GSM8K references
               ending in "#### <number>"); `extract_number` defines how the number is found.
    humaneval  pass@1 (greedy: one sample per problem) through HumanEval's own tests, each
               program run in `sandbox.run_untrusted`. Model-written code runs ONLY when the
               caller opts in (`--execute-code`); otherwise the score is "not run".

`score_row` returns 1.0 / 0.0, or None when the row cannot be scored (no scorer, error row,
code execution not allowed). docs/metrics.md documents the rules.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation
from typing import Iterable, Optional

from specbench_cli.errors import UsageError
from specbench_cli.names import AR

SCORERS = ("gsm8k", "humaneval")
METRIC_NAMES = {"gsm8k": "Acc", "humaneval": "pass@1"}

# A sign only where it cannot be a minus between two terms ("5-3"); thousands groups of 3.
_NUM = r"(?:(?<![\w)\]])-)?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?|\.\d+)"
_NUMBER = re.compile(_NUM)
_HASHES = re.compile(r"####\s*\$?\s*(" + _NUM + ")")
_BOXED = re.compile(r"\\boxed\{\s*\\?\$?\s*(" + _NUM + r")[^}]*\}")
_ANSWER_IS = re.compile(r"answer\s+is\b", re.IGNORECASE)


def check_scorer(name: str, where: str = "scorer") -> str:
    if name not in SCORERS:
        raise UsageError(f"{where}: unknown scorer '{name}'; choose from {', '.join(SCORERS)}")
    return name


# ----------------------------------------------------------------------------- gsm8k


def normalize_number(text: str) -> Optional[str]:
    """'1,000' -> '1000', '12.50' -> '12.5', '-3.0' -> '-3', '3/4' -> '0.75'; None if not a number."""
    text = text.replace(",", "").strip()
    try:
        if "/" in text:
            num, den = text.split("/", 1)
            if Decimal(den) == 0:
                return None
            value = Decimal(num) / Decimal(den)
        else:
            value = Decimal(text)
    except (InvalidOperation, ValueError):
        return None
    value = value.quantize(Decimal("1.000000")).normalize() if value != value.to_integral() else value.to_integral()
    out = format(value, "f")
    return "0" if out in ("-0", "0") else out


def extract_number(text: str) -> Optional[str]:
    """The final answer of a model's (or GSM8K's) text, normalized; None if it has no number.

    In order, the first rule that finds a number wins:
    1. the last `#### <number>` (GSM8K's own format);
    2. the last `\\boxed{<number>}`;
    3. after the last "answer is" (the answer trigger "So the answer is"): in the clause that
       follows (up to a line break or a sentence's period) the first number after its last
       "=", else its first number ("So the answer is 200 + 800 = 1000." gives 1000);
    4. the last number anywhere in the text.
    Thousands separators and `$` are ignored, a trailing period is not part of a number,
    `3/4` is 0.75, and 12.0 equals 12.
    """
    for pattern in (_HASHES, _BOXED):
        found = pattern.findall(text)
        if found:
            return normalize_number(found[-1])
    triggers = list(_ANSWER_IS.finditer(text))
    if triggers:
        found = _after_trigger(text[triggers[-1].end():])
        if found:
            return normalize_number(found)
    numbers = _NUMBER.findall(text)
    return normalize_number(numbers[-1]) if numbers else None


def _after_trigger(after: str) -> Optional[str]:
    """The answer after "answer is": in its first clause (up to a line break or a sentence's
    period), the first number after the last "=" ("200 + 800 = 1000" -> 1000), else the
    clause's first number; else the first number anywhere after the trigger."""
    clause = re.split(r"\n|\.(?:\s|$)", after, maxsplit=1)[0]
    if "=" in clause:
        result = _NUMBER.search(clause.rsplit("=", 1)[1])
        if result:
            return result.group(0)
    first = _NUMBER.search(clause) or _NUMBER.search(after)
    return first.group(0) if first else None


def gsm8k_correct(answer: str, reference: str) -> Optional[bool]:
    """Exact match of the final numbers; None when the reference has no number."""
    want = extract_number(reference)
    if want is None:
        return None
    return extract_number(answer) == want


# ----------------------------------------------------------------------------- humaneval


def humaneval_program(completion: str, reference: dict) -> str:
    """The program a HumanEval answer is tested as: the code (the first fenced block when the
    answer has one), after the problem's prompt unless the code defines the function itself
    (then only the prompt's import lines go first), then the tests and `check(<entry point>)`."""
    blocks = re.findall(r"```(?:python|py)?[^\n]*\n(.*?)```", completion, re.DOTALL)
    code = blocks[0] if blocks else completion
    prompt, entry = reference.get("prompt", ""), reference.get("entry_point", "")
    if entry and re.search(rf"^\s*def\s+{re.escape(entry)}\s*\(", code, re.MULTILINE):
        imports = [ln for ln in prompt.splitlines() if ln.startswith(("import ", "from "))]
        head = "\n".join(imports) + "\n\n" if imports else ""
        program = head + code
    else:
        program = prompt + code
    return f"{program}\n\n{reference.get('test', '')}\n\ncheck({entry})\n"


def humaneval_passed(completion: str, reference: dict, timeout: float = 10.0) -> bool:
    from specbench_cli.scoring.sandbox import run_untrusted

    return run_untrusted(humaneval_program(completion, reference), timeout=timeout).passed


# ----------------------------------------------------------------------------- rows


def score_row(row: dict, execute_code: bool = False) -> Optional[float]:
    """1.0 / 0.0 for a scorable `ok` row; None otherwise (see module docstring)."""
    scorer, ref = row.get("scorer"), row.get("reference")
    if not scorer or ref is None or row.get("status") != "ok":
        return None
    text = row.get("output_text", "")
    if scorer == "gsm8k":
        ok = gsm8k_correct(text, str(ref))
        return None if ok is None else float(ok)
    if scorer == "humaneval":
        if not execute_code or not isinstance(ref, dict):
            return None
        return float(humaneval_passed(text, ref))
    return None


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95 % Wilson score interval of a proportion k/n ((nan, nan) for n = 0)."""
    if n == 0:
        return float("nan"), float("nan")
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def scored_rows(rows: Iterable[dict], execute_code: bool = False) -> list[dict]:
    """`rows` that carry a scorer, each with a `quality` key (1.0, 0.0 or None)."""
    return [{**r, "quality": score_row(r, execute_code)} for r in rows if r.get("scorer")]


# ----------------------------------------------------------------------------- summaries

GROUP = ["model", "method_label", "block_complexity", "batch_size"]
_REPLY = ["run_id", "task", "question_id", "turn", "repeat", "temperature"]  # AR's answer to compare with


def quality_summary(rows: Iterable[dict], execute_code: bool = False):
    """One row per (model, method_label, BC, batch size, scorer): `n` scored answers, `correct`, `score`
    (= correct / n), 95 % Wilson `low`/`high`, `not_run` (scorable rows left unscored, e.g.
    HumanEval without --execute-code), `lossless`, and `ar_differs` / `ar_compared`: answers
    whose score differs from AR's on the same question, turn and repeat. Empty without scored rows."""
    import pandas as pd

    scored = scored_rows(rows, execute_code)
    columns = GROUP + ["scorer", "n", "correct", "score", "low", "high", "not_run", "lossless",
                       "ar_differs", "ar_compared"]
    if not scored:
        return pd.DataFrame(columns=columns)
    df = pd.DataFrame(scored)
    for key, default in (("model", ""), ("run_id", ""), ("task", ""), ("repeat", 0), ("block_complexity", 0),
                         ("batch_size", 1), ("lossless", None), ("temperature", 0.0)):
        if key not in df.columns:
            df[key] = default
    df["question_id"] = df["question_id"].astype(str)
    df["batch_size"] = df["batch_size"].fillna(1).astype(int)
    df["temperature"] = df["temperature"].fillna(0.0).astype(float)
    ar = {tuple(r[k] for k in ["model"] + _REPLY): r["quality"] for _, r in df[df["method"] == AR].iterrows()}
    records = []
    for key, group in df.groupby(GROUP + ["scorer"], sort=False):
        done = group[group["quality"].notna()]
        k, n = int(done["quality"].sum()), len(done)
        low, high = wilson(k, n)
        pairs = [(q, ar.get(tuple(r[c] for c in ["model"] + _REPLY))) for (_, r), q in zip(done.iterrows(), done["quality"])]
        pairs = [(q, a) for q, a in pairs if a is not None and not (isinstance(a, float) and math.isnan(a))]
        lossless = group["lossless"].dropna()
        records.append({**dict(zip(GROUP + ["scorer"], key)), "n": n, "correct": k,
                        "score": k / n if n else float("nan"), "low": low, "high": high,
                        "not_run": int(len(group) - n - (group["status"] != "ok").sum()),
                        "lossless": bool(lossless.all()) if len(lossless) else None,
                        "ar_differs": sum(q != a for q, a in pairs), "ar_compared": len(pairs)})
    return pd.DataFrame(records, columns=columns)


def quality_notes(quality) -> list[str]:
    """What a reader must know about the quality columns: n and spread, AR disagreements of
    lossless methods, lossy methods, code that was not run."""
    notes = []
    for scorer, group in quality.groupby("scorer", sort=False):
        name = METRIC_NAMES.get(scorer, scorer)
        spans = ", ".join(f"{r['method_label']} {r['correct']}/{r['n']} [{r['low']:.0%}, {r['high']:.0%}]"
                          for _, r in group.iterrows() if r["n"])
        if spans:
            notes.append(f"{name} ({scorer}): correct/n [95% Wilson interval]: {spans}.")
        if group["not_run"].sum() and scorer == "humaneval":
            notes.append("pass@1 not computed: model-written code runs only with `specbench report RUN "
                         "--execute-code` (each program sandboxed; see docs/metrics.md).")
        for _, r in group.iterrows():
            if r["lossless"] and r["ar_differs"]:
                notes.append(f"{r['method_label']} (BC {r['block_complexity']}): {name} differs from AR's on "
                             f"{r['ar_differs']} of {r['ar_compared']} answers although it claims to be lossless.")
    return notes
