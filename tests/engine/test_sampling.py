"""Sampling is exact: every lossless method's output is distributed as plain sampling from the
target (temperature, top-p), not merely "close to it".

Statistic: the total variation distance (TV) between the empirical distribution of N
outcomes and the exact distribution. Tolerance, for a false alarm probability <= DELTA:

    E[TV] <= 1/2 * sum_c sqrt(p_c (1 - p_c) / N)           (Jensen, per cell)
    P(TV >= E[TV] + t) <= exp(-2 N t^2)                      (McDiarmid: one sample moves TV by <= 1/N)
    => tol = 1/2 * sum_c sqrt(p_c (1 - p_c) / N) + sqrt(ln(1/DELTA) / (2 N))

The bound only holds with few cells, so the joint distribution of the first three generated
tokens is coarsened: every prefix of probability >= MIN_MASS is its own cell and everything
else is one "other" cell (TV on a coarsening is a lower bound of the full TV, so a passing
test is still evidence of exactness and a failing one still proves a bug). The exact cell
probabilities come from batched target forwards over all kept prefixes.

Each test that says "the rule is exact" is paired with one that swaps in a wrong rule and
shows the same statistic rejects it, so the tolerance is not too loose to catch anything.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from helpers.tiny import EOS, make_model, make_tokenizer, save_tiny

from specbench_cli import methods
from specbench_cli.engine import loop
from specbench_cli.engine.draft import Draft
from specbench_cli.engine.verify import SamplingConfig, Verdict, target_probs, verify_sampling
from specbench_cli.methods.core.method import MethodContext

CFG = SamplingConfig(temperature=1.0, top_p=0.9)
PROMPT = [2, 5, 9, 14, 7, 3, 2, 6, 9, 14]   # repeated n-grams: pld drafts something
N = 1500          # generations per method (TV tolerance ~0.087 with the cells below)
DEPTH = 3         # tokens per outcome
MIN_MASS = 0.005  # prefixes below this probability are pooled into "other"
DELTA = 1e-3      # false alarm probability of one TV check
OTHER = "other"


def tv_tolerance(probs: list[float], n: int, delta: float = DELTA) -> float:
    expected = 0.5 * sum(math.sqrt(p * (1 - p) / n) for p in probs)
    return expected + math.sqrt(math.log(1 / delta) / (2 * n))


def tv(counts: Counter, exact: dict, n: int) -> float:
    cells = set(exact) | set(counts)
    return 0.5 * sum(abs(counts.get(c, 0) / n - exact.get(c, 0.0)) for c in cells)


@torch.inference_mode()
def exact_cells(model, prompt: list[int], cfg: SamplingConfig, depth: int = DEPTH,
                min_mass: float = MIN_MASS) -> dict:
    """`{token tuple of length depth: probability}` for all outcomes of probability >= min_mass,
    plus `OTHER` with the remaining mass."""
    frontier = {(): 1.0}
    for _ in range(depth):
        prefixes = list(frontier)
        batch = torch.tensor([prompt + list(s) for s in prefixes])
        q = target_probs(model(input_ids=batch).logits[:, -1], cfg).double()
        nxt = {}
        for s, row in zip(prefixes, q):
            mass = row * frontier[s]
            for t in (mass >= min_mass).nonzero().flatten().tolist():
                nxt[s + (t,)] = float(mass[t])
        frontier = nxt
    frontier[OTHER] = max(0.0, 1.0 - sum(frontier.values()))
    return frontier


def cell_of(tokens: list[int], exact: dict):
    key = tuple(tokens[:DEPTH])
    return key if key in exact else OTHER


# Sharpness 9 at temperature 1 / top-p 0.9: the target's next-token nucleus holds ~30 tokens,
# the top one with ~0.75, so outcomes spread over a few dozen cells that N samples fill.
SHARPEN = 9.0


@pytest.fixture(scope="module")
def target():
    return make_model(0, layers=1, sharpen=SHARPEN, tie=True)


@pytest.fixture(scope="module")
def exact(target):
    cells = exact_cells(target, PROMPT, CFG)
    assert 5 <= len(cells) <= 60, "the coarsening should leave a handful of well-filled cells"
    return cells


@pytest.fixture(scope="module")
def draft_dir(tmp_path_factory):
    # a different random model: it agrees with the target on some tokens and not on others,
    # so both acceptance and rejection (residual resampling) happen often
    return str(save_tiny(tmp_path_factory.mktemp("sampling-draft"), seed=1, layers=1, sharpen=SHARPEN, tie=True))


def run_method(target, name: str, budget: int, max_new: int, n: int, draft_dir: str):
    """Outcomes and acceptance counts of `n` generations, generation i with verifier seed i."""
    dec = loop.Decoder(target, {EOS}, CFG)
    ctx = MethodContext(target, make_tokenizer(), budget=budget, sampling=CFG, seed=0, draft_model=draft_dir)
    method = methods.get(name).create(ctx)
    outcomes, accepted, rejected = [], 0, 0
    for i in range(n):
        g = dec.generate(method, PROMPT, max_new, budget, torch.Generator().manual_seed(i))
        outcomes.append(g.output_ids)
        if g.steps:
            accepted += g.accept_lengths[0] - 1
            rejected += g.accept_lengths[0] - 1 < g.draft_sizes[0]
    return outcomes, accepted, rejected


# (method, block complexity, tokens generated): sps drafts 2 tokens at its first step, so the
# 2nd and 3rd outcome tokens come from draft positions 1 and 2 (acceptance or residual).
CASES = [("ar", 1, DEPTH), ("sps", 3, DEPTH + 1), ("pld", 3, DEPTH)]


@pytest.mark.parametrize("name,budget,max_new", CASES, ids=[c[0] for c in CASES])
def test_sampled_outputs_follow_the_target_distribution(target, exact, draft_dir, name, budget, max_new):
    outcomes, accepted, rejected = run_method(target, name, budget, max_new, N, draft_dir)
    counts = Counter(cell_of(o, exact) for o in outcomes)
    dist, tol = tv(counts, exact, N), tv_tolerance(list(exact.values()), N)
    assert dist <= tol, f"{name}: TV {dist:.3f} to the exact distribution exceeds {tol:.3f}"
    if name != "ar":  # the test must exercise the drafting paths, not just the bonus token
        assert accepted > N // 20, f"{name}: only {accepted} draft tokens accepted at the first step"
    if name == "sps":
        assert rejected > N // 20, "sps: the rejection / residual path was hardly exercised"


def accept_always(draft: Draft, logits: torch.Tensor, cfg: SamplingConfig, generator) -> Verdict:
    """A deliberately wrong rule: every draft token is kept; only the bonus comes from q."""
    q = target_probs(logits, cfg)
    bonus = int(torch.multinomial(q[len(draft)].cpu(), 1, generator=generator))
    return Verdict(list(range(len(draft))), list(draft.tokens) + [bonus])


@pytest.mark.parametrize("rule", ["accept-always", "residual-from-q"])
def test_the_statistic_rejects_a_wrong_rule_end_to_end(target, exact, draft_dir, monkeypatch, rule):
    """The same check, with sps and a wrong verifier swapped in, must fail (TV ~0.31 and ~0.17
    against tolerance ~0.12 at N/2 samples)."""
    monkeypatch.setattr(loop, "verify_sampling", {"accept-always": accept_always,
                                                  "residual-from-q": residual_from_q}[rule])
    n = N // 2
    outcomes, _, _ = run_method(target, "sps", 3, DEPTH + 1, n, draft_dir)
    counts = Counter(cell_of(o, exact) for o in outcomes)
    dist, tol = tv(counts, exact, n), tv_tolerance(list(exact.values()), n)
    assert dist > tol, f"{rule} gave TV {dist:.3f} <= {tol:.3f}: the test could not catch it"


# ----------------------------------------------------------------------------- verifier unit test

Q = torch.tensor([[0.4, 0.3, 0.2, 0.1],    # target at the root
                  [0.1, 0.1, 0.2, 0.6],    # after the first draft token
                  [0.25, 0.25, 0.25, 0.25]])
P = torch.tensor([[0.1, 0.2, 0.3, 0.4],    # drafter at the root
                  [0.7, 0.1, 0.1, 0.1]])
TRIALS = 20000


def residual_from_q(draft: Draft, logits: torch.Tensor, cfg: SamplingConfig, generator) -> Verdict:
    """A subtler wrong rule: correct acceptance test, but the replacement is drawn from q
    instead of normalise(max(q - p, 0))."""
    q = target_probs(logits, cfg)
    p = draft.probs
    u = torch.rand(len(draft), generator=generator).tolist()
    for i, tok in enumerate(draft.tokens):
        if u[i] >= min(1.0, float(q[i, tok] / p[i, tok])):
            return Verdict(list(range(i)), list(draft.tokens[:i]) + [int(torch.multinomial(q[i], 1, generator=generator))])
    return Verdict(list(range(len(draft))), list(draft.tokens) + [int(torch.multinomial(q[-1], 1, generator=generator))])


def emitted(rule, trials: int = TRIALS) -> tuple[Counter, Counter, int]:
    """Over `trials` verify steps of a 2-token chain drafted from P (as a draft model would):
    counts of the first emitted token, counts of the second one (steps that accepted the
    first draft), and how many first drafts were accepted."""
    g = torch.Generator().manual_seed(0)
    logits = Q.log()
    cfg = SamplingConfig(temperature=1.0, top_p=1.0)
    d1 = torch.multinomial(P[0], trials, replacement=True, generator=g).tolist()
    d2 = torch.multinomial(P[1], trials, replacement=True, generator=g).tolist()
    first, second, accepted = Counter(), Counter(), 0
    for a, b in zip(d1, d2):
        v = rule(Draft.chain([a, b], P.clone()), logits, cfg, g)
        first[v.new_tokens[0]] += 1
        if v.accepted:
            accepted += 1
            second[v.new_tokens[1]] += 1
    return first, second, accepted


def test_verify_sampling_emits_tokens_distributed_as_q():
    first, second, accepted = emitted(verify_sampling)
    row0, row1 = dict(enumerate(Q[0].tolist())), dict(enumerate(Q[1].tolist()))
    dist, tol = tv(first, row0, TRIALS), tv_tolerance(list(row0.values()), TRIALS)
    assert dist <= tol, f"first token: TV {dist:.4f} > {tol:.4f}"
    n2 = sum(second.values())
    dist, tol = tv(second, row1, n2), tv_tolerance(list(row1.values()), n2)
    assert dist <= tol, f"second token (after an accepted draft): TV {dist:.4f} > {tol:.4f}"
    # the first draft is accepted with probability sum(min(p, q)) = 0.6 (binomial sd ~0.0035)
    assert abs(accepted / TRIALS - 0.6) < 0.02


@pytest.mark.parametrize("rule", [accept_always, residual_from_q], ids=["accept-always", "residual-from-q"])
def test_verify_unit_statistic_rejects_wrong_rules(rule):
    counts, _, _ = emitted(rule)
    exact = dict(enumerate(Q[0].tolist()))
    dist, tol = tv(counts, exact, TRIALS), tv_tolerance(list(exact.values()), TRIALS)
    assert dist > tol, f"{rule.__name__}: TV {dist:.4f} <= {tol:.4f}: the test could not catch it"
