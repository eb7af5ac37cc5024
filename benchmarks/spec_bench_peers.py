"""specbench's `recycling`, `samd` and `ar` vs Spec-Bench's own Token Recycling, SAMD and vanilla AR.

Spec-Bench (github.com/hemingkx/Spec-Bench, pinned at SPEC_BENCH_COMMIT) is run from a clone
outside this repository, in its own venv (its transformers 4.37.1, fschat, ...), never imported
by specbench. Same target (SmolLM2-135M-Instruct as specbench converts it once to a safetensors
folder, float32), same prompt token ids (the tokenizer's chat template, first turns), greedy,
same cap on new tokens, same threads. Four steps, each a subcommand (reproduce.sh in
results/reference/peers-spec-bench/ runs them all):

    # in specbench's environment
    python benchmarks/spec_bench_peers.py prompts --out WORK/prompts.json
    python benchmarks/spec_bench_peers.py ours    --prompts WORK/prompts.json --out WORK/ours-1.json
    # in the peer venv (torch, transformers 4.37.1, fschat 0.2.31, ...; no specbench)
    python benchmarks/spec_bench_peers.py theirs  --spec-bench CLONE --prompts WORK/prompts.json --out WORK/theirs-1.json
    # anywhere
    python benchmarks/spec_bench_peers.py compare WORK/ours-*.json WORK/theirs-*.json

Methods and sizes (tokens the target processes per tree forward, root included):

- Token Recycling: Spec-Bench's `evaluation/inference_recycling.py: recycling_forward`, tree
  template "2.2.2" (80 nodes + the root = 81 tokens, its default) vs our `recycling@81` (BC 81 =
  80 nodes + root; our template is the same 80 rank paths, `compare` checks it).
- SAMD: Spec-Bench's `evaluation/inference_samd.py: samd_forward` with `--tree_method
  token_recycle` (its `model/samd/config/token_recycle.json`: 61 nodes, root included; the
  length threshold 5 and bias 5 of its defaults; no static SAM) vs our `samd@61 -o
  samd.threshold=5` (fallback `recycling`). Spec-Bench drafts a suffix-automaton chain of
  `n_predicts` tokens (start token included; its default 40): set to the BC, 61, so the largest
  block is the same on both sides (`--samd-n-predicts`).
- AR: Spec-Bench's `evaluation/inference_baseline.py: baseline_forward` (transformers 4.37's
  `generate`, greedy) vs our `ar`.

`theirs` calls those three forward functions directly, as Spec-Bench's harness
(`evaluation/eval.py: get_model_answers`) does, but not through the harness: it hard-codes
fastchat's vicuna template, `.to("cuda")` and `torch.cuda.synchronize()`, and feeds the decoded
(capped) first answer back as turn-2 history; here both sides get the chat-template ids of the
first turn. Patches applied at run time (their files are never changed; see `load_spec_bench`):

1. `evaluation/inference_recycling.py` is executed from its text with its CUDA-only expressions
   replaced: 4 x `.cuda()` -> `.cpu()`, 5 x `torch.device('cuda:0')` -> `torch.device('cpu')`
   (the counts are checked, so another revision fails loudly).
2. Their `__main__` blocks are not run; `theirs` builds the same objects with `device_map="cpu"`
   (theirs: "auto" / "cuda"): the recycling Llama of `model/recycling/modeling_llama_kv.py` and
   the global `adj_matrix` (zeros, [vocab, 8]) that recycling_forward reads; for SAMD
   `AutoModelForCausalLM` with sdpa attention, `SamdConfig`, `DraftModel`, `SamdModel`; for AR
   `AutoModelForCausalLM`.

Same steps on both sides (observation, not a change of their code): specbench stops as soon as
the output (the pending token included) reaches the cap or ends in a stop token.
- recycling_forward stops when the tokens it appended exceed its `max_new_tokens` or on EOS;
  it is called with cap + 1 and a forward pre-hook on the model reads the loop's locals before
  each tree forward and ends the call (an exception caught here) when our rule says stop. Its
  last pending token is not in what it returns when that token is EOS; it is added back.
- samd_forward stops when its token count (without the pending token) reaches max_new_tokens:
  called with cap - 1; wrappers around `SamdModel.prefill` / `decode` record each step's tokens
  and the last logits, whose argmax is the pending token.
- baseline_forward (`generate`) stops at the cap or EOS as ours does.

Counting: tokens = output ids up to the cap and the first stop token (included); tok/s = total
tokens / total wall time of the calls, prefill included, warm-up (one call per method, first
prompt, 16 tokens) excluded. #MAT = mean tokens added per decoding step, as each side counts
them (accept lengths). Output tokens no step counts (`uncounted_tokens`): ours 1, the prefill's
token; Spec-Bench's SAMD 1, its last pending token (it counts each step's start token instead);
Spec-Bench's recycling 0: it prefills the prompt without its last token and starts the first
tree step from that token, so it takes about one step more than ours for the same tokens.
"Within output" = (tokens - uncounted tokens) / steps puts all on one basis.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from eagle_medusa_peers import compat_target, cut, save_json  # noqa: E402 (stdlib-only helpers)

SPEC_BENCH_COMMIT = "fd2c1cd7d2201ef71db4c5f4e455008f017967bf"
RECYCLING_TREE = "2.2.2"  # Spec-Bench's recycling template (its --tree_version default)
RECYCLING_TOPK = 8        # its --output-id-topk default: the adjacency matrix's width
RECYCLING_BC = 81         # that template: 80 nodes + the root per forward
SAMD_BC = 61              # Spec-Bench's SAMD token_recycle.json: 61 nodes, the root included
SAMD_THRESHOLD = 5        # its --samd_len_threshold default (and --samd_len_bias 5: static SAM only)
METHODS = ("ar", "recycling", "samd")
# evaluation/inference_recycling.py: CUDA-only expressions -> CPU, with their counts in the pinned file
RECYCLING_CPU_PATCHES = ((".cuda()", ".cpu()", 4), ("torch.device('cuda:0')", "torch.device('cpu')", 5))


def rotation(i: int) -> list[str]:
    """Per question AR first, then the others in an order rotating with the question (as specbench run)."""
    others = list(METHODS[1:])
    k = i % len(others)
    return ["ar"] + others[k:] + others[:k]


def same_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


# ---------------------------------------------------------------------------------------------
# specbench side
# ---------------------------------------------------------------------------------------------
def cmd_prompts(args) -> None:
    """The Spec-Bench subset, first turns: prompt ids with the tokenizer's chat template (as
    `specbench run` encodes them), a first-turn questions file for `ours`, the target folder,
    the stop ids."""
    from specbench_cli import tasks
    from specbench_cli.models.load import load_model
    from specbench_cli.models.prompting import encode_chat, stop_token_ids, user_turn
    from specbench_cli.tasks.base import select
    from specbench_cli.tasks.spec_bench import find_questions

    lm = load_model(args.model, dtype="float32")
    ids = args.question_ids.split(",") if args.question_ids else None
    qs = select(tasks.get("spec_bench").load(args.questions), limit=args.per_category, question_ids=ids)
    rows = [{"question_id": q.id, "category": q.category, "text": q.turns[0],
             "ids": encode_chat(lm.tokenizer, user_turn(q.turns[0]), "auto")} for q in qs]
    # the same questions with their first turn only, in Spec-Bench's format and in this order (the
    # warm-up question and the order of the hot recycling matrices' updates), for `specbench run`
    out = Path(args.out)
    by_id = {}
    for line in find_questions(args.questions).read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            by_id[str(row["question_id"])] = row
    lines = []
    for q in qs:
        row = dict(by_id[q.id], turns=by_id[q.id]["turns"][:1])
        lines.append(json.dumps(row, ensure_ascii=False))
    qfile = out.parent / "questions-first-turns.jsonl"
    qfile.parent.mkdir(parents=True, exist_ok=True)
    qfile.write_text("\n".join(lines) + "\n", encoding="utf-8")
    save_json(args.out, {"model": args.model, "model_dir": lm.resolved, "questions_file": str(qfile.resolve()),
                         "stop_ids": stop_token_ids(lm.tokenizer, lm.model), "prompts": rows})
    print(f"{len(rows)} prompts -> {args.out}; first turns -> {qfile}; target folder {lm.resolved}")


def our_trees(recycling_bc: int, samd_bc: int) -> dict:
    """The rank paths our `recycling@BC` drafts and our `samd@BC`'s recycling fallback drafts
    (the same planning code the methods run: the paper's template cut to BC - 1 nodes)."""
    from specbench_cli.methods.recycling import TEMPLATE_CHILDREN, template_paths, truncate

    paths = template_paths(TEMPLATE_CHILDREN)
    return {"recycling": [list(p) for p in truncate(paths, recycling_bc - 1, "prior")],
            "samd": [list(p) for p in truncate(paths, samd_bc - 1, "prior")]}


def cmd_ours(args) -> None:
    """`specbench run` with the matching settings; one record per (method, question)."""
    doc = json.loads(Path(args.prompts).read_text())
    work = Path(args.out).parent
    run_dir = work / "runs"
    before = set(run_dir.glob("*")) if run_dir.is_dir() else set()
    cmd = [sys.executable, "-m", "specbench_cli", "run", "--model", doc["model"], "--tasks", "spec_bench",
           "--questions", doc["questions_file"], "--max-new-tokens", str(args.max_new_tokens),
           "--methods", f"ar,recycling@{args.recycling_bc},samd@{args.samd_bc}",
           "-o", f"samd.threshold={args.samd_threshold}",
           "--prompt-template", "auto", "--dtype", "float32", "--threads", str(args.threads),
           "--forward", args.forward, "--output-dir", str(run_dir), "--no-report"]
    print(" ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    new = sorted(set(run_dir.glob("*")) - before)
    if len(new) != 1:
        raise SystemExit(f"expected one new run folder under {run_dir}, found {len(new)}")
    rows = [json.loads(line) for line in (new[0] / "samples.jsonl").read_text().splitlines() if line.strip()]
    want = {p["question_id"]: p for p in doc["prompts"]}
    order = [r["question_id"] for r in rows if r["method"].split("@")[0] == "ar" and r["turn"] == 0]
    if order != [p["question_id"] for p in doc["prompts"]]:
        raise SystemExit(f"the run took the questions in another order than prompts.json: {order}")
    records = []
    for r in rows:
        if r["turn"] != 0:
            continue
        if r["status"] != "ok":
            raise SystemExit(f"{r['method']} q{r['question_id']}: {r['error']}")
        p = want[r["question_id"]]
        if r["prompt_tokens"] != len(p["ids"]):
            raise SystemExit(f"q{r['question_id']}: run's prompt has {r['prompt_tokens']} tokens, prompts.json "
                             f"{len(p['ids'])}: not the same prompt")
        records.append({"side": "ours", "method": r["method"].split("@")[0], "question_id": r["question_id"],
                        "category": r["category"], "output_ids": r["output_ids"],
                        "accept_lengths": r["accept_lengths"], "uncounted_tokens": 1,
                        "block_complexity": r["block_complexity"], "method_params": r.get("method_params"),
                        "wall_time": r["wall_time"], "new_tokens": r["new_tokens"]})
    if len(records) != len(METHODS) * len(doc["prompts"]):
        raise SystemExit(f"expected {len(METHODS) * len(doc['prompts'])} first-turn rows, found {len(records)}")
    manifest = json.loads((new[0] / "manifest.json").read_text())
    save_json(args.out, {"side": "ours", "run_dir": new[0].name, "versions": manifest.get("versions"),
                         "threads": args.threads, "max_new_tokens": args.max_new_tokens, "forward": args.forward,
                         "block_complexity": {"recycling": args.recycling_bc, "samd": args.samd_bc},
                         "samd_threshold": args.samd_threshold,
                         "trees": our_trees(args.recycling_bc, args.samd_bc), "records": records})
    print(f"{len(records)} records -> {args.out}")


# ---------------------------------------------------------------------------------------------
# Spec-Bench's side (the peer venv: transformers 4.37.1, fschat 0.2.31, ...; no specbench)
# ---------------------------------------------------------------------------------------------
def load_spec_bench(root: Path) -> tuple[dict, list[str]]:
    """Import Spec-Bench's three inference modules from the clone at `root`, the recycling one
    from its text with the CPU patches (the file stays as cloned). Returns (modules, patches)."""
    import importlib
    import types

    sys.path.insert(0, str(root))
    path = root / "evaluation" / "inference_recycling.py"
    src = path.read_text(encoding="utf-8")
    patches = []
    for old, new, n in RECYCLING_CPU_PATCHES:
        found = src.count(old)
        if found != n:
            raise SystemExit(f"{path}: expected {n} x {old!r}, found {found}: not Spec-Bench at {SPEC_BENCH_COMMIT}")
        src = src.replace(old, new)
        patches.append(f"evaluation/inference_recycling.py: {n} x {old} -> {new}")
    importlib.import_module("evaluation")
    mod = types.ModuleType("evaluation.inference_recycling")
    mod.__file__, mod.__package__ = str(path), "evaluation"
    sys.modules[mod.__name__] = mod
    exec(compile(src, str(path), "exec"), mod.__dict__)  # noqa: S102 - their module, patched as listed
    mods = {"recycling": mod, "samd": importlib.import_module("evaluation.inference_samd"),
            "ar": importlib.import_module("evaluation.inference_baseline")}
    return mods, patches


def chat_target(model_dir: str, where: Path) -> Path:
    """The target folder as transformers 4.37 reads it (eagle_medusa_peers.compat_target), with
    the chat template that transformers 5 keeps in chat_template.jinja put back into
    tokenizer_config.json, where 4.37 looks for it."""
    target = compat_target(model_dir, where)
    jinja = Path(model_dir) / "chat_template.jinja"
    tok_cfg = json.loads((target / "tokenizer_config.json").read_text())
    if jinja.exists() and "chat_template" not in tok_cfg:
        tok_cfg["chat_template"] = jinja.read_text(encoding="utf-8")
        (target / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2) + "\n")
    return target


class CapReached(Exception):
    """Raised from the recycling pre-hook when specbench's stop rule ends the generation."""


class RecyclingStop:
    """A forward pre-hook on the recycling Llama: before each tree forward of recycling_forward
    (the calls with position_ids; the prefill has none), read the loop's locals and stop by
    specbench's rule. The output so far is `verify_input_ids` (prompt + appended tokens) plus the
    tree's root (`input_ids[0, 0]`: the pending token, not appended yet)."""

    def __init__(self, fn, model) -> None:
        import inspect

        self.code = inspect.unwrap(fn).__code__
        self.cap = None
        model.register_forward_pre_hook(self.hook, with_kwargs=True)

    def arm(self, cap: int, stops: set[int], prompt_len: int) -> None:
        self.cap, self.stops, self.prompt_len, self.caught = cap, stops, prompt_len, None

    def disarm(self) -> None:
        self.cap = None

    def hook(self, module, args, kwargs):
        if self.cap is None or kwargs.get("position_ids") is None:
            return None
        f = sys._getframe(1)
        while f is not None and f.f_code is not self.code:
            f = f.f_back
        if f is None:
            return None
        loc = f.f_locals
        verify, root = loc["verify_input_ids"], int(loc["input_ids"][0, 0])
        n = verify.size(1) + 1 - self.prompt_len
        if n >= self.cap or (n > 0 and root in self.stops):
            produced = verify[0, self.prompt_len:].tolist() + [root]
            self.caught = (produced, list(loc["accept_length_list"]))
            raise CapReached
        return None


class SamdRecorder:
    """Wraps a SamdModel's prefill / decode (instance attributes) to keep each step's tokens and
    the last logits, whose argmax is the pending token."""

    def __init__(self, sm) -> None:
        self.tokens: list[int] = []
        self.last = None
        prefill, decode = sm.prefill, sm.decode
        rec = self

        def wrapped_prefill(*a, **kw):
            rec.last = prefill(*a, **kw)
            return rec.last

        def wrapped_decode(*a, **kw):
            sample_p, new = decode(*a, **kw)
            rec.tokens += new
            rec.last = sample_p
            return sample_p, new
        sm.prefill, sm.decode = wrapped_prefill, wrapped_decode

    def reset(self) -> None:
        self.tokens, self.last = [], None


def cmd_theirs(args) -> None:
    import torch

    torch.set_num_threads(args.threads)
    root = Path(args.spec_bench).resolve()
    mods, patches = load_spec_bench(root)
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer, BatchEncoding

    doc = json.loads(Path(args.prompts).read_text())
    stops = set(doc["stop_ids"])
    cap = args.max_new_tokens
    tmp = Path(tempfile.mkdtemp(prefix="spec-bench-target-"))
    target = str(chat_target(doc["model_dir"], tmp / "target"))
    f32 = torch.float32
    tok = AutoTokenizer.from_pretrained(target)
    if stops != {tok.eos_token_id}:
        print(f"warning: stop ids {sorted(stops)}, Spec-Bench's code stops on eos {tok.eos_token_id} only", flush=True)

    with torch.inference_mode():
        # Token Recycling, as inference_recycling.py's __main__ builds it (device_map cpu)
        rec_mod = mods["recycling"]
        rec_lm = rec_mod.LlamaForCausalLM.from_pretrained(target, torch_dtype=f32, low_cpu_mem_usage=True,
                                                          device_map="cpu").eval()
        rec_mod.adj_matrix = torch.zeros((rec_lm.vocab_size, RECYCLING_TOPK), dtype=torch.long, device=rec_lm.device)
        stopper = RecyclingStop(rec_mod.recycling_forward, rec_lm)
        # SAMD with the token_recycle tree, as inference_samd.py's __main__ builds it (device_map cpu)
        samd_mod = mods["samd"]
        samd_lm = AutoModelForCausalLM.from_pretrained(target, torch_dtype=f32, low_cpu_mem_usage=True,
                                                       device_map="cpu", attn_implementation="sdpa").eval()
        device = next(samd_lm.lm_head.parameters()).device
        scfg = samd_mod.SamdConfig(n_predicts=args.samd_n_predicts, tree_method="token_recycle", tree_model_path=None,
                                   len_threshold=args.samd_threshold, len_bias=5, tree_path=None)
        draft = samd_mod.DraftModel(scfg, sam_static=None, lm=samd_lm, dtype=f32, device=device)
        sm = samd_mod.SamdModel(scfg, samd_lm, draft, tok.eos_token_id, f32, device)
        srec = SamdRecorder(sm)
        # vanilla AR: transformers' generate
        ar_lm = AutoModelForCausalLM.from_pretrained(target, torch_dtype=f32, low_cpu_mem_usage=True,
                                                     device_map="cpu").eval()

        def inputs_of(ids):
            t = torch.tensor([ids], dtype=torch.long)
            return BatchEncoding({"input_ids": t, "attention_mask": torch.ones_like(t)})

        def run(name: str, ids: list[int], n: int):
            """(output ids cut by specbench's rule, per-step lengths as they count them, wall s)"""
            inputs = inputs_of(ids)
            if name == "ar":
                t0 = time.perf_counter()
                out, _, _, acc = mods["ar"].baseline_forward(inputs, ar_lm, tok, n)
                dt = time.perf_counter() - t0
                return cut(out[0, len(ids):].tolist(), n, stops), list(acc), dt
            if name == "recycling":
                stopper.arm(n, stops, len(ids))
                t0 = time.perf_counter()
                try:
                    out, _, _, acc = rec_mod.recycling_forward(inputs, rec_lm, tok, n + 1)
                    produced = out[0, len(ids):].tolist()
                    if len(produced) < n and not any(t in stops for t in produced):
                        # its only other exit: the pending token is EOS, which it does not append
                        produced.append(tok.eos_token_id)
                except CapReached:
                    produced, acc = stopper.caught
                dt = time.perf_counter() - t0
                stopper.disarm()
                return cut(produced, n, stops), list(acc), dt
            srec.reset()
            t0 = time.perf_counter()
            _, _, _, acc = samd_mod.samd_forward(inputs, sm, tok, n - 1)
            produced = srec.tokens + [int(torch.argmax(srec.last, dim=-1).reshape(-1)[0])]
            dt = time.perf_counter() - t0
            return cut(produced, n, stops), list(acc), dt

        prompts = doc["prompts"]
        template_equal = {}
        for p in prompts:  # the same chat template, applied by their tokenizer (transformers 4.37)
            theirs_ids = tok.apply_chat_template([{"role": "user", "content": p["text"]}], add_generation_prompt=True)
            template_equal[p["question_id"]] = list(theirs_ids) == p["ids"]
        bad = [q for q, ok in template_equal.items() if not ok]
        if bad:
            print(f"warning: their chat template gives other ids for questions {bad}; the shared ids are used",
                  flush=True)
        for name in METHODS:  # warm-up, untimed, as specbench run's
            run(name, prompts[0]["ids"], min(16, cap))
        records = []
        for i, p in enumerate(prompts):
            for name in rotation(i):
                out, acc, dt = run(name, p["ids"], cap)
                records.append({"side": "theirs", "method": name, "question_id": p["question_id"],
                                "category": p["category"], "output_ids": out, "accept_lengths": acc,
                                "uncounted_tokens": 0 if name != "samd" else 1,
                                "wall_time": dt, "new_tokens": len(out)})
                mat = sum(acc) / max(1, len(acc))
                print(f"  q{p['question_id']:>4} {p['category']:15s} {name:9s} {len(out):4d} tokens "
                      f"{len(out) / dt:6.1f} tok/s  steps {len(acc):4d}  #MAT {mat:.2f}", flush=True)

    adj = scfg.tree  # token_recycle.json: children per node, node 0 the root; child i = rank i
    node_path = {0: []}
    for node, children in enumerate(adj):
        for rank, child in enumerate(children):
            node_path[child] = node_path[node] + [rank]
    trees = {"recycling": [list(p) for p in rec_mod.choose_tree_template(RECYCLING_TREE)],
             "samd": [node_path[k] for k in sorted(node_path) if k]}
    commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=False).stdout.strip()
    save_json(args.out, {"side": "theirs", "spec_bench_commit": commit,
                         "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                                      **{d: version(d) for d in ("accelerate", "fschat")}},
                         "threads": args.threads, "max_new_tokens": cap, "samd_n_predicts": args.samd_n_predicts,
                         "samd_threshold": args.samd_threshold,
                         "tokens_per_forward": {"recycling": len(trees["recycling"]) + 1, "samd": len(adj)},
                         "trees": trees, "template_equal": template_equal, "patches": patches, "records": records})
    print(f"{len(records)} records -> {args.out}")


def version(dist: str) -> str:
    from importlib.metadata import version as v

    return v(dist)


# ---------------------------------------------------------------------------------------------
# comparison (standard library only)
# ---------------------------------------------------------------------------------------------
def tree_note(ours: list, theirs: list) -> str:
    o, t = {tuple(p) for p in ours}, {tuple(p) for p in theirs}
    if o == t:
        return f"the same {len(o)} rank paths"
    return (f"{len(o)} vs {len(t)} nodes, {len(o & t)} in common (ours only: {len(o - t)}, theirs only: "
            f"{len(t - o)}); depth {max(map(len, o), default=0)} vs {max(map(len, t), default=0)}")


def cmd_compare(args) -> None:
    docs = [json.loads(Path(f).read_text()) for f in args.files]
    by: dict = {}  # (side, method) -> {qid: [records over rounds]}
    for d in docs:
        for r in d["records"]:
            by.setdefault((r["side"], r["method"]), {}).setdefault(r["question_id"], []).append(r)
    if ("ours", "ar") not in by or ("theirs", "ar") not in by:
        raise SystemExit("compare needs at least one `ours` and one `theirs` file")
    ours_doc = next(d for d in docs if d["side"] == "ours")
    theirs_doc = next(d for d in docs if d["side"] == "theirs")
    ar = {s: {q: rs[0]["output_ids"] for q, rs in by[(s, "ar")].items()} for s in ("ours", "theirs")}
    qids = list(ar["ours"])
    cats = {q: by[("ours", "ar")][q][0]["category"] for q in qids}
    rounds = {s: sum(1 for d in docs if d["side"] == s) for s in ("ours", "theirs")}
    lines: list[str] = []
    p = lines.append
    p(f"{len(qids)} questions (first turns), {ours_doc['max_new_tokens']} new tokens, "
      f"{ours_doc['threads']} threads; rounds: ours {rounds['ours']}, theirs {rounds['theirs']}; "
      f"Spec-Bench {theirs_doc.get('spec_bench_commit', '?')[:12]}")
    p("")
    p("### Trees")
    p("")
    bcs, tpf = ours_doc["block_complexity"], theirs_doc["tokens_per_forward"]
    for m in ("recycling", "samd"):
        same = "equal" if bcs[m] == tpf[m] else "DIFFERENT"
        p(f"- {m}: tokens per tree forward ours (BC) {bcs[m]} / theirs {tpf[m]} ({same}); "
          f"tree: {tree_note(ours_doc['trees'][m], theirs_doc['trees'][m])}")
    p(f"- samd: suffix-automaton chain at most ours BC - 1 = {bcs['samd'] - 1} drafted tokens / theirs "
      f"n_predicts {theirs_doc['samd_n_predicts']} (start token included, zero-padded); threshold ours "
      f"{ours_doc['samd_threshold']} / theirs {theirs_doc['samd_threshold']}")
    te = theirs_doc.get("template_equal", {})
    p(f"- prompts: their tokenizer's chat template gives our ids for {sum(te.values())}/{len(te)} questions")
    p("")
    p("### Identical tokens per question (round 1)")
    p("")
    p("Leading output tokens equal to the same side's AR / that AR's tokens; the AR column: their AR "
      "against ours.")
    p("")
    head = ["question", "category", "AR tokens ours", "AR theirs vs ours"]
    for m in METHODS[1:]:
        head += [f"{m} ours", f"{m} theirs"]
    p("| " + " | ".join(head) + " |")
    p("| --- | --- | " + " | ".join("---:" for _ in head[2:]) + " |")
    for q in qids:
        row = [str(q), cats[q], str(len(ar["ours"][q])),
               f"{same_prefix(ar['theirs'].get(q, []), ar['ours'][q])}/{len(ar['ours'][q])}"]
        for m in METHODS[1:]:
            for side in ("ours", "theirs"):
                rs = by.get((side, m), {}).get(q)
                ref = ar[side].get(q, [])
                row.append(f"{same_prefix(rs[0]['output_ids'], ref)}/{len(ref)}" if rs else "-")
        p("| " + " | ".join(row) + " |")
    p("")
    p("### Per method and side (all rounds pooled)")
    p("")
    p("tok/s = total output tokens / total wall time (prefill included, warm-up excluded). #MAT = tokens "
      "added per decoding step as each side counts them; within output = (output tokens - tokens no "
      "step counts) / steps. = AR: questions whose output equals the same side's AR / our AR, in every round.")
    p("")
    p("| method | side | tokens | steps | #MAT | #MAT within output | tok/s | per round tok/s | "
      "vs own AR | = own AR | = our AR |")
    p("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |")
    speed: dict = {}
    for m in METHODS:
        for side in ("ours", "theirs"):
            recs = by.get((side, m), {})
            allr = [r for rs in recs.values() for r in rs]
            if not allr:
                continue
            first = [rs[0] for rs in recs.values()]
            tokens = sum(len(r["output_ids"]) for r in first)
            steps = sum(len(r["accept_lengths"]) for r in first)
            counted = sum(sum(r["accept_lengths"]) for r in first) / max(1, steps)
            within = sum(len(r["output_ids"]) - r["uncounted_tokens"] for r in first) / max(1, steps)
            tps = sum(r["new_tokens"] for r in allr) / sum(r["wall_time"] for r in allr)
            speed[(side, m)] = tps
            per_round = []
            for d in docs:
                rs = [r for r in d["records"] if r["method"] == m] if d["side"] == side else []
                if rs:
                    per_round.append(sum(r["new_tokens"] for r in rs) / sum(r["wall_time"] for r in rs))
            own = sum(all(r["output_ids"] == ar[side].get(q) for r in rs) for q, rs in recs.items())
            our = sum(all(r["output_ids"] == ar["ours"].get(q) for r in rs) for q, rs in recs.items())
            vs_ar = tps / speed[(side, "ar")] if (side, "ar") in speed else float("nan")
            p(f"| {m} | {side} | {tokens} | {steps} | {counted:.3f} | {within:.3f} | {tps:.1f} | "
              f"{', '.join(f'{x:.1f}' for x in per_round)} | {vs_ar:.2f}x | {own}/{len(recs)} | {our}/{len(recs)} |")
    p("")
    p("| method | ours / theirs tok/s |")
    p("| --- | ---: |")
    for m in METHODS:
        if ("ours", m) in speed and ("theirs", m) in speed:
            p(f"| {m} | {speed[('ours', m)] / speed[('theirs', m)]:.2f}x |")
    stable = all(len({json.dumps(r["output_ids"]) for r in rs}) == 1 for recs in by.values() for rs in recs.values())
    p("")
    p(f"Outputs the same in every round: {'yes' if stable else 'NO'}")
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    pr = sub.add_parser("prompts", help="chat-template prompt ids of the Spec-Bench subset, first turns")
    pr.add_argument("--out", required=True)
    pr.add_argument("--model", default="smollm2-135m")
    pr.add_argument("--per-category", type=int, default=3)
    pr.add_argument("--question-ids", default=None, help="only these question ids (comma-separated)")
    pr.add_argument("--questions", default=None, help="Spec-Bench question.jsonl (default: found locally)")
    pr.set_defaults(fn=cmd_prompts)
    for name, fn in (("ours", cmd_ours), ("theirs", cmd_theirs)):
        s = sub.add_parser(name)
        s.add_argument("--prompts", required=True)
        s.add_argument("--out", required=True)
        s.add_argument("--threads", type=int, default=2)
        s.add_argument("--max-new-tokens", type=int, default=128)
        s.add_argument("--samd-threshold", type=int, default=SAMD_THRESHOLD,
                       help="shortest suffix match drafted from the automaton (Spec-Bench's default 5)")
        if name == "ours":
            s.add_argument("--recycling-bc", type=int, default=RECYCLING_BC)
            s.add_argument("--samd-bc", type=int, default=SAMD_BC)
            s.add_argument("--forward", default="auto", help="specbench run --forward (default auto, as run's)")
        else:
            s.add_argument("--spec-bench", required=True, help="a clone of Spec-Bench (at SPEC_BENCH_COMMIT)")
            s.add_argument("--samd-n-predicts", type=int, default=SAMD_BC,
                           help="SAMD's automaton chain, start token included (Spec-Bench's default 40)")
        s.set_defaults(fn=fn)
    c = sub.add_parser("compare")
    c.add_argument("files", nargs="+")
    c.add_argument("--out", default=None)
    c.set_defaults(fn=cmd_compare)
    args = ap.parse_args()
    if getattr(args, "max_new_tokens", 2) < 2:
        raise SystemExit("--max-new-tokens must be at least 2")
    args.fn(args)


if __name__ == "__main__":
    main()
