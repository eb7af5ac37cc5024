"""specbench's `eagle` and `medusa` vs the official EAGLE-1 (`eagle-llm`) and Medusa-1 (`medusa-llm`) code.

Same target (SmolLM2-135M-Instruct, float32), same head files, same prompt token ids, greedy,
same cap on new tokens, same threads. Four steps, each a subcommand (reproduce.sh in
results/reference/peers-eagle-medusa/ runs them all):

    # in specbench's environment
    python benchmarks/eagle_medusa_peers.py heads   --eagle TRAINED --medusa TRAINED --out HEADS
    python benchmarks/eagle_medusa_peers.py prompts --out WORK/prompts.json
    python benchmarks/eagle_medusa_peers.py ours    --heads HEADS --prompts WORK/prompts.json --out WORK/ours-1.json
    # in the peers' environment (torch + transformers 4.36.2 + eagle-llm + medusa-llm, --no-deps)
    python benchmarks/eagle_medusa_peers.py theirs  --heads HEADS --prompts WORK/prompts.json --out WORK/theirs-1.json
    # anywhere
    python benchmarks/eagle_medusa_peers.py compare WORK/ours-*.json WORK/theirs-*.json

`heads` writes trained specbench heads in the published layouts (EAGLE-1: `pytorch_model.bin`
with `fc.*`, `layers.0.*`, `embed_tokens.weight` + a LlamaConfig `config.json`; Medusa-1:
`medusa_lm_head.pt` with `{i}.0.linear.*` and `{i}.1.weight` = a copy of the target's LM head +
`config.json`), then imports those files back with `specbench heads import`, so both sides read
the same tensors; it checks that the imported heads give the trained heads' logits.

`ours` runs `specbench run` (methods `ar`, `eagle@26 -o eagle.tree=eagle1_25`, `medusa@N` with
the Medusa tree of the `--medusa-choices` product, `--prompt-template vicuna`) and keeps, per
question, the output ids, the per-step accepted lengths and the wall time.

`theirs` runs `EaModel.ea_generate` (EAGLE-1's static tree, `choices.mc_sim_7b_63`, 25 nodes) and
`MedusaModel.medusa_generate` (medusa-llm 0.1's dense tree `medusa_choices=[1, k1, k2, ...]`; this
release has no sparse `mc_sim_7b_63`), both at temperature 0, plus `EaModel.naive_generate` (their
plain AR loop) for reference. Their generators stop on one EOS id and on their own token counts;
ours stops when the output (root included) reaches the cap or ends in a stop token. To run the
same steps, `theirs` consumes their generators and stops them by our rule; the tokens they
produced are the accepted tokens they append plus the pending root they carry to the next step.
Patches applied at run time (their files are not changed), see `patch_peers`:

1. RoPE base: their vendored Llama (`modeling_llama_kv.LlamaAttention._init_rope`, both
   packages) and EAGLE's draft layer (`cnets.LlamaAttention._init_rope`) build the rotary
   embedding with the default base 10000 (Llama-2's) and ignore `config.rope_theta`; SmolLM2 uses
   100000. Patched to pass `base=config.rope_theta`.
2. medusa-llm 0.1 `kv_cache.initialize_past_key_values` sizes the cache with
   `num_attention_heads` instead of `num_key_value_heads` (no GQA; SmolLM2 has 9 query and 3 KV
   heads): replaced by a copy that uses `num_key_value_heads`.
3. Neither package needs a CUDA-only line removed on this path: the `device="cuda"` defaults of
   `generate_tree_buffers` / `generate_medusa_buffers` are overridden by their callers with the
   model's device, the `torch.cuda.synchronize` calls sit in an unused `timer` decorator, and
   EAGLE's `initialize_past_key_values` hits `device.index` (None on a CPU) inside a try whose
   except branch is the single-device case.

The target: their transformers 4.36 cannot read the config and tokenizer_config that
transformers 5 wrote (`rope_parameters`, `TokenizersBackend`), so `theirs` writes a compatible copy
(`rope_theta`, `torch_dtype`, `PreTrainedTokenizerFast`, BPE merges as "a b" strings for
tokenizers 0.15) in a temporary folder next to a link to the same `model.safetensors`.

#MAT = sum over decoding steps of the tokens a step adds (accepted draft tokens + 1) / steps;
prefill excluded (specbench's definition). Tokens/s = output tokens (capped, EOS included) / wall
time of the call, prefill included, warm-up excluded.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EAGLE_BC = 26            # EAGLE-1's 25-node tree + root
DEFAULT_MEDUSA = "1,6,3,2"  # medusa-llm 0.1 dense tree: top-6 x top-3 x top-2 = 6 + 18 + 36 nodes


def medusa_paths(choices: list[int]) -> list[list[int]]:
    """medusa-llm 0.1's dense tree `[1, k1, k2, ...]` as rank paths (depth, then rank order)."""
    from itertools import product

    ks = choices[1:]
    out: list[list[int]] = []
    for depth in range(1, len(ks) + 1):
        out += [list(p) for p in product(*[range(k) for k in ks[:depth]])]
    return out


def parse_choices(text: str) -> list[int]:
    ks = [int(x) for x in text.split(",")]
    if len(ks) < 2 or ks[0] != 1 or any(k < 1 for k in ks):
        raise SystemExit(f"--medusa-choices must read 1,k1,k2,... (got {text})")
    return ks


def save_json(path: str, doc) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(doc) + "\n")


# ---------------------------------------------------------------------------------------------
# specbench side
# ---------------------------------------------------------------------------------------------
def cmd_heads(args) -> None:
    """Trained specbench heads -> published layouts -> `specbench heads import` -> logits check."""
    import torch
    from safetensors.torch import load_file

    from specbench_cli.methods.heads.checkpoint import load_heads
    from specbench_cli.models.load import load_model

    lm = load_model(args.model, dtype="float32")
    target = lm.model
    out = Path(args.out)
    # EAGLE-1: pytorch_model.bin (fc.*, layers.0.*, embed_tokens.weight) + LlamaConfig config.json
    src = Path(args.eagle)
    cfg = json.loads((src / "config.json").read_text())
    state = load_file(str(src / "model.safetensors"))
    state["embed_tokens.weight"] = target.get_input_embeddings().weight.detach().clone()
    tc = target.config
    rope = getattr(tc, "rope_parameters", None) or {}
    pub_cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "bias": "fc.bias" in state,
               "hidden_act": cfg.get("hidden_act", "silu"), "hidden_size": cfg["hidden_size"],
               "intermediate_size": cfg["intermediate_size"], "num_hidden_layers": cfg["num_hidden_layers"],
               "num_attention_heads": cfg["num_attention_heads"], "num_key_value_heads": cfg["num_key_value_heads"],
               "max_position_embeddings": cfg.get("max_position_embeddings", tc.max_position_embeddings),
               "rms_norm_eps": cfg["rms_norm_eps"], "rope_theta": float(rope.get("rope_theta", 10000.0)),
               "rope_scaling": None, "vocab_size": cfg["vocab_size"], "pad_token_id": tc.pad_token_id,
               "bos_token_id": tc.bos_token_id, "eos_token_id": tc.eos_token_id, "pretraining_tp": 1,
               "tie_word_embeddings": False, "torch_dtype": "float32", "use_cache": True}
    e_pub = out / "eagle-published"
    e_pub.mkdir(parents=True, exist_ok=True)
    torch.save({k: v.contiguous() for k, v in state.items()}, e_pub / "pytorch_model.bin")
    (e_pub / "config.json").write_text(json.dumps(pub_cfg, indent=2) + "\n")
    # Medusa-1: medusa_lm_head.pt ({i}.{j}.linear.*, {i}.{K}.weight = the target's LM head) + config.json
    src = Path(args.medusa)
    mstate = load_file(str(src / "medusa_lm_head.safetensors"))
    mcfg = json.loads((src / "config.json").read_text())
    n_heads, n_layers = int(mcfg["medusa_num_heads"]), int(mcfg["medusa_num_layers"])
    lm_w = target.get_output_embeddings().weight.detach().clone()
    for i in range(n_heads):
        mstate[f"{i}.{n_layers}.weight"] = lm_w.clone()
    m_pub = out / "medusa-published"
    m_pub.mkdir(parents=True, exist_ok=True)
    torch.save({k: v.contiguous() for k, v in mstate.items()}, m_pub / "medusa_lm_head.pt")
    (m_pub / "config.json").write_text(json.dumps(
        {"medusa_num_heads": n_heads, "medusa_num_layers": n_layers,
         "base_model_name_or_path": "HuggingFaceTB/SmolLM2-135M-Instruct"}, indent=2) + "\n")
    # import back with our CLI
    for pub, ours in ((e_pub, out / "eagle"), (m_pub, out / "medusa")):
        subprocess.run([sys.executable, "-m", "specbench_cli", "heads", "import", str(pub), "--out", str(ours)],
                       check=True)
    # the imported heads must compute what the trained ones compute
    torch.manual_seed(0)
    feats = torch.randn(7, tc.hidden_size) * 2
    toks = torch.randint(0, tc.vocab_size, (7,))
    with torch.inference_mode():
        a, b = (load_heads(Path(p), target) for p in (args.eagle, out / "eagle"))
        ca, cb = a.new_cache(), b.new_cache()
        fa, la = a.step(ca, feats, toks, torch.arange(7), None)
        fb, lb = b.step(cb, feats, toks, torch.arange(7), None)
        e_diff = float((la - lb).abs().max())
        a, b = (load_heads(Path(p), target) for p in (args.medusa, out / "medusa"))
        m_diff = float((a.head_logits(feats) - b.head_logits(feats)).abs().max())
    print(f"imported vs trained, max |logit difference|: eagle {e_diff:.3g}, medusa {m_diff:.3g}")
    if e_diff > 1e-4 or m_diff > 1e-4:
        raise SystemExit("the imported heads differ from the trained heads")
    save_json(str(out / "check.json"), {"eagle_max_logit_diff": e_diff, "medusa_max_logit_diff": m_diff})


def cmd_prompts(args) -> None:
    """The Spec-Bench subset, first turns, as prompt ids in fastchat's vicuna format (as `specbench
    run --prompt-template vicuna` encodes them), the target folder and the stop ids."""
    from specbench_cli import tasks
    from specbench_cli.models.load import load_model
    from specbench_cli.models.prompting import encode_chat, stop_token_ids, user_turn
    from specbench_cli.tasks.base import select

    lm = load_model(args.model, dtype="float32")
    qs = select(tasks.get("spec_bench").load(args.questions), limit=args.per_category)
    rows = [{"question_id": q.id, "category": q.category,
             "ids": encode_chat(lm.tokenizer, user_turn(q.turns[0]), "vicuna")} for q in qs]
    save_json(args.out, {"model": args.model, "model_dir": lm.resolved, "per_category": args.per_category,
                         "questions": args.questions, "stop_ids": stop_token_ids(lm.tokenizer, lm.model),
                         "prompts": rows})
    print(f"{len(rows)} prompts -> {args.out}; target folder {lm.resolved}")


def cmd_ours(args) -> None:
    """`specbench run` with the matching settings; one record per (method, question)."""
    doc = json.loads(Path(args.prompts).read_text())
    heads = Path(args.heads)
    work = Path(args.out).parent
    choices = parse_choices(args.medusa_choices)
    tree_file = work / f"medusa-tree-{'-'.join(map(str, choices))}.json"
    tree_file.write_text(json.dumps(medusa_paths(choices)) + "\n")
    bc_medusa = 1 + len(medusa_paths(choices))
    run_dir = work / "runs"
    before = set(run_dir.glob("*")) if run_dir.is_dir() else set()
    cmd = [sys.executable, "-m", "specbench_cli", "run", "--model", doc["model"], "--tasks", "spec_bench",
           "--question-ids", ",".join(p["question_id"] for p in doc["prompts"]), "--max-new-tokens", str(args.max_new_tokens),
           "--methods", f"ar,eagle@{EAGLE_BC},medusa@{bc_medusa}",
           "-o", f"eagle.heads={heads / 'eagle'}", "-o", "eagle.tree=eagle1_25", "-o", "eagle.vocab=full",
           "-o", f"medusa.heads={heads / 'medusa'}", "-o", f"medusa.choices={tree_file.resolve()}", "-o", "medusa.vocab=full",
           "--prompt-template", "vicuna", "--dtype", "float32", "--threads", str(args.threads),
           "--forward", args.forward, "--output-dir", str(run_dir), "--no-report"]
    if doc.get("questions"):
        cmd += ["--questions", doc["questions"]]
    print(" ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    new = sorted(set(run_dir.glob("*")) - before)
    if len(new) != 1:
        raise SystemExit(f"expected one new run folder under {run_dir}, found {len(new)}")
    rows = [json.loads(line) for line in (new[0] / "samples.jsonl").read_text().splitlines() if line.strip()]
    want = {p["question_id"]: p for p in doc["prompts"]}
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
        name = r["method"].split("@")[0]
        records.append({"side": "ours", "method": name, "question_id": r["question_id"], "category": r["category"],
                        "output_ids": r["output_ids"], "accept_lengths": r["accept_lengths"],
                        "wall_time": r["wall_time"], "new_tokens": r["new_tokens"]})
    manifest = json.loads((new[0] / "manifest.json").read_text())
    save_json(args.out, {"side": "ours", "run_dir": new[0].name, "versions": manifest.get("versions"),
                         "threads": args.threads, "max_new_tokens": args.max_new_tokens,
                         "medusa_choices": choices, "forward": args.forward, "records": records})
    print(f"{len(records)} records -> {args.out}")


# ---------------------------------------------------------------------------------------------
# peers' side (their environment: transformers 4.36, eagle-llm, medusa-llm; no specbench)
# ---------------------------------------------------------------------------------------------
def compat_target(model_dir: str, where: Path) -> Path:
    """A copy of the target folder that transformers 4.36 reads: config with `rope_theta` and
    `torch_dtype`, a PreTrainedTokenizerFast tokenizer config, merges as strings; weights linked."""
    src = Path(model_dir)
    cfg = json.loads((src / "config.json").read_text())
    rope = cfg.pop("rope_parameters", None) or {}
    cfg["rope_theta"] = float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    cfg["rope_scaling"] = None
    cfg["torch_dtype"] = cfg.pop("dtype", "float32")
    where.mkdir(parents=True, exist_ok=True)
    (where / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    tok = json.loads((src / "tokenizer_config.json").read_text())
    tok["tokenizer_class"] = "PreTrainedTokenizerFast"
    for k in ("backend", "is_local", "local_files_only"):
        tok.pop(k, None)
    (where / "tokenizer_config.json").write_text(json.dumps(tok, indent=2) + "\n")
    # tokenizers 0.15 reads BPE merges as "a b" strings; newer files store [a, b] pairs
    tj = json.loads((src / "tokenizer.json").read_text(encoding="utf-8"))
    merges = tj.get("model", {}).get("merges")
    if merges and isinstance(merges[0], list):
        tj["model"]["merges"] = [" ".join(m) for m in merges]
    (where / "tokenizer.json").write_text(json.dumps(tj, ensure_ascii=False), encoding="utf-8")
    for name in ("model.safetensors", "generation_config.json"):
        if (src / name).exists() and not (where / name).exists():
            (where / name).symlink_to((src / name).resolve())
    return where


def patch_peers() -> list[str]:
    """Run-time patches of the peers' code (see the module docstring). Returns what was patched."""
    import eagle.model.cnets as ecnets
    import eagle.model.modeling_llama_kv as ekv
    import medusa.model.medusa_model as mmodel
    import medusa.model.modeling_llama_kv as mkv
    import torch
    from medusa.model.kv_cache import KVCache as MKVCache

    done = []

    def rope_from_config(module):
        original = module.LlamaAttention._init_rope

        def _init_rope(self):
            theta = getattr(self.config, "rope_theta", None)
            if self.config.rope_scaling is None and theta is not None:
                self.rotary_emb = module.LlamaRotaryEmbedding(
                    self.head_dim, max_position_embeddings=self.max_position_embeddings, base=theta)
            else:
                original(self)
        module.LlamaAttention._init_rope = _init_rope
        done.append(f"{module.__name__}.LlamaAttention._init_rope: base=config.rope_theta")

    for m in (ekv, ecnets, mkv):
        rope_from_config(m)

    def initialize_past_key_values(model):
        config = model.config
        data = torch.zeros(config.num_hidden_layers * 2, 1, config.num_key_value_heads,
                           config.max_position_embeddings, config.hidden_size // config.num_attention_heads,
                           device=model.device, dtype=model.dtype)
        current = torch.zeros(config.num_hidden_layers * 2, dtype=torch.long, device="cpu")
        past = [[MKVCache(data[i * 2 + j], current[i * 2 + j]) for j in range(2)]
                for i in range(config.num_hidden_layers)]
        return past, data, current
    mmodel.initialize_past_key_values = initialize_past_key_values
    done.append("medusa.model.medusa_model.initialize_past_key_values: num_key_value_heads (GQA)")
    return done


class Recorder:
    """Wraps a peer's `update_inference_inputs` to see each step: the accepted length and the
    pending root token (the next step's first candidate, not yet appended to input_ids)."""

    def __init__(self, module, pending) -> None:
        self.module, self.pending, self.original = module, pending, module.update_inference_inputs
        self.steps: list[int] = []
        self.root = None
        rec = self

        def wrapped(*a, **kw):
            out = rec.original(*a, **kw)
            accept_length = a[3] if len(a) > 3 else kw["accept_length"]
            rec.steps.append(int(accept_length) + 1)
            rec.root, rec.ids = rec.pending(out), out[0]  # both peers return input_ids first
            return out
        module.update_inference_inputs = wrapped

    def reset(self, first) -> None:
        self.steps, self.root = [], first


def stop_rule(produced: list[int], cap: int, stops: set[int]) -> bool:
    """specbench's loop: go on while the output is below the cap and does not end in a stop token."""
    return len(produced) >= cap or (bool(produced) and produced[-1] in stops)


def cut(produced: list[int], cap: int, stops: set[int]) -> list[int]:
    out = produced[:cap]
    for i, t in enumerate(out):
        if t in stops:
            return out[: i + 1]
    return out


def run_peer(gen_fn, rec: Recorder | None, ids: list[int], cap: int, stops: set[int]):
    """Consume a peer generator (yielding after each step) until specbench's stop rule holds.
    Returns (output ids, per-step added tokens, wall seconds)."""
    import torch

    inp = torch.tensor([ids], dtype=torch.long)
    t0 = time.perf_counter()
    produced: list[int] = []
    gen = gen_fn(inp)
    if rec is not None:
        rec.reset(None)
    for out in gen:  # EAGLE yields input_ids, Medusa its decoded text (input_ids then come from rec)
        if rec is None:  # naive_generate: one appended token per forward, nothing pending
            produced = out[0, len(ids):].tolist()
        else:
            produced = rec.ids[0, len(ids):].tolist() + [rec.root]
        if stop_rule(produced, cap, stops):
            break
    dt = time.perf_counter() - t0
    gen.close()
    return cut(produced, cap, stops), list(rec.steps) if rec is not None else None, dt


def cmd_theirs(args) -> None:
    import torch

    torch.set_num_threads(args.threads)
    patches = patch_peers()
    import eagle.model.ea_model as eam
    import medusa.model.medusa_model as mmodel
    import transformers

    doc = json.loads(Path(args.prompts).read_text())
    stops = set(doc["stop_ids"])
    heads = Path(args.heads)
    choices = parse_choices(args.medusa_choices)
    tmp = Path(tempfile.mkdtemp(prefix="peers-target-"))
    target = compat_target(doc["model_dir"], tmp / "target")
    records = []

    with torch.inference_mode():
        ea = eam.EaModel.from_pretrained(base_model_path=str(target), ea_model_path=str(heads / "eagle-published"),
                                         torch_dtype=torch.float32).eval()
        # ea_generate yields input_ids (accepted tokens appended); update_inference_inputs returns
        # (input_ids, tree_logits, new_token, hidden_state, sample_token): sample_token = pending root
        erec = Recorder(eam, lambda out: int(out[4].reshape(-1)[0]))
        # medusa-llm reads base_model_name_or_path from the heads' config: a copy naming the local target
        mdir = tmp / "medusa"
        mdir.mkdir()
        mcfg = json.loads((heads / "medusa-published" / "config.json").read_text())
        mcfg["base_model_name_or_path"] = str(target)
        (mdir / "config.json").write_text(json.dumps(mcfg) + "\n")
        (mdir / "medusa_lm_head.pt").symlink_to((heads / "medusa-published" / "medusa_lm_head.pt").resolve())
        md = mmodel.MedusaModel.from_pretrained(str(mdir), torch_dtype=torch.float32).eval()
        if len(choices) - 1 != md.medusa:
            raise SystemExit(f"--medusa-choices {choices} needs {len(choices) - 1} heads; the file has {md.medusa}")

        # update_inference_inputs returns (input_ids, logits, medusa_logits, new_token); the pending
        # root is the argmax of the new logits (generate_candidates' first candidate)
        mrec = Recorder(mmodel, lambda out: int(torch.argmax(out[1][0, -1])))
        sides = {
            "eagle": (lambda inp: ea.ea_generate(inp, temperature=0.0, max_steps=args.max_new_tokens + 1), erec),
            "medusa": (lambda inp: md.medusa_generate(inp, temperature=0.0, max_steps=args.max_new_tokens + 1,
                                                      medusa_choices=choices), mrec),
            "ar": (lambda inp: ea.naive_generate(inp, temperature=0.0, max_steps=args.max_new_tokens + 1), None),
        }
        prompts = doc["prompts"]
        for name, (fn, rec) in sides.items():  # warm-up, untimed
            run_peer(fn, rec, prompts[0]["ids"], 16, stops)
        for i, p in enumerate(prompts):
            for name, (fn, rec) in sides.items():
                out, steps, dt = run_peer(fn, rec, p["ids"], args.max_new_tokens, stops)
                records.append({"side": "theirs", "method": name, "question_id": p["question_id"],
                                "category": p["category"], "output_ids": out,
                                "accept_lengths": steps if steps is not None else [1] * max(0, len(out) - 1),
                                "wall_time": dt, "new_tokens": len(out)})
                print(f"  q{p['question_id']:>4} {p['category']:15s} {name:6s} {len(out):4d} tokens "
                      f"{len(out) / dt:6.1f} tok/s" + (f"  #MAT {sum(steps) / max(1, len(steps)):.2f}" if steps else ""),
                      flush=True)
    save_json(args.out, {"side": "theirs", "versions": {"torch": torch.__version__,
                                                        "transformers": transformers.__version__,
                                                        "eagle-llm": version("eagle-llm"),
                                                        "medusa-llm": version("medusa-llm")},
                         "threads": args.threads, "max_new_tokens": args.max_new_tokens, "medusa_choices": choices,
                         "patches": patches, "records": records})
    print(f"{len(records)} records -> {args.out}")


def version(dist: str) -> str:
    from importlib.metadata import version as v

    return v(dist)


# ---------------------------------------------------------------------------------------------
# comparison (standard library only)
# ---------------------------------------------------------------------------------------------
def cmd_compare(args) -> None:
    docs = [json.loads(Path(f).read_text()) for f in args.files]
    by = {}  # (side, method) -> {qid: [records over rounds]}
    for d in docs:
        for r in d["records"]:
            by.setdefault((r["side"], r["method"]), {}).setdefault(r["question_id"], []).append(r)
    ar = {q: rs[0]["output_ids"] for q, rs in by.get(("ours", "ar"), {}).items()}
    qids = list(ar)
    cats = {q: by[("ours", "ar")][q][0]["category"] for q in qids}
    lines = []
    p = lines.append
    rounds = {s: sum(1 for d in docs if d["side"] == s) for s in ("ours", "theirs")}
    p(f"{len(qids)} questions; rounds: ours {rounds['ours']}, theirs {rounds['theirs']}")
    p("")
    p("### Tokens (greedy): identical to our AR")
    p("")
    p("| method | ours = AR | theirs = AR | ours = theirs | same across rounds |")
    p("| --- | ---: | ---: | ---: | ---: |")
    for m in ("ar", "eagle", "medusa"):
        o, t = by.get(("ours", m), {}), by.get(("theirs", m), {})
        oa = sum(all(r["output_ids"] == ar[q] for r in o.get(q, [])) and q in o for q in qids)
        ta = sum(all(r["output_ids"] == ar[q] for r in t.get(q, [])) and q in t for q in qids)
        ot = sum(q in o and q in t and o[q][0]["output_ids"] == t[q][0]["output_ids"] for q in qids)
        stable = all(len({json.dumps(r["output_ids"]) for r in rs}) == 1 for side in (o, t) for rs in side.values())
        p(f"| {m} | {oa}/{len(qids)} | {ta}/{len(qids)} | {ot}/{len(qids)} | {'yes' if stable else 'NO'} |")
    p("")
    p("### #MAT, ours vs theirs, per question")
    p("")
    p("Counted: sum of the tokens each step added / steps (specbench's #MAT; a last step may add "
      "tokens past the cap). Within output: (output tokens - 1) / steps, the prefill's token excluded.")
    p("")
    p("| question | category | tokens | method | steps ours / theirs | #MAT counted ours / theirs | "
      "#MAT within output ours / theirs | per-step lengths |")
    p("| --- | --- | ---: | --- | ---: | ---: | ---: | --- |")
    tot = {}
    for q in qids:
        for m in ("eagle", "medusa"):
            o, t = by.get(("ours", m), {}).get(q), by.get(("theirs", m), {}).get(q)
            if not o or not t:
                continue
            oa, ta = o[0]["accept_lengths"], t[0]["accept_lengths"]
            n_out = len(o[0]["output_ids"])
            for side, acc, out in (("ours", oa, o[0]), ("theirs", ta, t[0])):
                s = tot.setdefault((side, m), [0, 0, 0])
                s[0] += sum(acc)
                s[1] += len(acc)
                s[2] += len(out["output_ids"]) - 1
            p(f"| {q} | {cats[q]} | {n_out} | {m} | {len(oa)} / {len(ta)} | "
              f"{sum(oa) / len(oa):.3f} / {sum(ta) / len(ta):.3f} | "
              f"{(n_out - 1) / len(oa):.3f} / {(len(t[0]['output_ids']) - 1) / len(ta):.3f} | "
              f"{step_note(oa, ta, n_out, o[0]['output_ids'])} |")
    p("")
    p("| method | #MAT counted ours | #MAT counted theirs | #MAT within output ours | "
      "#MAT within output theirs | steps ours | steps theirs |")
    p("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for m, label in (("eagle", "EAGLE-1 (25-node static tree)"), ("medusa", "Medusa-1 (dense tree)")):
        if ("ours", m) in tot and ("theirs", m) in tot:
            o, t = tot[("ours", m)], tot[("theirs", m)]
            p(f"| {label} | {o[0] / o[1]:.3f} | {t[0] / t[1]:.3f} | {o[2] / o[1]:.3f} | {t[2] / t[1]:.3f} | "
              f"{o[1]} | {t[1]} |")
    p("")
    p("### Wall-clock tokens/s (total output tokens / total wall time, all rounds)")
    p("")
    p("| method | ours tok/s | theirs tok/s | ours / theirs | ours per round | theirs per round |")
    p("| --- | ---: | ---: | ---: | --- | --- |")
    for m, label in (("ar", "AR (theirs: EaModel.naive_generate)"), ("eagle", "EAGLE-1"), ("medusa", "Medusa-1")):
        res = {}
        for side in ("ours", "theirs"):
            per_round = []
            for d in docs:
                if d["side"] != side:
                    continue
                rs = [r for r in d["records"] if r["method"] == m]
                if rs:
                    per_round.append(sum(r["new_tokens"] for r in rs) / sum(r["wall_time"] for r in rs))
            allr = [r for rs in by.get((side, m), {}).values() for r in rs]
            res[side] = (sum(r["new_tokens"] for r in allr) / sum(r["wall_time"] for r in allr) if allr else None,
                         per_round)
        o, t = res["ours"], res["theirs"]
        if o[0] and t[0]:
            p(f"| {label} | {o[0]:.1f} | {t[0]:.1f} | {o[0] / t[0]:.2f}x | {', '.join(f'{x:.1f}' for x in o[1])} | "
              f"{', '.join(f'{x:.1f}' for x in t[1])} |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


def step_note(ours: list[int], theirs: list[int], n_out: int, out: list[int]) -> str:
    """'equal', or where the per-step lengths part and why, when it is the last step with one
    token left (specbench drafts nothing then; the peers draft their full tree)."""
    if ours == theirs:
        return "equal"
    for i, (x, y) in enumerate(zip(ours, theirs)):
        if x != y:
            before = 1 + sum(ours[:i])
            if i == len(ours) - 1 == len(theirs) - 1 and before == n_out - 1:
                return f"equal but the last (1 token left: ours drafts nothing, {x}; theirs {y}, past the cap)"
            return f"DIFFER at step {i}: {x} vs {y}"
    return f"DIFFER in length: {len(ours)} vs {len(theirs)} steps"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("heads", help="trained heads -> published layouts -> specbench heads import")
    h.add_argument("--eagle", required=True, help="EAGLE heads folder from `specbench train heads --kind eagle`")
    h.add_argument("--medusa", required=True, help="Medusa heads folder from `specbench train heads --kind medusa`")
    h.add_argument("--out", required=True)
    h.add_argument("--model", default="smollm2-135m")
    pr = sub.add_parser("prompts", help="Spec-Bench prompt ids (vicuna template), target folder, stop ids")
    pr.add_argument("--out", required=True)
    pr.add_argument("--model", default="smollm2-135m")
    pr.add_argument("--per-category", type=int, default=2)
    pr.add_argument("--questions", default=None, help="Spec-Bench question.jsonl (default: found locally)")
    for name, fn in (("ours", cmd_ours), ("theirs", cmd_theirs)):
        s = sub.add_parser(name)
        s.add_argument("--heads", required=True, help="the `heads` subcommand's --out")
        s.add_argument("--prompts", required=True)
        s.add_argument("--out", required=True)
        s.add_argument("--threads", type=int, default=2)
        s.add_argument("--max-new-tokens", type=int, default=128)
        s.add_argument("--medusa-choices", default=DEFAULT_MEDUSA, help="medusa-llm 0.1 tree: 1,k1,k2,... (one k per head)")
        if name == "ours":
            s.add_argument("--forward", default="auto", help="specbench run --forward (default auto, as run's)")
        s.set_defaults(fn=fn)
    c = sub.add_parser("compare")
    c.add_argument("files", nargs="+")
    c.add_argument("--out", default=None)
    h.set_defaults(fn=cmd_heads)
    pr.set_defaults(fn=cmd_prompts)
    c.set_defaults(fn=cmd_compare)
    args = ap.parse_args()
    args.fn(args)


if __name__ == "__main__":
    main()
