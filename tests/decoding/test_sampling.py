"""Sampling is exact: every lossless method's output is distributed as plain sampling from the
target (temperature, top-p), not merely "close to it". Every registered method that declares
itself lossless is run (trees and head methods included, each given what it requires: tiny heads
and a datastore built for this test's target, a draft model), so a new method joins by
registering.

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

Configurations and cost: temperature 0.7 and 1.0, each with and without top-p 0.9. All four
for every method would cost ~4 x 15 x N generations, more than these tests may take on two
CPU cores, so each method runs two: both temperatures, one with top-p and one without, the
assignment alternating along the registry (method i gets top-p 0.9 at temperature 0.7 when i is
odd, at 1.0 when i is even). Every configuration is thus run by about half the methods, and
every method meets both temperatures and both nucleus settings.

Power: N = 800 generations per (method, configuration) gives tolerances of 0.13-0.16 (from
28-44 cells); with DELTA = 1e-3 over ~30 checks the chance of any false alarm is under 3 %
(in practice far less: the Jensen and McDiarmid terms are both loose). The wrong rules below
land at TV 0.2-0.35 at the same N, so an error of that size in any method would
fail its check; an error that moves less than ~0.1 of probability mass among the first three
tokens could pass. The drafting paths must also have been exercised (draft tokens accepted, and
drafts refused, over a method's configurations), so a method cannot pass by drafting nothing.

Each test that says "the rule is exact" is paired with one that swaps in a wrong rule (two chain
rules and one tree rule) and shows the same statistic rejects it, so the tolerance is not too
loose to catch anything.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from helpers.artifacts import artifact_options, expects_acceptance
from helpers.tiny import EOS, make_model, make_tokenizer, save_noisy_copy

from specbench_cli import methods
from specbench_cli.decoding import decoder as loop
from specbench_cli.decoding.draft import Draft, children_lists
from specbench_cli.decoding.drafter import Structure
from specbench_cli.decoding.verify import SamplingConfig, Verdict, target_probs, verify_sampling
from specbench_cli.methods.core.method import MethodContext
from specbench_cli.targets import as_target

# a repeated n-gram (lookup drafters draft something) on which the target is unsure at both
# temperatures: ~25-45 cells of the first three tokens, none above ~0.6
PROMPT = [2, 67, 109, 115, 46, 35, 2, 67, 109, 115]
N = 800           # generations per (method, configuration)
DEPTH = 3         # tokens per outcome
MAX_NEW = DEPTH + 1  # the first step's draft then covers the 2nd and 3rd outcome tokens
BUDGET = 6        # room for sibling drafts in trees; chains are clipped to what is left
MIN_MASS = 0.005  # prefixes below this probability are pooled into "other"
DELTA = 1e-3      # false alarm probability of one TV check
OTHER = "other"

LOSSLESS = [n for n in methods.names() if methods.get(n).lossless]
CONFIGS = {f"T{t}-p{p}": SamplingConfig(temperature=t, top_p=p) for t in (0.7, 1.0) for p in (1.0, 0.9)}


def configs_of(i: int) -> list[str]:
    """The two configurations registry method `i` runs: both temperatures, one of them with top-p."""
    return ["T0.7-p0.9", "T1.0-p1.0"] if i % 2 else ["T0.7-p1.0", "T1.0-p0.9"]


CASES = [(name, key) for i, name in enumerate(LOSSLESS) for key in configs_of(i)]


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


# Two layers (EAGLE-3's tiny head reads both), tied, sharpness 12: on PROMPT the next-token
# distribution at temperature 0.7 / 1.0 spreads the first three tokens over a few dozen cells
# that N samples fill.
SHARPEN = 12.0


@pytest.fixture(scope="module")
def target():
    return make_model(0, layers=2, sharpen=SHARPEN, tie=True)


@pytest.fixture(scope="module")
def exact(target):
    cells = {key: exact_cells(target, PROMPT, cfg) for key, cfg in CONFIGS.items()}
    for key, c in cells.items():
        assert 10 <= len(c) <= 60, f"{key}: the coarsening should leave a few dozen well-filled cells"
    return cells


@pytest.fixture(scope="module")
def draft_dir(target, tmp_path_factory):
    """The target with noise on every weight: it agrees with the target on some tokens and not
    on others, so both acceptance and rejection (residual resampling) happen often."""
    model = make_model(0, layers=2, sharpen=SHARPEN, tie=True)
    return save_noisy_copy(model, tmp_path_factory.mktemp("sampling-draft"), 0.5, seed=7)


@pytest.fixture(scope="module")
def tiny_head_folders(target, tmp_path_factory):
    """Overrides the shared heads (trained on another tiny model): heads of every kind trained on
    this test's target, so head drafts get accepted and refused in earnest."""
    from helpers.tiny_eagle3 import train_tiny_eagle3
    from helpers.tiny_heads import train_tiny_heads

    out = tmp_path_factory.mktemp("sampling-heads")
    from helpers.tiny_dflash import train_tiny_dflash

    return {**train_tiny_heads(target, make_tokenizer(), out), "eagle3": train_tiny_eagle3(target, out / "eagle3"),
            "dflash": train_tiny_dflash(target, out / "dflash")}


@pytest.fixture(scope="module")
def tiny_datastore(target, tmp_path_factory):
    """Overrides the shared datastore: this target's greedy answers to PROMPT and its prefixes."""
    pytest.importorskip("draftretriever")
    from specbench_cli.methods.retrieval.datastore import write

    dec = loop.Decoder(as_target(target), {EOS})
    ar = methods.get("ar").create(MethodContext(target, make_tokenizer(), budget=1))
    prompts = [PROMPT, PROMPT[:6], PROMPT[3:]]
    seqs = [p + dec.generate(ar, p, 32, 1).output_ids for p in prompts]
    out = tmp_path_factory.mktemp("sampling-ds") / "store"
    write(seqs, make_tokenizer(), out, ["sampling answers"])
    return str(out)


def run_method(target, name: str, cfg: SamplingConfig, n: int, draft_dir: str, request):
    """Outcomes, accepted draft tokens and refused drafts of `n` generations, generation i with
    verifier seed i."""
    dec = loop.Decoder(as_target(target), {EOS}, cfg)
    ctx = MethodContext(target, make_tokenizer(), budget=BUDGET, sampling=cfg, seed=0, draft_model=draft_dir)
    method = methods.get(name).create(ctx, **artifact_options(methods.get(name), request))
    outcomes, accepted, refused = [], 0, 0
    for i in range(n):
        g = dec.generate(method, PROMPT, MAX_NEW, BUDGET, torch.Generator().manual_seed(i))
        outcomes.append(g.output_ids)
        accepted += sum(g.accept_lengths) - g.steps
        refused += sum(path > length - 1 for path, length in zip(g.draft_path_lengths, g.accept_lengths))
    return outcomes, accepted, refused


def check(outcomes: list, exact: dict) -> tuple[float, float]:
    counts = Counter(cell_of(o, exact) for o in outcomes)
    return tv(counts, exact, len(outcomes)), tv_tolerance(list(exact.values()), len(outcomes))


@pytest.mark.parametrize("name,config", CASES, ids=[f"{n}-{k}" for n, k in CASES])
def test_sampled_outputs_follow_the_target_distribution(target, exact, draft_dir, request, name, config):
    outcomes, accepted, refused = run_method(target, name, CONFIGS[config], N, draft_dir, request)
    dist, tol = check(outcomes, exact[config])
    EXERCISED[name][0] += accepted
    EXERCISED[name][1] += refused
    assert dist <= tol, f"{name} at {config}: TV {dist:.3f} to the exact distribution exceeds {tol:.3f}"


# method -> [draft tokens accepted, drafts refused] over its configurations (filled above)
EXERCISED: dict[str, list[int]] = {name: [0, 0] for name in LOSSLESS}


@pytest.mark.parametrize("name", [n for n in LOSSLESS if expects_acceptance(methods.get(n))])
def test_the_distribution_checks_exercised_the_drafting_paths(name):
    """Not just the bonus token: over its configurations each drafting method had draft tokens
    accepted and drafts refused (the residual / miss path), so its check tested the verifier on
    its drafts. (At one configuration alone a method may draft nothing the target samples.)"""
    accepted, refused = EXERCISED[name]
    if not accepted and not refused:
        pytest.skip("its distribution checks did not run in this test run")
    assert accepted > N // 100, f"{name}: only {accepted} draft tokens accepted"
    assert refused > N // 20, f"{name}: only {refused} drafts refused"


def test_every_configuration_and_both_kinds_of_draft_are_covered():
    covered = {key for _, key in CASES}
    assert covered == set(CONFIGS)
    structures = {methods.get(n).structure for n in LOSSLESS}
    assert {Structure.CHAIN, Structure.TREE} <= structures


def accept_always(draft: Draft, logits: torch.Tensor, cfg: SamplingConfig, generator) -> Verdict:
    """A deliberately wrong rule: every draft token is kept; only the bonus comes from q."""
    q = target_probs(logits, cfg)
    bonus = int(torch.multinomial(q[len(draft)].cpu(), 1, generator=generator))
    return Verdict(list(range(len(draft))), list(draft.tokens) + [bonus])


def sibling_without_residual(draft: Draft, logits: torch.Tensor, cfg: SamplingConfig, generator) -> Verdict:
    """A wrong tree rule (chains with drafter probabilities keep the exact one): a node's
    children are tried in turn, each accepted with probability q(its token), but a refused
    sibling's token is not removed from q before the next sibling is tried or the bonus drawn.
    Exact would be to test each sibling against normalise(q without the refused tokens) and draw
    the bonus from what is left, which is what drawing x ~ q and matching a child amounts to."""
    if draft.probs is not None and draft.is_chain and draft.acceptable is None:
        return verify_sampling(draft, logits, cfg, generator)
    q = target_probs(logits, cfg)
    tokens, children = draft.tokens, children_lists(draft.parents)
    accepted, row = [], 0
    while True:
        for c in children[row]:
            if (draft.acceptable is None or draft.acceptable[c]) and \
                    float(torch.rand(1, generator=generator)) < float(q[row, tokens[c]]):
                accepted.append(c)
                row = c + 1
                break
        else:
            bonus = int(torch.multinomial(q[row].cpu(), 1, generator=generator))
            return Verdict(accepted, [tokens[a] for a in accepted] + [bonus], rejected=bool(children[row]))


# the wrong tree rule runs on recycling: its root offers several tokens seen after the root token
# (siblings at most steps), which this target often samples; TV ~0.25 against tolerance ~0.14
SIBLING_METHOD, SIBLING_CONFIG = "recycling", "T0.7-p1.0"


@pytest.mark.parametrize("rule", ["accept-always", "residual-from-q", "sibling-without-residual"])
def test_the_statistic_rejects_a_wrong_rule_end_to_end(target, exact, draft_dir, request, monkeypatch, rule):
    """The same check, with a wrong verifier swapped in (sps for the chain rules, a tree method
    for the sibling rule), must fail at N samples (TV ~0.2-0.35 against tolerances ~0.13-0.14)."""
    monkeypatch.setattr(loop, "verify_sampling", {"accept-always": accept_always,
                                                  "residual-from-q": residual_from_q,
                                                  "sibling-without-residual": sibling_without_residual}[rule])
    name, key = (SIBLING_METHOD, SIBLING_CONFIG) if rule == "sibling-without-residual" else ("sps", "T0.7-p0.9")
    outcomes, _, _ = run_method(target, name, CONFIGS[key], N, draft_dir, request)
    dist, tol = check(outcomes, exact[key])
    assert dist > tol, f"{rule} ({name}) gave TV {dist:.3f} <= {tol:.3f}: the test could not catch it"


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
