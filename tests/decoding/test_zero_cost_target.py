"""The zero-cost target (targets/zero_cost.py) and the host-overhead benchmark built on it
(benchmarks/host_overhead.py): registered, a proper model whose answer AR reproduces and every
lossless method matches, a sync counter that catches what it should and nothing else, and the
loop's one wait for the device per step with no drafter waiting on its own. Counts, never times."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from helpers.cli import cli
from helpers.scripts import load_script

from specbench_cli import methods, targets
from specbench_cli.decoding.decoder import Decoder
from specbench_cli.decoding.draft import Draft
from specbench_cli.methods.ar import AutoRegressive
from specbench_cli.methods.core.method import MethodContext
from specbench_cli.targets import as_target
from specbench_cli.targets.zero_cost import RESERVED, SyncCounted, ZeroCostTarget, answer_for

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "host_overhead.py"
VOCAB = 512
# the drafters that wait for nothing: every value they read comes from the loop's host lists
NO_SYNC = ["ar", "pld", "jacobi", "lookahead", "recycling", "samd", "suffix", "tr-jacobi", "mask-probe"]
LOSSLESS_HERE = NO_SYNC


def bench():
    return load_script(SCRIPT, "host_overhead")


def prompts(n: int = 3, length: int = 120) -> list[list[int]]:
    return bench().prompts_for(n, length, VOCAB)


def drafter(name: str, target, budget: int = 10):
    return methods.get(name).create(MethodContext(target, None, budget=budget))


def test_registered_and_listed(capsys, tmp_path):
    code, out, _ = cli(["list", "targets"], capsys)
    assert code == 0 and "zero-cost" in out
    cls = targets.get("zero-cost")
    assert cls is ZeroCostTarget
    loaded = cls.load("any-model", vocab=VOCAB)
    assert isinstance(loaded, ZeroCostTarget) and loaded.vocab_size == VOCAB
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 300}))
    assert cls.load("alias", resolved=str(tmp_path)).vocab_size == 300  # the model's own vocabulary
    assert cls.load(str(tmp_path / "missing")).vocab_size == 32000


def test_a_run_on_the_zero_cost_target(tiny_model_dir, tmp_path, capsys, isolated_cache):
    """`specbench run --target zero-cost`: the run's tokenizer, the target's answers, lossless
    methods equal to AR."""
    from helpers.cli import only_run_dir, run_rows

    out = tmp_path / "runs"
    code, _, err = cli(["run", "--target", "zero-cost", "--model", str(tiny_model_dir), "--methods", "ar,pld",
                        "--limit", "1", "--categories", "mt_bench", "--max-new-tokens", "12", "--output-dir",
                        str(out), "--threads", "1", "--no-report"], capsys)
    assert code == 0, err
    rows = run_rows(only_run_dir(out))
    by = {r["method"]: r for r in rows}
    assert set(by) == {"ar", "pld"} and by["ar"]["new_tokens"] > 0
    assert by["pld"]["output_ids"] == by["ar"]["output_ids"]


def test_ar_produces_the_targets_own_answer():
    target = ZeroCostTarget(VOCAB)
    ps = prompts()
    for p in ps:
        g = Decoder(as_target(target), set()).generate(AutoRegressive(MethodContext(target, None, budget=1)), p, 40, 1)
        assert g.output_ids == answer_for(p, 40, VOCAB)
        assert min(g.output_ids) >= RESERVED  # no special token: the answer runs to the cap
    gens = Decoder(as_target(target), set()).generate_batch([drafter("ar", target, 1) for _ in ps], ps, [40] * 3, 1)
    assert [g.output_ids for g in gens] == [answer_for(p, 40, VOCAB) for p in ps]


@pytest.mark.parametrize("name", LOSSLESS_HERE)
def test_lossless_methods_give_the_answer_and_are_accepted(name):
    """The target verifies chains and trees as a model would: every lossless method reproduces
    the answer, at batch size 1 and 3."""
    target = ZeroCostTarget(VOCAB)
    ps = prompts()
    answers = [answer_for(p, 48, VOCAB) for p in ps]
    g = Decoder(as_target(target), set()).generate(drafter(name, target), ps[0], 48, 10)
    assert g.output_ids == answers[0]
    gens = Decoder(as_target(target), set()).generate_batch([drafter(name, target) for _ in ps], ps, [48] * 3, 10)
    assert [x.output_ids for x in gens] == answers
    if name == "pld":  # the answer copies spans of its prompt: prompt lookup is accepted
        assert g.steps < 40


def test_off_the_answer_the_model_stays_a_function_of_the_prefix():
    """A draft that leaves the answer is refused where it leaves, and a batch of one detached and
    cropped back predicts the answer again."""
    target = ZeroCostTarget(VOCAB, count=False)
    p = prompts(1)[0]
    a = answer_for(p, 20, VOCAB)
    batch, [pre] = target.start([p], 30)
    assert int(pre.logits[-1].argmax()) == a[0]
    wrong = (a[2] + 1 - RESERVED) % (VOCAB - RESERVED) + RESERVED
    fwd = target.verify(batch, [a[0]], [Draft.chain([a[1], wrong, a[3]])])
    preds = fwd.logits.argmax(-1).tolist()
    assert preds[:2] == [a[1], a[2]] and preds[2] != a[3]
    target.commit(batch, len(p), [[0, 1]])  # root a[0] and a[1]; the bonus a[2] is the next root
    fwd = target.verify(batch, [a[2]], [Draft()])
    assert int(fwd.logits[0].argmax()) == a[3]
    target.commit(batch, len(p) + 2, [[0]])
    single = target.detach(batch, 0)
    target.crop(single, len(p) + 1)  # prompt + a[0]: a[1] is the root again
    fwd = target.verify(single, [a[1]], [Draft.chain([a[2]])])
    assert fwd.logits.argmax(-1).tolist() == [a[2], a[3]]


@pytest.mark.parametrize("plant, kind", [
    (lambda x: x[0, 0].item(), "item"),
    (lambda x: x.argmax(-1).tolist(), "tolist"),
    (lambda x: bool(x[0, 0] > 0), "bool"),
    (lambda x: int(x.argmax()), "int"),
    (lambda x: float(x[0, 0]), "float"),
    (lambda x: x.cpu(), "cpu"),
    (lambda x: x.to("cpu", torch.int32), "cpu"),
    (lambda x: x.numpy(), "numpy"),
    (lambda x: x[x > 0.5], "mask"),
    (lambda x: torch.nonzero(x > 0.5), "nonzero"),
    (lambda x: x[[0, 0]], "host index"),
    (lambda x: torch.zeros(2, x.shape[1]).__setitem__(slice(None), x[:2]), "to host"),
])
def test_the_counter_counts_each_wait_once(plant, kind):
    target = ZeroCostTarget(VOCAB)
    _, [fwd] = target.start([[20, 21, 22]], 4)
    logits = fwd.logits
    assert isinstance(logits, SyncCounted) and target.meter.count == 0
    plant(logits)
    assert target.meter.count == 1 and target.meter.kinds[kind] == 1


def test_device_work_and_host_values_are_not_counted():
    target = ZeroCostTarget(VOCAB)
    _, [fwd] = target.start([[20, 21, 22]], 4)
    x = fwd.logits
    y = torch.cat([x, x])[1:].softmax(-1).topk(3, dim=-1).indices  # device work stays on the device
    assert isinstance(y, SyncCounted) and target.meter.count == 0
    host = y.cpu()  # one wait; what it returns is a host value
    assert type(host) is torch.Tensor
    host.tolist(), int(host[0, 0]), host[[0]]
    assert target.meter.count == 1
    plain = ZeroCostTarget(VOCAB, count=False)
    _, [fwd] = plain.start([[20, 21, 22]], 4)
    assert type(fwd.logits) is torch.Tensor


class PlantedItem(AutoRegressive):
    """AR whose observe reads one logit as a Python float: one wait for the device per step."""

    name = "planted-item"

    def observe(self, result):
        self.seen = result.logits[0, 0].item()


def test_the_benchmarks_counter_counts_a_planted_item():
    b = bench()
    target = ZeroCostTarget(VOCAB)
    planted = PlantedItem(MethodContext(target, None, budget=1)).bind(target, None)
    spy = b.SyncSpy(target.meter)
    spy.wrap(planted)
    out = b.decode_pass(target, [planted], prompts(2), 16, 1, spy)
    assert out["steps"] > 0
    assert out["drafter_syncs"] == out["steps"] == target.meter.kinds["item"]
    assert out["syncs"] == 2 * out["steps"]  # the loop's one transfer and the planted read


@pytest.mark.parametrize("name", ["ar", "pld", "tr-jacobi", "mask-probe"])
@pytest.mark.parametrize("batch", [1, 3])
def test_ar_and_pld_wait_for_the_device_once_per_step(name, batch):
    b = bench()
    target = ZeroCostTarget(VOCAB)
    ds = [drafter(name, target) for _ in range(batch)]
    spy = b.SyncSpy(target.meter)
    for d in ds:
        spy.wrap(d)
    out = b.decode_pass(target, ds, prompts(3), 32, 10, spy)
    assert out["steps"] > 0 and out["syncs"] <= out["steps"]
    assert out["drafter_syncs"] == 0


@pytest.mark.parametrize("name", NO_SYNC)
def test_drafters_cause_no_syncs(name):
    b = bench()
    target = ZeroCostTarget(VOCAB)
    ds = [drafter(name, target) for _ in range(2)]
    spy = b.SyncSpy(target.meter)
    for d in ds:
        spy.wrap(d)
    out = b.decode_pass(target, ds, prompts(2), 32, 10, spy)
    assert out["steps"] > 0 and out["drafter_syncs"] == 0
    assert out["syncs"] <= out["steps"]


class TopReader(AutoRegressive):
    """Drafts a random chain, reads the loop's host top-k and keeps it beside the logits' own."""

    name = "top-reader"
    host_topk = 4

    def reset(self, prompt_ids):
        self.rng, self.pairs = random.Random(0), []

    def propose(self, state):
        return Draft.chain([self.rng.randrange(RESERVED, VOCAB) for _ in range(state.budget - 1)])

    def observe(self, result):
        self.pairs.append((result.top, result.logits.topk(4, dim=-1).indices.tolist(), result.preds))


def test_the_host_top_k_is_the_logits_top_k():
    target = ZeroCostTarget(VOCAB, count=False)
    ds = [TopReader(MethodContext(target, None, budget=5)).bind(target, None) for _ in range(2)]
    Decoder(as_target(target), set()).generate_batch(ds, prompts(2), [12, 12], 5)
    for d in ds:
        assert d.pairs
        for top, own, preds in d.pairs:
            assert top == own and len(top) == len(preds) == 5


def test_the_benchmark_runs_and_reports_ar_and_pld(tmp_path, capsys):
    out = tmp_path / "rows.json"
    assert bench().main(["--methods", "ar", "pld", "--batch", "1", "2", "--tokens", "16", "--prompts", "2",
                         "--rounds", "1", "--vocab", str(VOCAB), "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    rows = {(r["method"], r["batch"]): r for r in data["rows"]}
    assert set(rows) == {(m, b) for m in ("ar", "pld", "pld@adaptive") for b in (1, 2)}
    for r in rows.values():
        assert r["equals_ar"] and r["same_counted"]
        assert r["syncs_per_step"] <= 1 and r["drafter_syncs_per_step"] == 0
        assert set(r["ms"]) >= {"host", "propose", "budget", "accept", "commit", "observe", "other", "forward"}
    assert "eagle" in data["skipped"] and "| pld |" in capsys.readouterr().out


class _DeviceLogits(torch.Tensor):
    """CPU logits that report a CUDA device, so the loop takes its device branch (one packed read)."""

    @property
    def device(self):
        return torch.device("cuda")


@pytest.mark.parametrize("greedy", [True, False])
def test_the_one_transfer_carries_the_drafters_values_bit_for_bit(greedy):
    """The device branch packs argmax, top-k and every drafter's `host_values` (floats as their
    bits) into one read; what comes back equals the host branch's and the hooks' own results."""
    from specbench_cli.decoding.verify import SamplingConfig
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn((7, 50), generator=gen)
    hook = lambda rows: torch.stack([rows.topk(3, dim=-1).indices.double(), rows.softmax(-1).topk(3).values.double()])
    hooks = [(0, 3, hook), (3, 5, None), (5, 7, hook)]
    dec = Decoder(as_target(ZeroCostTarget(VOCAB, count=False)), set(),
                  sampling=SamplingConfig() if greedy else SamplingConfig(temperature=1.0))
    host = dec._to_host(logits, 4, hooks)
    device = dec._to_host(logits.as_subclass(_DeviceLogits), 4, hooks)
    assert host == device
    preds, tops, values = device
    assert preds == (logits.argmax(-1).tolist() if greedy else None)
    assert tops == logits.topk(4, dim=-1).indices.tolist()
    assert values[1] is None
    assert values[0] == hook(logits[0:3]).reshape(-1).tolist() and values[2] == hook(logits[5:7]).reshape(-1).tolist()
