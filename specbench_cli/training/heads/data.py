"""Data for draft heads: prompts, the target's own answers, and cached target features.

1. Prompts: the shipped seed instructions plus templated ones written for this project
   (`heads_prompts`); none is a Spec-Bench question (`spec_bench_overlap` checks it).
2. Answers: the target answers them through the distillation-data pipeline
   (`distill_data.generate_distill_data`, greedy by default: heads are judged on greedy decoding).
3. Features: one batched target forward per batch of (prompt + answer) sequences gives the last
   hidden state after the final norm at every position; they are cached once to a folder
   (`features.safetensors` + `features.json`, never pickles) and every head trains from it.
   The target's logits are NOT cached: they are `lm_head(feature)`, recomputed per step (a cached
   49k-wide row would be 100 KB per token).
   An EAGLE-3 cache (`feature_layers` given) also holds the inputs of three target layers
   ([N, 3h]) and the target's full-vocabulary top-1 at each token (for EAGLE-3's loss mask).
"""

from __future__ import annotations

import itertools
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from specbench_cli.errors import UsageError
from specbench_cli.jsonl import read_objects
from specbench_cli.training.draft_model.distill_data import load_seeds

FEATURES_FILE = "features.safetensors"
FEATURES_META = "features.json"

_SUBJECTS = ["a retired clockmaker", "a lost umbrella", "a robot gardener", "a tired night-bus driver",
             "a fox who collects buttons", "two rival bakers", "a lighthouse cat", "a child learning to swim",
             "an old library ghost", "a beekeeper in the city", "a snowman in spring", "a shy violinist"]
_FORMS = ["a short story", "a limerick", "a six-line poem", "a diary entry", "a dialogue", "a fable with a moral"]
_CONCEPTS = ["photosynthesis", "compound interest", "how vaccines train the immune system", "what a black hole is",
             "why bread rises", "how a bicycle stays upright", "what inflation means", "how rainbows form",
             "the difference between weather and climate", "how a refrigerator keeps food cold",
             "what an algorithm is", "why the moon has phases", "how batteries store energy", "what DNA does"]
_AUDIENCES = ["a ten-year-old", "a busy manager", "a first-year student", "my grandmother"]
_CODE_TASKS = ["reverses the words in a sentence", "counts the vowels in a string", "checks whether a number is prime",
               "merges two sorted lists", "returns the n-th Fibonacci number", "removes duplicates from a list "
               "while keeping order", "converts Celsius to Fahrenheit", "finds the longest word in a text",
               "computes the average of a list of numbers", "checks whether a string is a palindrome",
               "flattens a nested list", "counts how often each character appears"]
_LANGS = ["Python", "JavaScript"]
_TOPICS = ["learning a second language", "working from home", "keeping houseplants alive", "saving money on groceries",
           "getting better sleep", "starting to run", "reducing plastic waste", "planning a small garden",
           "preparing for a job interview", "staying focused while studying"]
_LIST_FORMS = ["Give five practical tips for {t}.", "What are the pros and cons of {t}?",
               "Write a short checklist for {t}.", "Explain the three most common mistakes people make when {t}."]
_NUMS = [(12, 7), (48, 15), (125, 8), (63, 27), (19, 44), (250, 36), (81, 9), (17, 32)]
_MATH_FORMS = ["A shop sells pencils at {a} cents each. How much do {b} pencils cost? Explain.",
               "What is {a} times {b}? Show the steps.", "If I read {b} pages a day, how many days do I need "
               "for a book of {a}0 pages?", "What is the remainder when {a}{b} is divided by 7?"]


def template_prompts() -> list[dict]:
    """Deterministic templated instructions (about 350), ids `tpl-N`, categories as the seed file."""
    rows = []
    for form, subj in itertools.product(_FORMS, _SUBJECTS):
        rows.append(("writing", f"Write {form} about {subj}."))
    for concept, who in itertools.product(_CONCEPTS, _AUDIENCES):
        rows.append(("qa", f"Explain {concept} to {who}."))
    for task, lang in itertools.product(_CODE_TASKS, _LANGS):
        rows.append(("coding", f"Write a {lang} function that {task}, with a short explanation."))
    for topic, form in itertools.product(_TOPICS, _LIST_FORMS):
        rows.append(("advice", form.format(t=topic)))
    for (a, b), form in itertools.product(_NUMS, _MATH_FORMS):
        rows.append(("math", form.format(a=a, b=b)))
    random.Random(0).shuffle(rows)  # mixed categories in any prefix
    return [{"id": f"tpl-{i}", "category": c, "instruction": t} for i, (c, t) in enumerate(rows)]


def heads_prompts(limit: int | None = None) -> list[dict]:
    """Shipped seed instructions first, then the templated ones; first `limit` rows."""
    rows = load_seeds() + template_prompts()
    if limit is not None:
        if limit < 1:
            raise UsageError("--prompts must be >= 1")
        rows = rows[:limit]
    return rows


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def spec_bench_overlap(prompts: list[dict], questions: Path) -> list[str]:
    """Instructions equal (case/space-insensitive) to a turn of a Spec-Bench question file, or
    containing one / contained in one when both are longer than 40 characters."""
    turns = set()
    for _, row in read_objects(Path(questions), "questions file"):  # the guarded reader (jsonl.py)
        found = row.get("turns", [])
        turns.update(_norm(t) for t in ([found] if isinstance(found, str) else found) if isinstance(t, str))
    bad = []
    for p in prompts:
        q = _norm(p["instruction"])
        if q in turns or any(len(q) > 40 and len(t) > 40 and (q in t or t in q) for t in turns):
            bad.append(p["instruction"])
    return bad


# ----------------------------------------------------------------------------- feature cache

@dataclass
class FeatureCache:
    """Target features of E sequences, concatenated.

    tokens:   [N] int64 token ids of all sequences back to back.
    features: [N, h] float16 last hidden state (after the final norm) at each token.
    offsets:  [E + 1] int64, sequence e is rows offsets[e]:offsets[e+1].
    starts:   [E] int64, first position (relative to the sequence) whose next token is a response
              token; positions starts[e] .. len-2 are the loss positions.
    meta:     dict from features.json (target, data, prompts, tokens, dtype, seconds; "kind":
              "eagle3" and "feature_layers" for an EAGLE-3 cache).
    layers:   EAGLE-3 caches only: [N, 3h] float16, the inputs of the three target layers
              (methods/heads/eagle3/training.py); None in a plain cache.
    top1:     EAGLE-3 caches only: [N] int64, the target's full-vocabulary argmax at each token.
    """

    tokens: Any
    features: Any
    offsets: Any
    starts: Any
    meta: dict
    layers: Any = None
    top1: Any = None

    @property
    def kind(self) -> str:
        """"eagle3" (three layers' inputs cached too) or "plain" (the last hidden state only)."""
        return "eagle3" if self.layers is not None else "plain"

    def __len__(self) -> int:
        return len(self.starts)

    def response_tokens(self, seqs: list[int] | None = None) -> int:
        """Loss positions of sequences `seqs` (default: all)."""
        seqs = range(len(self)) if seqs is None else seqs
        return int(sum(int(self.offsets[e + 1] - self.offsets[e] - self.starts[e] - 1) for e in seqs))


def build_feature_cache(target: Any, tokenizer: Any, rows: list[dict], out: Path, max_len: int = 512,
                        batch_size: int = 8, meta: dict | None = None,
                        on_batch: Callable[[int], None] | None = None,
                        feature_layers: tuple[int, ...] | None = None) -> FeatureCache:
    """Forward the target over every (prompt + response) row once and save features to `out`.

    Sequences are sorted by length before batching (little padding); right padding keeps the
    real tokens' positions and states identical to an unpadded forward. With `feature_layers`
    (EAGLE-3) the inputs of those layers (`hidden_states[i]`, concatenated in the given order)
    and the target's top-1 token are cached too.
    """
    import time

    import torch

    from specbench_cli.training.draft_model.distill_data import stop_token_ids
    from specbench_cli.training.draft_model.finetune import build_examples, collate, model_device

    t0 = time.time()
    examples = sorted(build_examples(rows, tokenizer, target, max_len), key=lambda e: len(e.input_ids))
    if not examples:
        raise UsageError("no usable row (empty responses?) to compute features on")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop_token_ids(tokenizer, target)[0]
    toks, feats, lens, layers, top1 = [], [], [], [], []
    decoder = target.get_decoder()
    lm_head = target.get_output_embeddings()
    with torch.no_grad():
        for i in range(0, len(examples), batch_size):
            chunk = examples[i:i + batch_size]
            ids, att, _ = collate(chunk, pad, model_device(target))
            out_b = decoder(input_ids=ids, attention_mask=att, output_hidden_states=feature_layers is not None)
            hidden = out_b.last_hidden_state  # [B, T, h] after final norm
            if feature_layers is not None:  # hidden_states[i] is the input of layer i
                three = torch.cat([out_b.hidden_states[j] for j in feature_layers], dim=-1)
            for b, e in enumerate(chunk):
                n = len(e.input_ids)
                toks.append(torch.tensor(e.input_ids, dtype=torch.long))
                feats.append(hidden[b, :n].to(torch.float16).cpu())
                lens.append(n)
                if feature_layers is not None:
                    layers.append(three[b, :n].to(torch.float16).cpu())
                    top1.append(lm_head(hidden[b, :n]).argmax(-1).cpu())
            if on_batch:
                on_batch(len(chunk))
    offsets = torch.zeros(len(lens) + 1, dtype=torch.long)
    offsets[1:] = torch.tensor(lens).cumsum(0)
    cache = FeatureCache(torch.cat(toks), torch.cat(feats), offsets,
                         torch.tensor([e.start for e in examples], dtype=torch.long), {})
    meta = dict(meta or {})
    if feature_layers is not None:
        cache.layers, cache.top1 = torch.cat(layers), torch.cat(top1).long()
        meta["feature_layers"] = [int(j) for j in feature_layers]
    return _save_cache(cache, out, meta, max_len=max_len, seconds=round(time.time() - t0, 1))


def _save_cache(cache: FeatureCache, out: Path, meta: dict, **extra: Any) -> FeatureCache:
    """Write `cache` to the folder `out`: the tensors, and features.json = `meta`, the cache's
    size (sequences, tokens, response tokens, hidden size, float16 features), then `extra`."""
    from safetensors.torch import save_file

    from specbench_cli.atomic import atomic_write
    from specbench_cli.errors import link_refused
    from specbench_cli.training.common.io import write_json

    out = Path(out).expanduser()
    if out.is_symlink():  # the cache is written into a folder of its own, not into one a link names
        raise link_refused(out)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {"tokens": cache.tokens, "features": cache.features, "offsets": cache.offsets, "starts": cache.starts}
    if cache.layers is not None:
        tensors.update(layers=cache.layers, top1=cache.top1)
    # atomic: a link planted at the name is replaced, never written through
    atomic_write(out / FEATURES_FILE, lambda tmp: save_file(tensors, str(tmp)))
    cache.meta = {**meta, "kind": cache.kind, "sequences": len(cache), "tokens": int(cache.offsets[-1]),
                  "response_tokens": cache.response_tokens(), "hidden_size": int(cache.features.shape[1]),
                  "feature_dtype": "float16", **extra}
    write_json(out / FEATURES_META, cache.meta)
    return cache


def load_feature_cache(folder: Path) -> FeatureCache:
    """Read a cache written by `build_feature_cache` (safetensors + JSON only)."""
    from safetensors.torch import load_file

    folder = Path(folder).expanduser()
    if not (folder / FEATURES_FILE).is_file() or not (folder / FEATURES_META).is_file():
        raise UsageError(f"{folder} is not a feature cache (needs {FEATURES_FILE} and {FEATURES_META})")
    t = load_file(str(folder / FEATURES_FILE))
    return FeatureCache(t["tokens"], t["features"], t["offsets"], t["starts"],
                        json.loads((folder / FEATURES_META).read_text()), t.get("layers"), t.get("top1"))


def split_cache(cache: FeatureCache, holdout: float, seed: int = 0) -> tuple[list[int], list[int]]:
    """Sequence indices (train, held out); a fixed random `holdout` share is held out."""
    idx = list(range(len(cache)))
    random.Random(seed).shuffle(idx)
    n_held = int(round(len(idx) * holdout)) if len(idx) > 1 else 0
    return sorted(idx[n_held:]), sorted(idx[:n_held])


def make_batch(cache: FeatureCache, seqs: list[int], device=None, max_len: int | None = None):
    """Right-padded batch of cached sequences.

    Returns tokens [B, T] long, features [B, T, h] float32, valid [B, T] bool (real token),
    loss [B, T] bool (position t predicts a response token: starts <= t < len - 1).
    `max_len` crops every sequence to its last `max_len` tokens' window starting at 0.
    """
    import torch

    lens = [int(cache.offsets[s + 1] - cache.offsets[s]) for s in seqs]
    if max_len:
        lens = [min(n, max_len) for n in lens]
    width, h = max(lens), cache.features.shape[1]
    tokens = torch.zeros(len(seqs), width, dtype=torch.long)
    feats = torch.zeros(len(seqs), width, h)
    valid = torch.zeros(len(seqs), width, dtype=torch.bool)
    loss = torch.zeros(len(seqs), width, dtype=torch.bool)
    for b, (s, n) in enumerate(zip(seqs, lens)):
        o = int(cache.offsets[s])
        tokens[b, :n] = cache.tokens[o:o + n]
        feats[b, :n] = cache.features[o:o + n].float()
        valid[b, :n] = True
        loss[b, int(cache.starts[s]):n - 1] = True
    return tokens.to(device), feats.to(device), valid.to(device), loss.to(device)


def merge_feature_caches(folders: list[Path], out: Path) -> FeatureCache:
    """Concatenate feature caches of one target into a new cache folder `out` (sequences in the
    given order; offsets shifted). Lets new self-distillation data join an old cache without a
    second target pass over the old rows. features.json records each part's meta under "parts".
    """
    import torch

    if not folders:
        raise UsageError("merge needs at least one feature cache")
    parts = [load_feature_cache(f) for f in folders]
    targets = {p.meta.get("target") for p in parts}
    widths = {int(p.features.shape[1]) for p in parts}
    if len(targets) != 1 or len(widths) != 1:
        raise UsageError(f"feature caches of different targets or widths cannot be merged: {targets}, {widths}")
    offsets, base = [torch.zeros(1, dtype=torch.long)], 0
    for p in parts:
        offsets.append(p.offsets[1:] + base)
        base += int(p.offsets[-1])
    cache = FeatureCache(torch.cat([p.tokens for p in parts]), torch.cat([p.features for p in parts]),
                         torch.cat(offsets), torch.cat([p.starts for p in parts]), {})
    extra = {}
    layer_sets = {tuple(p.meta.get("feature_layers") or ()) if p.layers is not None else None for p in parts}
    if len(layer_sets) == 1 and None not in layer_sets:  # all EAGLE-3 caches of the same layers stay one
        cache.layers, cache.top1 = torch.cat([p.layers for p in parts]), torch.cat([p.top1 for p in parts])
        extra["feature_layers"] = list(layer_sets.pop())
    data = " + ".join(str(p.meta.get("data", "?")) for p in parts)
    return _save_cache(cache, out, {"target": targets.pop(), "data": data, **extra},
                       max_len=max(int(p.meta.get("max_len", 0)) for p in parts),
                       parts=[{**p.meta, "folder": str(f)} for p, f in zip(parts, folders)])
