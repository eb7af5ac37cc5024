"""The per-step adaptive budget (decoding/budget.py): the acceptance table, the choice as a pure
function of rates and step costs, the trimmed draft, losslessness through the loop, the forward
scale of the whole-step prediction, and bad input."""

from __future__ import annotations

import pytest
import torch
from helpers.cli import cli

from specbench_cli.config import ADAPTIVE, parse_bc
from specbench_cli.config.instance import parse_instance
from specbench_cli.decoding.budget import OUTCOMES, AcceptanceTable, AdaptiveBudget, outcome, subdraft
from specbench_cli.decoding.draft import Draft
from specbench_cli.errors import UsageError
from specbench_cli.run.auto import bcauto

FLAT = [40.0] * 24                                   # a GPU-like step: every q costs the same
STEEP = [40.0 + 4.4 * (q - 1) for q in range(1, 25)]  # a CPU-like step: t(10) = 2 t(1)


def trained(confident: int = 3, unsure: int = 1, n: int = 200) -> AcceptanceTable:
    """Class `confident` chains accepted 3 deep, class `unsure` chains never."""
    t = AcceptanceTable()
    for _ in range(n):
        t.learn(Draft.chain([1, 2, 3, 4, 5], signal=[confident] * 5), [0, 1, 2])
        t.learn(Draft.chain([1, 2, 3, 4, 5], signal=[unsure] * 5), [])
    return t


def test_the_table_counts_offered_nodes_only():
    t = AcceptanceTable()
    # a tree: 0 and 1 below the root, 2 below 0, 3 below 1; the target took 0 then 2
    t.learn(Draft(tokens=[5, 6, 7, 8], parents=[-1, -1, 0, 1], signal=[1, 1, 2, 2]), [0, 2])
    # node 3's parent (1) was rejected: node 3 was never offered
    assert t.counts == {(1, 1): [2, 1], (2, 2): [1, 1]}
    t.learn(Draft.chain([1, 2], signal=None), [])
    assert t.counts[(0, 1)] == [1, 0]


def test_rates_lean_on_the_depth_when_a_class_is_rare():
    t = trained()
    r = AdaptiveBudget(t, FLAT).rate
    assert r(3, 1) > 0.95 and r(1, 1) < 0.05
    # class 7 never seen: its depth's rate over every class
    assert r(7, 1) == pytest.approx(t.rates()[(-1, 1)])
    # a depth class 3 never reached: class 3's own rate over its depths, not the depth's over all classes
    assert r(3, 9) == pytest.approx(t.rates()[(3, -1)]) and r(3, 9) > r(7, 9)
    # an empty table: one half everywhere
    assert AdaptiveBudget(AcceptanceTable(), FLAT).rate(0, 1) == 0.5


def test_probabilities_multiply_along_the_path():
    b = AdaptiveBudget(trained(), FLAT)
    p = b.accept_probs(Draft.chain([1, 2, 3, 4], signal=[3] * 4))
    assert p[1] == pytest.approx(p[0] * b.rate(3, 2)) and p[3] == pytest.approx(p[2] * b.rate(3, 4))
    assert all(a >= c for a, c in zip(p, p[1:]))


def test_a_confident_draft_is_kept_and_an_unsure_one_dropped_on_a_cpu():
    b = AdaptiveBudget(trained(), STEEP, draft_ms=0.5)
    keep, _ = b.plan(Draft.chain([1, 2, 3, 4, 5], signal=[3] * 5))
    assert keep == [0, 1, 2]            # depth 4 is never accepted after depth 3 in the table
    assert b.plan(Draft.chain([1, 2, 3, 4, 5], signal=[1] * 5))[0] == []
    # on a flat cost curve every node is free: an unsure node is still worth verifying
    assert AdaptiveBudget(trained(), FLAT).plan(Draft.chain([1, 2, 3], signal=[1] * 3))[0] == [0, 1, 2]


def test_the_choice_maximises_expected_tokens_per_ms():
    b = AdaptiveBudget(trained(), STEEP, draft_ms=1.0)
    draft = Draft(tokens=[1, 2, 3, 4, 5, 6], parents=[-1, 0, 1, -1, 3, 4], signal=[3, 3, 3, 1, 1, 1])
    keep, value = b.plan(draft)
    probs = b.accept_probs(draft)
    best = max(((1 + sum(probs[i] for i in s)) / (1.0 + STEEP[len(s)]), s)
               for s in ([], [0], [0, 1], [0, 1, 2], [0, 1, 2, 3], [0, 1, 2, 3, 4], [0, 1, 2, 3, 4, 5]))
    assert value == pytest.approx(best[0]) and keep == best[1]


def test_the_trimmed_draft_is_ancestor_closed_and_reindexed():
    d = Draft(tokens=[10, 11, 12, 13], parents=[-1, 0, -1, 2], probs=torch.eye(4), signal=[1, 2, 3, 4])
    s = subdraft(d, [0, 2, 3])
    assert s.tokens == [10, 12, 13] and s.parents == [-1, -1, 1] and s.signal == [1, 3, 4]
    assert torch.equal(s.probs, torch.eye(4)[[0, 2, 3]])
    with pytest.raises(ValueError):
        subdraft(d, [1])                # node 1 without its parent 0
    with pytest.raises(ValueError):
        subdraft(Draft(tokens=[1], parents=[-1], acceptable=[False]), [0])


def test_learning_verifies_whole_drafts_and_frozen_trims():
    b = AdaptiveBudget(AcceptanceTable(), STEEP, learning=True)
    d = Draft.chain([1, 2, 3, 4, 5], signal=[1] * 5)
    assert b.choose(d) is d
    for _ in range(100):
        b.observe(d, [])
    b.freeze()
    assert len(b.choose(d)) == 0
    before = dict(b.table.counts)
    b.observe(d, [0, 1])                # frozen: nothing more is learned
    assert b.table.counts == before


def test_the_table_round_trips_and_bad_records_are_refused():
    t = trained()
    assert AcceptanceTable.from_dict(t.to_dict()).counts == t.counts
    for bad in ({"counts": [[1, 0, 2, 1]]}, {"counts": [[1, 1, 2, 3]]}, {"counts": [[1, 1, True, 0]]},
                {"counts": [], "prior": 0}):
        with pytest.raises(ValueError):
            AcceptanceTable.from_dict(bad)
    with pytest.raises(ValueError):
        AdaptiveBudget(t, [])


def test_adaptive_is_a_budget_word_and_an_instance_suffix():
    assert parse_bc("adaptive") == ADAPTIVE and parse_bc(" Adaptive ") == ADAPTIVE
    assert (parse_instance("pld@adaptive").name, parse_instance("pld@adaptive").budget) == ("pld", ADAPTIVE)
    assert parse_instance("pld").row_label("pld", ADAPTIVE) == "pld@adaptive"
    assert parse_instance("ar").row_label("ar", ADAPTIVE) == "ar"
    with pytest.raises(UsageError):
        parse_bc("adaptiv")


def test_a_method_that_cannot_be_trimmed_is_refused_before_the_model_loads(tmp_path, capsys):
    code, _, err = cli(["run", "--tasks", "mini", "--methods", "lookahead@adaptive", "--model", str(tmp_path / "no"),
                        "--output-dir", str(tmp_path / "o")], capsys)
    assert code == 2
    assert "lookahead" in err and "adaptive" in err and len(err.strip().splitlines()) == 1


def test_the_forward_scale_is_the_loop_forward_time_over_the_curve_s_on_the_same_steps():
    p = bcauto.Profile(budget=4, accept_lengths=[1, 2, 3], budget_used=[1, 2, 4], verify_ms=[50.0, 66.0, 80.0])
    t = {1: 40.0, 2: 44.0, 4: 50.0}.get
    s = (50 + 66 + 80) / (40 + 44 + 50)   # a ratio of sums (per-step ratios 1.25, 1.5, 1.6: median 1.5)
    assert bcauto.fit_scale([p], t) == pytest.approx(s)
    assert bcauto.fit_scale([bcauto.Profile(budget=1)], t) == 1.0
    # the prediction with the scale: tokens over (s t(q) + drafting + other work) = the loop's own time
    p.draft_ms, p.overhead_ms = [1.0] * 3, 3.0
    expected = 1000 * 6 / (50 + 66 + 80 + 3 + 3)
    assert bcauto.predicted_tokens_per_s(p, t, 1, s) == pytest.approx(expected)


def test_an_answer_that_accepts_more_than_calibration_said_earns_longer_drafts():
    """Online learning: calibration said a class-2 node is accepted half the time at every depth
    (when its parent was); this answer accepts every class-2 node it verifies. The class's rates
    rise, the kept part grows, and `begin()` (the next answer) forgets it all."""
    t = AcceptanceTable()
    for depth in range(7):   # accepted exactly `depth` deep: 2^-(depth+1) of the drafts
        for _ in range(2 ** (6 - depth)):
            t.learn(Draft.chain([1, 2, 3, 4, 5, 6], signal=[2] * 6), list(range(depth)))
    draft = Draft.chain(list(range(1, 13)), signal=[2] * 12)
    frozen = AdaptiveBudget(t, STEEP, online=0.0)
    online = AdaptiveBudget(t, STEEP, online=8.0)
    first = len(online.choose(draft))
    assert first == len(frozen.choose(draft))           # nothing seen yet: the frozen choice
    for _ in range(12):
        kept = online.choose(draft)
        online.observe(kept, list(range(len(kept))))     # everything verified was accepted
        frozen.observe(kept, list(range(len(kept))))
    assert online.rate(2, 1) > frozen.rate(2, 1) + 0.3
    assert online.rate(2, 9) > frozen.rate(2, 9)         # a depth never verified rises with its class
    assert len(online.choose(draft)) > first and len(frozen.choose(draft)) == first
    online.begin()
    assert len(online.choose(draft)) == first and online.rate(2, 1) == pytest.approx(frozen.rate(2, 1))
    twin = online.fork()
    twin.observe(draft, list(range(12)))
    assert online.live == {} and twin.live                # a batch row's counts are its own


def test_online_learning_never_raises_a_rate_to_certainty_and_bad_weights_are_refused():
    b = AdaptiveBudget(trained(), STEEP, online=1.0)
    for _ in range(50):
        b.observe(Draft.chain([1, 2, 3], signal=[1] * 3), [0, 1, 2])   # class 1 never accepted before
    assert b.rate(1, 5) <= 0.99
    with pytest.raises(ValueError, match="online"):
        AdaptiveBudget(trained(), STEEP, online=-1)


def test_a_step_s_outcome_is_how_far_its_accepted_path_went():
    chain = Draft.chain([1, 2, 3])
    assert outcome(chain, [0, 1, 2]) == 2 and outcome(chain, [0]) == 1
    assert outcome(chain, []) == 0 and outcome(Draft(), []) == 0
    # a tree: 0 and 1 below the root, 2 below 0; the path 0 -> 2 ends at a leaf, 0 alone does not
    tree = Draft(tokens=[5, 6, 7], parents=[-1, -1, 0])
    assert outcome(tree, [0, 2]) == 2 and outcome(tree, [0]) == 1 and outcome(tree, [1]) == 2


def test_with_history_a_chain_after_a_whole_accepted_chain_is_kept_and_one_after_a_miss_trimmed():
    """The same class-5 chain is accepted whole after a step that took its whole chain and never
    after a step that took nothing: with `history` the budget learns the two apart; without it
    the class is one average."""
    def calibrate(history: bool) -> AdaptiveBudget:
        b = AdaptiveBudget(AcceptanceTable(), STEEP, learning=True, history=history)
        chain = Draft.chain([1, 2, 3, 4, 5, 6], signal=[5] * 6)
        for _ in range(100):
            b.begin()                                   # an answer's first step follows outcome 0
            for _ in range(9):
                b.observe(chain, [])                    # after a miss: missed again
            b.observe(chain, [0])                       # after a miss: one token (outcome 1)
            b.observe(chain, list(range(6)))            # after a part: taken whole (outcome 2)
            for _ in range(5):
                b.observe(chain, list(range(6)))        # after a whole chain: whole again
        b.freeze()
        return b
    draft = Draft.chain(list(range(1, 10)), signal=[5] * 9)
    split = calibrate(True)
    split.begin()
    after_miss = len(split.choose(draft))
    split.observe(Draft.chain([1, 2], signal=[5, 5]), [0, 1])   # a whole chain accepted
    after_whole = len(split.choose(draft))
    assert after_miss == 0 and after_whole == 9
    assert split.rate(5 * OUTCOMES + 2, 1) > 0.6 > 0.4 > split.rate(5 * OUTCOMES, 1)
    pooled = calibrate(False)
    pooled.begin()
    kept = len(pooled.choose(draft))
    pooled.observe(Draft.chain([1, 2], signal=[5, 5]), [0, 1])
    assert len(pooled.choose(draft)) == kept               # one rate whatever came before
    assert split.fork().history and not pooled.fork().history


def test_an_adaptive_record_says_whether_its_classes_are_split():
    from specbench_cli.run.auto.calibrate import policy

    record = {"table": AcceptanceTable().to_dict(), "step_ms": STEEP, "draft_ms_per_step": 0.1}
    assert policy(record).history is False                 # a record from before the split runs as it ran
    assert policy({**record, "history": True}).history is True
    with pytest.raises(UsageError, match="history"):
        policy({**record, "history": "yes"})
    assert policy(record).rate_per_ms == 0.0                # without lambda: the per-step ratio rule
    assert policy({**record, "rate_per_ms": 0.05}).rate_per_ms == 0.05
    with pytest.raises(UsageError, match="rate_per_ms"):
        policy({**record, "rate_per_ms": "fast"})


def test_with_the_decode_s_rate_a_sure_chain_is_kept_longer_than_its_own_step_s_ratio_allows():
    """Dinkelbach: keep a node when P(accepted) beats lambda x its forward time. A sure chain
    (rate 0.9) earns more of the budget than its own step's ratio allows, an unsure one no more."""
    steep = [40.0 + 2.0 * (q - 1) for q in range(1, 25)]
    t = AcceptanceTable({**{(3, d): [1000, 900] for d in range(1, 21)},     # class 3: 0.9 at every depth
                         **{(1, d): [1000, 333] for d in range(1, 21)}})    # class 1: one in three
    sure, unsure = Draft.chain(list(range(20)), signal=[3] * 20), Draft.chain(list(range(20)), signal=[1] * 20)
    ratio = AdaptiveBudget(t, steep)
    lam = AdaptiveBudget(t, steep, rate_per_ms=2.0 / 50.0)   # a decode making 2 tokens per 50 ms
    assert len(lam.choose(sure)) > len(ratio.choose(sure))
    assert len(lam.choose(unsure)) <= len(ratio.choose(unsure))
    # the rule by hand: the kept k maximises E(k) - lambda cost(1 + k)
    p = lam.accept_probs(sure)
    values = [1 + sum(p[:k]) - lam.rate_per_ms * lam.cost(1 + k) for k in range(21)]
    assert len(lam.choose(sure)) == max(range(21), key=lambda k: (values[k], -k))
    assert lam.fork().rate_per_ms == lam.rate_per_ms
    with pytest.raises(ValueError, match="rate_per_ms"):
        AdaptiveBudget(t, steep, rate_per_ms=-1.0)


def _miserly() -> AcceptanceTable:
    """Class 2 accepted one time in five at every depth: on a steep curve the rule keeps little."""
    return AcceptanceTable({(2, d): [1000, 200] for d in range(1, 13)})


def test_in_hindsight_a_trimmed_proposal_counts_what_verifying_it_whole_would_have():
    """Greedy: the answer's tokens do not depend on the draft, so a node of the whole proposal
    was offered when its parent's path equals the answer's next tokens, and accepted when it does
    too. Trimmed to two nodes, the eight-node chain still counts depths 1-6 (6 missed), as
    verifying all eight would have, once the answer's tokens reach them."""
    proposal = Draft.chain([1, 2, 3, 4, 5, 6, 7, 8], signal=[2] * 8)
    answer = [1, 2, 3, 4, 5, 9, 10, 11, 12]        # the target's tokens after the proposal's root
    whole = AdaptiveBudget(_miserly(), STEEP, online=8.0)
    whole.observe(proposal, [0, 1, 2, 3, 4])       # verified whole: five accepted, node 5 offered and missed
    seen = AdaptiveBudget(_miserly(), STEEP, online=8.0, hindsight=True)
    kept = seen.choose(proposal)
    assert 0 < len(kept) < 5
    seen.observe(kept, list(range(len(kept))), answer[:len(kept) + 1])   # all kept accepted + the target's token
    assert seen.live == {(2, d): [1, 1] for d in range(1, len(kept) + 2)}  # only what the answer reached yet
    seen.observe(Draft(), [], answer[len(kept) + 1:])                     # later steps bring the rest
    assert seen.live == whole.live == {**{(2, d): [1, 1] for d in range(1, 6)}, (2, 6): [1, 0]}
    assert seen.expected[2] == pytest.approx(whole.expected[2]) and seen.pending == []
    # without hindsight the same trimmed step counts only what it verified: depth 3 and deeper never
    censored = AdaptiveBudget(_miserly(), STEEP, online=8.0)
    censored.observe(kept, list(range(len(kept))), answer[:len(kept) + 1])
    assert (2, len(kept) + 1) not in censored.live


def test_in_hindsight_a_tree_counts_siblings_and_forgets_what_the_answer_never_reached():
    # root children 0 (token 5) and 1 (token 6); 2 (token 7) below 0; 3 (token 8) below 1
    tree = Draft(tokens=[5, 6, 7, 8], parents=[-1, -1, 0, 1], signal=[2, 2, 2, 2])
    b = AdaptiveBudget(_miserly(), STEEP, online=8.0, hindsight=True)
    b.choose(tree)
    b.observe(Draft(), [], [6])              # the answer went 6: node 1 hit, node 0 missed, 2 never offered
    assert b.live == {(2, 1): [2, 1]} and len(b.pending) == 1
    b.observe(Draft(), [], [8])              # then 8: node 3 hit
    assert b.live == {(2, 1): [2, 1], (2, 2): [1, 1]} and b.pending == []
    b.choose(tree)
    b.observe(Draft(), [], [5])              # the answer ends here: node 2 is never resolved
    b.begin()
    assert b.pending == [] and b.live == {} and b.realized == []


def test_in_hindsight_a_rule_that_stops_early_still_learns_that_deeper_nodes_pay():
    """The answer copies its context: every chain is right 12 deep. Counting only verified nodes,
    the deepest depths move through the class's ratio alone; in hindsight they are counted and
    the kept part grows further."""
    chain = list(range(100, 112))
    draft = Draft.chain(chain, signal=[2] * 12)
    kept_len = {}
    for hindsight in (False, True):
        b = AdaptiveBudget(_miserly(), STEEP, online=8.0, hindsight=hindsight, rate_per_ms=1.0 / 40.0)
        for _ in range(6):
            kept = b.choose(draft)
            b.observe(kept, list(range(len(kept))), chain[:len(kept)] + [chain[len(kept)]] if len(kept) < 12 else chain)
            b.observe(Draft(), [], chain[len(kept) + 1:])   # the answer goes on as the chain said
        kept_len[hindsight] = len(b.choose(draft))
    assert kept_len[True] > kept_len[False]


def test_an_adaptive_record_says_whether_it_counts_in_hindsight():
    from specbench_cli.run.auto.calibrate import policy

    record = {"table": AcceptanceTable().to_dict(), "step_ms": STEEP, "draft_ms_per_step": 0.1}
    assert policy(record).hindsight is False                # a record from before: counts as it ran
    assert policy({**record, "hindsight": True}).hindsight is True
    assert policy({**record, "hindsight": True}).fork().hindsight is True
    with pytest.raises(UsageError, match="hindsight"):
        policy({**record, "hindsight": 1})
