"""specbench's suffix trees (methods/retrieval/suffix_tree.py) vs the reference, ArcticInference's
`arctic_inference.suffix_decoding` (its C++ `SuffixTree` and Python `SuffixDecodingCache`):
the same token histories through both, the drafts compared, and the drafting cost timed.

Work is a list of *programs*; a program is a list of operations on named trees and caches:

    ["tree", T, max_depth]                    a new suffix tree T
    ["extend", T, seq_id, tokens]             append tokens to sequence seq_id of T
    ["remove", T, seq_id]                     drop sequence seq_id from T
    ["spec", T, context, n, factor, offset, min_prob, use_tree]           -> a draft
    ["spec2", L, G, context, n, factor, offset, min_prob, use_tree]       -> the better draft of
                                              trees L and G (a tie keeps L): how `suffix` drafts
    ["check", T]                              -> "ok" when the tree passes its integrity check
    ["cache", C, max_tree_depth, max_cached_requests]                     a new suffix cache C
    ["start", C, req, prompt] / ["add", C, req, tokens] / ["stop", C, req] / ["evict", C, req]
    ["cspec", C, req, context, n, factor, offset, min_prob, use_tree]     -> a draft

A draft is [token_ids, parents, probs, score, match_len]. Subcommands:

    # anywhere (no specbench, no reference needed)
    python benchmarks/suffix_peers.py random --seed 0 --count 400 --out WORK/random.json
    # in specbench's environment: the histories of a run folder, drafted as `suffix` drafts them
    python benchmarks/suffix_peers.py trace RUN_DIR --out WORK/trace.json [--method ar]
    # each side runs the same programs (--impl ours in specbench's env, reference in the reference's)
    python benchmarks/suffix_peers.py replay --impl ours --programs WORK/trace.json --out WORK/ours.json
    python benchmarks/suffix_peers.py replay --impl reference --programs WORK/trace.json --out WORK/ref.json
    # anywhere: identical drafts? and microseconds per drafted / appended token
    python benchmarks/suffix_peers.py compare WORK/ours.json WORK/ref.json

`trace` replays every finished turn of a run folder (rows of `--method`, default `suffix`, else
`ar`): the request's own tree gets the prompt (rebuilt with the run's chat template) and then
the tokens of the stored answer step by step, each step drafting from both trees and accepting
the longest drafted path the stored answer follows plus one token (greedy verification; the
answer is AR's, as every lossless method's is); after the turn the answer joins the global tree
(the oldest beyond max_cached_requests evicted first), which starts empty at each repeat, as
the runner does. The reference's own simulator (`arctic_inference/suffix_decoding/simulator.py`)
replays answers the same way.

Timing: each operation is timed on its own (`time.perf_counter`), both sides from Python
(the reference through its nanobind bindings, with Python lists, as vLLM's model runner calls
it), `--rounds` times over the programs, the fastest round kept. Run on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

SPEC_OPS = ("spec", "spec2", "cspec")


# ----------------------------------------------------------------------------- implementations

class Ours:
    name = "ours"

    def __init__(self) -> None:
        from specbench_cli.methods.retrieval.suffix_cache import SuffixCache
        from specbench_cli.methods.retrieval.suffix_tree import SuffixTree

        self.Tree, self.Cache = SuffixTree, SuffixCache

    def tree(self, depth):
        return self.Tree(depth)

    def cache(self, depth, max_cached):
        return self.Cache(max_tree_depth=depth, max_cached_requests=max_cached)

    @staticmethod
    def check(tree) -> str:
        return tree.check_integrity() or "ok"


class Reference:
    name = "reference"

    def __init__(self) -> None:
        from arctic_inference.suffix_decoding import SuffixDecodingCache
        from arctic_inference.suffix_decoding._C import SuffixTree

        self.Tree, self.Cache = SuffixTree, SuffixDecodingCache

    def tree(self, depth):
        return self.Tree(depth)

    def cache(self, depth, max_cached):
        return self.Cache(max_tree_depth=depth, max_cached_requests=max_cached)

    @staticmethod
    def check(tree) -> str:
        return tree.check_integrity() or "ok"


def draft_of(d) -> list:
    return [list(d.token_ids), list(d.parents), [float(p) for p in d.probs], float(d.score), int(d.match_len)]


def execute(program: list, impl, clock=None) -> tuple[list, dict]:
    """Run one program; returns (the results of its spec/check operations, per operation kind
    [seconds, operations, tokens] where tokens are the appended tokens of extend/add/start and
    the drafted tokens of spec operations)."""
    objs: dict = {}
    results: list = []
    times: dict = {}
    clock = clock or time.perf_counter
    for op in program:
        kind = op[0]
        t0 = clock()
        tokens = 0
        if kind == "tree":
            objs[op[1]] = impl.tree(op[2])
        elif kind == "cache":
            objs[op[1]] = impl.cache(op[2], op[3])
        elif kind == "extend":
            objs[op[1]].extend(op[2], op[3])
            tokens = len(op[3])
        elif kind == "remove":
            objs[op[1]].remove(op[2])
        elif kind == "spec":
            d = objs[op[1]].speculate(op[2], *op[3:])
        elif kind == "spec2":
            a = objs[op[1]].speculate(op[3], *op[4:])
            b = objs[op[2]].speculate(op[3], *op[4:])
            d = a if a.score >= b.score else b
        elif kind == "cspec":
            d = objs[op[1]].speculate(op[2], op[3], max_spec_tokens=op[4], max_spec_factor=op[5],
                                      max_spec_offset=op[6], min_token_prob=op[7], use_tree_spec=op[8])
        elif kind == "start":
            objs[op[1]].start_request(op[2], op[3])
            tokens = len(op[3])
        elif kind == "add":
            objs[op[1]].add_active_response(op[2], op[3])
            tokens = len(op[3])
        elif kind == "stop":
            objs[op[1]].stop_request(op[2])
        elif kind == "evict":  # the request may be gone already (evicted to make room): both sides raise
            try:
                objs[op[1]].evict_cached_response(op[2])
                results.append("ok")
            except ValueError:
                results.append("not cached")
        elif kind == "check":
            results.append(impl.check(objs[op[1]]))
            continue  # not timed
        else:
            raise ValueError(f"unknown operation {kind!r}")
        elapsed = clock() - t0
        if kind in SPEC_OPS:
            results.append(draft_of(d))
            tokens = len(d.token_ids)
        slot = times.setdefault(kind, [0.0, 0, 0])
        slot[0] += elapsed
        slot[1] += 1
        slot[2] += tokens
    return results, times


# ----------------------------------------------------------------------------- random programs

def _tokens(rng: random.Random, vocab: int, n: int, pool: list[list[int]]) -> list[int]:
    """n tokens over `vocab`, often copied in spans from `pool` (repetition makes real trees)."""
    out: list[int] = []
    while len(out) < n:
        src = rng.choice(pool) if pool and rng.random() < 0.5 else None
        if src:
            i = rng.randrange(len(src))
            out += src[i:i + rng.randint(1, 12)]
        else:
            out.append(rng.randrange(vocab))
    return out[:n]


def _spec_args(rng: random.Random) -> list:
    return [rng.randint(0, 24), rng.choice([0.5, 1.0, 1.0, 1.5, 2.0, 4.0, 64.0]), rng.choice([-1.0, 0.0, 0.0, 0.5, 2.0]),
            rng.choice([0.0, 0.01, 0.1, 0.1, 0.25, 0.5, 1.0]), rng.random() < 0.7]


def _context(rng: random.Random, vocab: int, seqs: list[list[int]], depth: int) -> list[int]:
    seqs = [s for s in seqs if s]
    r = rng.random()
    if seqs and r < 0.6:  # the tail of a sequence, sometimes with a new token
        s = rng.choice(seqs)
        ctx = s[-rng.randint(1, depth + 3):]
        return ctx + ([rng.randrange(vocab)] if rng.random() < 0.3 else [])
    if seqs and r < 0.85:  # a stretch from inside a sequence
        s = rng.choice(seqs)
        i = rng.randrange(len(s))
        return s[max(0, i - rng.randint(0, depth + 2)):i + 1]
    return [rng.randrange(vocab) for _ in range(rng.randint(1, depth + 2))]


def tree_program(rng: random.Random) -> list:
    depth = rng.choice([1, 2, 3, 4, 5, 8, 12, 64])
    vocab = rng.choice([2, 3, 4, 6, 10, 50])
    ops: list = [["tree", "t", depth]]
    seqs: dict[int, list[int]] = {}
    for _ in range(rng.randint(5, 40)):
        r = rng.random()
        if r < 0.5:
            sid = rng.randrange(6)
            chunk = _tokens(rng, vocab, rng.randint(1, 30), list(seqs.values()))
            ops.append(["extend", "t", sid, chunk])
            seqs.setdefault(sid, []).extend(chunk)
        elif r < 0.6 and seqs:
            sid = rng.choice(sorted(seqs))
            ops.append(["remove", "t", sid])
            del seqs[sid]
        elif r < 0.65:
            ops.append(["check", "t"])
        else:
            ops.append(["spec", "t", _context(rng, vocab, list(seqs.values()), depth), *_spec_args(rng)])
    ops.append(["check", "t"])
    return ops


def cache_program(rng: random.Random) -> list:
    depth = rng.choice([2, 4, 8, 64])
    vocab = rng.choice([3, 6, 20])
    ops: list = [["cache", "c", depth, rng.choice([-1, 0, 1, 2, 3])]]
    active: dict[int, list[int]] = {}
    cached: set[int] = set()
    texts: list[list[int]] = []
    for _ in range(rng.randint(5, 40)):
        r = rng.random()
        if r < 0.2 and len(active) < 3:
            req = rng.choice([i for i in range(8) if i not in active])
            prompt = _tokens(rng, vocab, rng.randint(0, 20), texts)
            ops.append(["start", "c", req, prompt])
            active[req] = list(prompt)
            texts.append(active[req])
            if ops[0][3] != 0:
                cached.add(req)
        elif r < 0.5 and active:
            req = rng.choice(sorted(active))
            chunk = _tokens(rng, vocab, rng.randint(1, 12), texts)
            ops.append(["add", "c", req, chunk])
            active[req] += chunk
        elif r < 0.6 and active:
            req = rng.choice(sorted(active))
            ops.append(["stop", "c", req])
            del active[req]
        elif r < 0.65 and cached:  # may name a request evicted to make room: both sides then refuse
            req = rng.choice(sorted(cached))
            cached.discard(req)
            ops.append(["evict", "c", req])
        elif active:
            req = rng.choice(sorted(active))
            ops.append(["cspec", "c", req, _context(rng, vocab, texts, depth), *_spec_args(rng)])
    return ops


def random_programs(seed: int, count: int) -> list:
    rng = random.Random(seed)
    return [cache_program(rng) if i % 4 == 3 else tree_program(rng) for i in range(count)]


def run_all(programs: list, impl) -> list:
    """The results of every program."""
    return [execute(program, impl)[0] for program in programs]


# ----------------------------------------------------------------------------- traces of runs

def accepted(draft: list, truth: list[int]) -> int:
    """Draft tokens greedy verification accepts when the target's tokens are `truth`."""
    tokens, parents = draft[0], draft[1]
    node, n = -1, 0
    for tok in truth:
        nxt = next((i for i, p in enumerate(parents) if p == node and tokens[i] == tok), None)
        if nxt is None:
            break
        node, n = nxt, n + 1
    return n


def trace_program(histories: list[dict], settings: dict) -> tuple[list, dict]:
    """The program `suffix` runs over `histories` (in run order: prompt_ids, output_ids, repeat,
    budget, max_new), drafting with our trees to decide each step's accepted tokens. Returns the
    program and counts (requests, steps)."""
    from specbench_cli.methods.retrieval.suffix_tree import SuffixTree

    depth, cap = settings["max_tree_depth"], settings["max_cached_requests"]
    spec = [settings["max_spec_factor"], settings["max_spec_offset"], settings["min_token_prob"], settings["use_tree_spec"]]
    program: list = []
    trees: dict = {}
    cached: list[int] = []
    repeat, steps, next_seq = None, 0, 0
    for h in histories:
        if h["repeat"] != repeat:  # each pass over the questions starts with an empty global tree
            program.append(["tree", "G", depth])
            trees["G"], cached, repeat = SuffixTree(depth), [], h["repeat"]
        out, ids = h["output_ids"], list(h["prompt_ids"]) + h["output_ids"][:1]
        program += [["tree", "L", depth], ["extend", "L", 0, ids]]
        trees["L"] = SuffixTree(depth)
        trees["L"].extend(0, ids)
        produced = 1
        while produced < len(out):
            n = min(h["budget"] - 1, h["max_new"] - produced)
            if n <= 0:
                break
            op = ["spec2", "L", "G", ids[-depth:], n, *spec]
            program.append(op)
            a = trees["L"].speculate(op[3], n, *spec)
            b = trees["G"].speculate(op[3], n, *spec)
            d = draft_of(a if a.score >= b.score else b)
            new = out[produced:produced + accepted(d, out[produced:]) + 1]
            program.append(["extend", "L", 0, new])
            trees["L"].extend(0, new)
            ids += new
            produced += len(new)
            steps += 1
        if cap != 0:
            seq, next_seq = next_seq, next_seq + 1
            cached.append(seq)
            while len(cached) > cap:
                victim = cached.pop(0)
                program.append(["remove", "G", victim])
                trees["G"].remove(victim)
            program.append(["extend", "G", seq, out])
            trees["G"].extend(seq, out)
    return program, {"requests": len(histories), "steps": steps}


def suffix_instance(declared: dict) -> str:
    """The run's `suffix` instance whose every step drafts from the suffix trees (an instance name
    is `suffix`, `suffix@BC` or `suffix@auto`; one with a model fallback drafts some steps from
    that model, which a trace cannot replay); `ar` when there is none."""
    from specbench_cli.config.instance import parse_instance

    for name, entry in declared.items():
        if parse_instance(name).name == "suffix" and ((entry or {}).get("params") or {}).get("fallback", "none") == "none":
            return name
    return "ar"


def run_histories(run_dir: Path, method: str | None) -> tuple[list[dict], dict]:
    """(histories, the method's settings) of a run folder's finished turns, in run order."""
    from specbench_cli.config import config_from_manifest
    from specbench_cli.models.load import load_tokenizer
    from specbench_cli.models.prompting import ChatPrompter
    from specbench_cli.run.plan import load_questions
    from specbench_cli.store.runfolder import load_run

    run = load_run(run_dir)
    cfg = config_from_manifest(run.manifest)
    declared = run.manifest.get("methods", {}) or {}
    method = method or suffix_instance(declared)
    if method not in declared:
        raise SystemExit(f"{run_dir}: no method {method!r} in the run (it has {', '.join(declared) or 'none'})")
    params = (declared.get(method) or {}).get("params", {})
    from specbench_cli.methods.suffix import SuffixOptions

    settings = {k: params.get(k, getattr(SuffixOptions(), k)) for k in
                ("max_tree_depth", "max_spec_factor", "max_spec_offset", "min_token_prob", "max_cached_requests",
                 "use_tree_spec")}
    questions = {(q.task, q.id): q for q in load_questions(cfg)}
    prompter = ChatPrompter(load_tokenizer(cfg.model.name), cfg.model.prompt_template)
    rows = [r for r in run.rows if r["method"] == method]
    answers = {(r.get("task"), str(r["question_id"]), r["turn"], r.get("repeat", 0)): r for r in rows}
    histories = []
    for r in rows:
        if r["status"] != "ok":
            continue
        q = questions[(r.get("task"), str(r["question_id"]))]
        messages = []
        for t in range(r["turn"] + 1):
            messages.append({"role": "user", "content": q.turns[t]})
            if t < r["turn"]:
                messages.append({"role": "assistant", "content": answers[(q.task, q.id, t, r.get("repeat", 0))]["output_text"]})
        prompt = prompter(messages)
        if len(prompt) != r["prompt_tokens"]:
            raise SystemExit(f"{q.task}/{q.id} turn {r['turn']}: rebuilt prompt has {len(prompt)} tokens, the row "
                             f"{r['prompt_tokens']}")
        histories.append({"prompt_ids": prompt, "output_ids": list(r["output_ids"]), "repeat": r.get("repeat", 0),
                          "budget": int(r["block_complexity"]), "max_new": int(r.get("max_new_tokens") or cfg.decoding.max_new_tokens),
                          "question": f"{q.task}/{q.id}", "turn": r["turn"]})
    return histories, settings


# ----------------------------------------------------------------------------- commands

def _write(path: str, doc) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(doc))


def cmd_random(a) -> None:
    _write(a.out, {"kind": "random", "seed": a.seed, "programs": random_programs(a.seed, a.count)})


def cmd_trace(a) -> None:
    histories, settings = run_histories(Path(a.run_dir), a.method)
    program, counts = trace_program(histories, settings)
    _write(a.out, {"kind": "trace", "settings": settings, **counts, "histories": histories, "programs": [program]})
    print(f"{counts['requests']} turns, {counts['steps']} steps -> {a.out}")


def cmd_replay(a) -> None:
    impl = Ours() if a.impl == "ours" else Reference()
    doc = json.loads(Path(a.programs).read_text())
    programs = doc["programs"]
    results = run_all(programs, impl)
    best: dict = {}
    for _ in range(a.rounds):
        totals: dict = {}
        for program in programs:
            _, times = execute(program, impl)
            for kind, (s, n, tok) in times.items():
                slot = totals.setdefault(kind, [0.0, 0, 0])
                slot[0] += s
                slot[1] += n
                slot[2] += tok
        for kind, slot in totals.items():
            if kind not in best or slot[0] < best[kind][0]:
                best[kind] = slot
    _write(a.out, {"impl": impl.name, "programs": a.programs, "results": results, "times": best,
                   "python": sys.version.split()[0]})
    print(f"{impl.name}: {len(programs)} program(s) -> {a.out}")


def compare(ours: dict, ref: dict) -> tuple[int, int, str | None]:
    """(results equal, results compared, the first difference)."""
    same = total = 0
    first = None
    for i, (x, y) in enumerate(zip(ours["results"], ref["results"])):
        xs, ys = (x, y) if isinstance(x, list) and isinstance(y, list) else ([x], [y])
        for j, (u, v) in enumerate(zip(xs, ys)):
            total += 1
            if u == v:
                same += 1
            elif first is None:
                first = f"program {i}, result {j}: ours {u} vs reference {v}"
        if len(xs) != len(ys):
            total += 1
            first = first or f"program {i}: {len(xs)} results vs {len(ys)}"
    return same, total, first


def cmd_compare(a) -> None:
    ours, ref = (json.loads(Path(p).read_text()) for p in (a.ours, a.reference))
    same, total, first = compare(ours, ref)
    lines = [f"identical results: {same}/{total}" + (f" (first difference: {first})" if first else ""), "",
             "| operation | count | tokens | ours µs/op | reference µs/op | ours µs/token | reference µs/token | ours / reference |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for kind in sorted(set(ours["times"]) & set(ref["times"])):
        (so, n, tok), (sr, _, _) = ours["times"][kind], ref["times"][kind]
        per_tok = (f"{1e6 * so / tok:.2f} | {1e6 * sr / tok:.2f}" if tok else "– | –")
        lines.append(f"| {kind} | {n} | {tok} | {1e6 * so / n:.2f} | {1e6 * sr / n:.2f} | {per_tok} | {so / sr:.1f}x |")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if a.out:
        Path(a.out).write_text(text)
    if same != total:
        raise SystemExit(1)


def digest(programs: list) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(programs, separators=(",", ":")).encode()).hexdigest()


def cmd_golden(a) -> None:
    """The reference's results for `--count` random programs of `--seed` and for a trace,
    gzipped: the test data of tests/methods/test_suffix_tree.py (run in the reference's env)."""
    import gzip
    from importlib.metadata import version

    impl = Reference()
    random_part = random_programs(a.seed, a.count)
    trace = json.loads(Path(a.trace).read_text())
    doc = {"reference": f"arctic-inference {version('arctic-inference')}",
           "random": {"seed": a.seed, "count": a.count, "sha256": digest(random_part),
                      "results": run_all(random_part, impl)},
           "real": {"settings": trace["settings"], "histories": trace["histories"], "sha256": digest(trace["programs"]),
                    "results": run_all(trace["programs"], impl)}}
    Path(a.out).write_bytes(gzip.compress(json.dumps(doc, separators=(",", ":")).encode(), 9, mtime=0))
    print(f"{a.out}: {a.count} random programs, {len(trace['histories'])} real turns")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("random")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--count", type=int, default=400)
    p.add_argument("--out", required=True)
    p = sub.add_parser("trace")
    p.add_argument("run_dir")
    p.add_argument("--method", default=None)
    p.add_argument("--out", required=True)
    p = sub.add_parser("replay")
    p.add_argument("--impl", choices=("ours", "reference"), required=True)
    p.add_argument("--programs", required=True)
    p.add_argument("--rounds", type=int, default=3, help="timed rounds (0: results only)")
    p.add_argument("--out", required=True)
    p = sub.add_parser("compare")
    p.add_argument("ours")
    p.add_argument("reference")
    p.add_argument("--out")
    p = sub.add_parser("golden")
    p.add_argument("--trace", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--count", type=int, default=1000)
    p.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    {"random": cmd_random, "trace": cmd_trace, "replay": cmd_replay, "compare": cmd_compare,
     "golden": cmd_golden}[a.cmd](a)


if __name__ == "__main__":
    main()
