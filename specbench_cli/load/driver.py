"""`specbench load`: every load point, every method, the same trace, into one resumable folder.

Order of work: everything that can be refused is checked first (options, questions, methods at
every block complexity of the sweep, the output folder, a folder holding another load run's
settings), then the tokenizer (or, when a method runs in specbench's own loop, the model) loads,
the prompts are templated and capped, and the folder's manifest is written. Then, for each
point in turn: its trace is read back from DIR/trace/<point>.jsonl (or drawn and written), and
each method of the point, baselines first (`ar`, `llama.cpp:ar`, `vllm:ar`, `openai:ar`), then
the speculative ones, gets a fresh backend (a server started for it, or the own loop) that
replays the trace. Records go to DIR/load/<point>/<method>.jsonl as requests end (a line each,
flushed), then `<method>.done`; a (point, method) with its `.done` is skipped when the same
folder is run again (or `--resume`d), one without is run again from the start. Ctrl-C stops
every server and keeps the finished pairs. Only counters live in memory, never the records.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from rich.markup import escape

from specbench_cli.atomic import atomic_write
from specbench_cli.config.fields import RunConfig
from specbench_cli.config.instance import MethodInstance
from specbench_cli.config.manifest import manifest_config
from specbench_cli.config.syntax import ADAPTIVE, AUTO, parse_bc
from specbench_cli.console import err
from specbench_cli.errors import RuntimeFailure, UsageError, check_not_link, check_output_folder, open_no_link
from specbench_cli.load.trace import Prompt, build_trace, read_trace, trace_path, write_trace
from specbench_cli.names import AR, baseline_of, is_baseline
from specbench_cli.store.load import LoadPoint, RequestRecord, TraceRequest

KIND = "load"
MANIFEST = "manifest.json"
LOCK = "load.lock"
DEFAULT_CONCURRENCY = (1, 2, 4, 8)
DEFAULT_SLOTS = 8            # a server's slots when a run has only open-loop points and no --max-concurrency
DEFAULT_TIME_LIMIT_S = 600.0
MAX_LEVEL = 1024
MAX_REQUESTS = 1_000_000
SLO_KEYS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2el": "e2el_ms"}
PROGRESS_EVERY_S = 5.0
# options that start processes or reach the network: never taken from a folder, free to change on a re-run
FREE_KEYS = ("engine_bin", "engine_url", "engine_timeout")


# ----------------------------------------------------------------------------- options

@dataclass
class LoadOptions:
    """What `specbench load` adds to a run's options (cli/load.py parses them)."""

    concurrency: list[int] = field(default_factory=list)
    request_rate: list[float] = field(default_factory=list)
    burstiness: float = 1.0
    max_concurrency: Optional[int] = None
    num_prompts: Optional[int] = None          # None: each question once
    time_limit_s: float = DEFAULT_TIME_LIMIT_S
    warmup: int = 1
    bcs: list[Union[int, str]] = field(default_factory=list)   # empty: the run's block complexity
    slo: Optional[dict] = None

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any, where: str) -> "LoadOptions":
        if not isinstance(data, dict):
            raise UsageError(f"{where}: 'load' must be an object")
        known = set(cls.__dataclass_fields__)
        try:
            out = cls(**{k: v for k, v in data.items() if k in known})
        except TypeError as e:
            raise UsageError(f"{where}: 'load': {e}") from None
        out.check(where)
        return out

    def check(self, where: str = "") -> None:
        """Every value in bounds (UsageError naming the option)."""
        pre = f"{where}: " if where else ""
        for n in self.concurrency:
            if not _whole(n) or not 1 <= n <= MAX_LEVEL:
                raise UsageError(f"{pre}--concurrency takes whole numbers from 1 to {MAX_LEVEL} (got {n})")
        for r in self.request_rate:
            if not _number(r) or not 0 < r <= 1e4:
                raise UsageError(f"{pre}--request-rate takes requests per second in (0, 10000] (got {r})")
        if not _number(self.burstiness) or not 0.01 <= self.burstiness <= 100:
            raise UsageError(f"{pre}--burstiness must be in [0.01, 100] (got {self.burstiness})")
        if self.max_concurrency is not None and (not _whole(self.max_concurrency)
                                                 or not 1 <= self.max_concurrency <= MAX_LEVEL):
            raise UsageError(f"{pre}--max-concurrency must be a whole number from 1 to {MAX_LEVEL}")
        if self.num_prompts is not None and (not _whole(self.num_prompts) or not 1 <= self.num_prompts <= MAX_REQUESTS):
            raise UsageError(f"{pre}--num-prompts must be a whole number from 1 to {MAX_REQUESTS:,}")
        if not _number(self.time_limit_s) or not 0 < self.time_limit_s <= 7 * 86400:
            raise UsageError(f"{pre}--time-limit must be seconds in (0, 604800] (got {self.time_limit_s})")
        if not _whole(self.warmup) or not 0 <= self.warmup <= 10_000:
            raise UsageError(f"{pre}--warmup must be a whole number from 0 to 10000 (got {self.warmup})")
        for bc in self.bcs:
            if bc != ADAPTIVE and not (_whole(bc) and bc >= 1):
                raise UsageError(f"{pre}--bc takes block complexities (whole numbers >= 1) or adaptive (got {bc})")
        if self.slo is not None and (not isinstance(self.slo, dict) or not self.slo or any(
                k not in SLO_KEYS.values() or not _number(v) or v <= 0 for k, v in self.slo.items())):
            raise UsageError(f"{pre}--slo: expected KEY:MS pairs with KEY in {', '.join(SLO_KEYS)}")

    @property
    def slots(self) -> int:
        """Requests a server decodes at once: the highest concurrency (or --max-concurrency)."""
        levels = list(self.concurrency) + ([self.max_concurrency] if self.max_concurrency else [])
        return max(levels) if levels else DEFAULT_SLOTS


def split_list(text: Optional[str]) -> list[str]:
    """'1, 2,4' -> ['1', '2', '4']."""
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def _whole(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def parse_levels(text: Optional[str]) -> list[int]:
    """'1,2,4,8' -> [1, 2, 4, 8] (distinct, in order given)."""
    out: list[int] = []
    for part in split_list(text):
        if not re.fullmatch(r"[0-9]{1,7}", part) or not 1 <= int(part) <= MAX_LEVEL:
            raise UsageError(f"--concurrency {text}: {part!r} is not a whole number from 1 to {MAX_LEVEL}")
        if int(part) not in out:
            out.append(int(part))
    return out


def parse_rates(text: Optional[str]) -> list[float]:
    """'0.5,1' -> [0.5, 1.0] requests per second."""
    out: list[float] = []
    for part in split_list(text):
        try:
            rate = float(part)
        except ValueError:
            rate = math.nan
        if not math.isfinite(rate) or not 0 < rate <= 1e4:
            raise UsageError(f"--request-rate {text}: {part!r} is not a rate in (0, 10000] requests per second")
        if rate not in out:
            out.append(rate)
    return out


def parse_slo(text: Optional[str]) -> Optional[dict]:
    """'ttft:500,tpot:50' -> {'ttft_ms': 500.0, 'tpot_ms': 50.0} (milliseconds)."""
    if text is None or not text.strip():
        return None
    out: dict[str, float] = {}
    for part in split_list(text):
        key, sep, value = part.partition(":")
        try:
            ms = float(value)
        except ValueError:
            ms = math.nan
        if not sep or key.strip().lower() not in SLO_KEYS or not math.isfinite(ms) or ms <= 0:
            raise UsageError(f"--slo {text}: expected KEY:MS pairs (KEY one of {', '.join(SLO_KEYS)}, MS > 0), "
                             f"got {part!r}")
        out[SLO_KEYS[key.strip().lower()]] = ms
    return out


def parse_bcs(text: Optional[str]) -> list[Union[int, str]]:
    """'4,6,adaptive' -> [4, 6, 'adaptive']; 'auto' is refused (a load point runs at one budget)."""
    out: list[Union[int, str]] = []
    for part in split_list(text):
        if part.strip().lower() == AUTO:
            raise UsageError("--bc: auto is not taken by a load run (give the budgets to sweep, e.g. --bc 2,4,6, "
                             "or adaptive)")
        bc = parse_bc(part, flag="--bc")
        if bc not in out:
            out.append(bc)
    return out


def points_of(opts: LoadOptions, requests: int, seed: int = 0) -> list[LoadPoint]:
    """Every point: each concurrency, then each rate, at each block complexity of a sweep (a point
    name gets `-bcK` only when the run sweeps more than one)."""
    bcs: list[Any] = list(opts.bcs) if len(opts.bcs) > 1 else [None]
    out = []
    for mode, levels in (("concurrency", opts.concurrency), ("rate", opts.request_rate)):
        for level in levels:
            for bc in bcs:
                out.append(LoadPoint(mode=mode, level=float(level) if mode == "rate" else int(level),
                                     max_requests=requests, time_limit_s=float(opts.time_limit_s),
                                     warmup=opts.warmup, burstiness=float(opts.burstiness), seed=seed,
                                     block_complexity=bc))
    return out


def point_dict(point: LoadPoint) -> dict:
    return {**asdict(point), "name": point.name}


# ----------------------------------------------------------------------------- files

def method_file(label: str) -> str:
    """A method label as a file name: `llama.cpp:ngram-mod` -> `llama.cpp-ngram-mod`."""
    name = re.sub(r"[^A-Za-z0-9._@=+-]", "_", label.replace(":", "-"))
    return "_" + name[1:] if name.startswith(".") else name


def safe_folder(path: Path) -> Path:
    """`path` created (parents too) and checked: never a link (a folder from elsewhere may plant
    `load -> /elsewhere`), so what is written inside stays inside."""
    for p in reversed([path, *path.parents]):
        if p.is_symlink():
            raise UsageError(f"{p} is a symbolic link; specbench never writes through a link it did not create "
                             f"(remove it)")
        if p == path or not p.exists():
            break
    path.mkdir(parents=True, exist_ok=True)
    check_not_link(path)
    return path


class RecordFile:
    """DIR/load/<point>/<method>.jsonl opened for this (point, method) anew (a run that stopped
    half-way is redone whole), written a line per record, flushed each time; `finish` syncs it
    and writes `<method>.done`."""

    def __init__(self, folder: Path, label: str) -> None:
        self.path = folder / f"{method_file(label)}.jsonl"
        self.done_path = folder / f"{method_file(label)}.done"
        with contextlib.suppress(FileNotFoundError):
            check_not_link(self.done_path).unlink()
        fd = open_no_link(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        self.file = os.fdopen(fd, "w", encoding="utf-8")
        self.count = self.errors = 0

    def write(self, rec: RequestRecord) -> None:
        self.file.write(json.dumps(rec.to_json(), allow_nan=False, ensure_ascii=True) + "\n")
        self.file.flush()
        self.count += 1
        self.errors += rec.error is not None

    def finish(self, summary: dict) -> None:
        self.file.flush()
        os.fsync(self.file.fileno())
        self.close()
        atomic_write(self.done_path, json.dumps(summary) + "\n")

    def close(self) -> None:
        if not self.file.closed:
            self.file.close()


def finished(folder: Path, label: str) -> bool:
    done = folder / f"{method_file(label)}.done"
    return done.is_file() and not done.is_symlink()


# ----------------------------------------------------------------------------- planning

@dataclass
class LoadPlan:
    """Everything decided before a model loads."""

    cfg: RunConfig
    opts: LoadOptions
    instances: list[MethodInstance]           # baselines first
    points: list[LoadPoint]
    per_point: dict[str, list[MethodInstance]]
    questions: list
    own_loop: bool


def ordered(instances: list[MethodInstance]) -> list[MethodInstance]:
    """Baselines first (`ar`, then each engine's `ENGINE:ar`), then the others in the order given."""
    return [i for i in instances if is_baseline(i.name)] + [i for i in instances if not is_baseline(i.name)]


def _bc_cfg(cfg: RunConfig, bc: Any) -> RunConfig:
    return cfg if bc is None else cfg.with_(block_complexity=bc)


def plan_load(cfg: RunConfig, opts: LoadOptions, listed: list[str]) -> LoadPlan:
    """The run's checks (run/plan.py `check_config`) at each block complexity of the sweep, the
    questions, the points and the methods of each point. UsageError for anything wrong; nothing
    loads. `ar` runs only when asked for or when a method runs in specbench's own loop."""
    from specbench_cli.run.plan import check_config, load_questions, plan_instance, plan_methods

    opts.check()
    if cfg.decoding.temperature != 0:
        raise UsageError("a load run decodes greedily (--temperature 0): speculation's outputs are checked "
                         "against the baseline's")
    if not opts.concurrency and not opts.request_rate:
        opts.concurrency = list(DEFAULT_CONCURRENCY)
    bcs = list(opts.bcs)
    if len(bcs) == 1:          # one budget: the run's, points unsuffixed
        cfg.budget.block_complexity = bcs[0]
    first = cfg if len(bcs) <= 1 else _bc_cfg(cfg, next((b for b in bcs if b != ADAPTIVE), bcs[0]))
    planned = check_config(first)
    instances = list(planned)
    own = [i for i in instances if i.engine is None and i.name != AR]
    if not own and AR not in listed:
        instances = [i for i in instances if i.name != AR]
    instances = ordered(instances)
    names = {}
    for inst in instances:
        f = method_file(inst.label)
        if f in names:
            raise UsageError(f"methods '{names[f]}' and '{inst.label}' would share the file {f}.jsonl; rename one")
        names[f] = inst.label
    if own:  # what the own loop cannot serve is one line before anything loads
        from specbench_cli.load.own_loop import refusal

        for inst in own:
            if line := refusal(first, inst):
                raise UsageError(line)
    questions = load_questions(cfg)
    requests = opts.num_prompts or len(questions)
    points = points_of(opts, requests, cfg.decoding.seed)
    per_point: dict[str, list[MethodInstance]] = {}
    adaptive_able: dict[str, bool] = {}
    for bc in (bcs if len(bcs) > 1 else [None]):
        at = _bc_cfg(cfg, bc)
        if bc == ADAPTIVE or (bc is None and at.budget.block_complexity == ADAPTIVE):
            chosen = []
            for inst in instances:
                if is_baseline(inst.name):
                    chosen.append(inst)
                    continue
                if inst.engine is None and inst.budget is None:
                    try:
                        m = plan_instance(at, inst, max(at.budget.auto_candidates or [16]))
                    except UsageError:
                        continue
                    if getattr(m, "adaptive_budget", False):
                        chosen.append(inst)
                elif inst.budget is not None:
                    chosen.append(inst)            # its own budget wins over the sweep's
            for inst in chosen:
                adaptive_able[inst.label] = True
            if not any(not is_baseline(i.name) for i in chosen):
                raise UsageError("--bc adaptive: none of the methods takes an adaptive budget (specbench's own "
                                 "methods that do: `specbench list methods`)")
        else:
            chosen = list(plan_methods(at, instances)) if bc is not None else instances
            chosen = [i for i in instances if i in chosen]
        for p in points:
            if p.block_complexity == bc:
                per_point[p.name] = chosen
    return LoadPlan(cfg, opts, instances, points, per_point, questions, bool(own))


# ----------------------------------------------------------------------------- the folder

def folder_settings(cfg: RunConfig, opts: LoadOptions, instances: list[MethodInstance]) -> dict:
    """What must match for a folder to be continued: the config (less the free keys), the load
    options, the methods."""
    config = {k: v for k, v in manifest_config(cfg).items() if k not in FREE_KEYS}
    return {"config": config, "load": opts.to_json(), "methods": [i.label for i in instances]}


def check_folder(out: Path, settings: dict) -> Optional[dict]:
    """None for a folder to create; the manifest of the same load run to continue; else UsageError
    (a file, another kind of folder, another load run's settings)."""
    check_output_folder(out, "--output-dir")
    if out.is_symlink():
        raise UsageError(f"--output-dir {out} is a symbolic link; give the folder itself")
    manifest = out / MANIFEST
    if not out.exists() or (out.is_dir() and not any(out.iterdir())):
        return None
    if not manifest.is_file() or manifest.is_symlink():
        raise UsageError(f"--output-dir {out} exists and is not a load run folder (no {MANIFEST}); give a new "
                         f"or empty folder")
    from specbench_cli.jsonl import read_json_object

    doc = read_json_object(manifest, f"{manifest} is missing")
    if doc.get("kind") != KIND:
        raise UsageError(f"{out} holds a run of another kind ({str(doc.get('kind', 'run'))[:20]}), not a load run")
    stored = doc.get("settings")
    if stored != settings:
        differs = _first_difference(stored, settings)
        raise UsageError(f"{out} holds a load run with other settings ({differs}); continue it with "
                         f"`specbench load --resume {out}`, or give another --output-dir")
    return doc


def _first_difference(a: Any, b: Any, path: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            if a.get(k) != b.get(k):
                return _first_difference(a.get(k), b.get(k), f"{path}.{k}" if path else str(k))
    return f"{path or 'settings'}: {json.dumps(a)[:60]} there, {json.dumps(b)[:60]} now"


def settings_from_folder(out: Path) -> tuple[RunConfig, LoadOptions, list[str]]:
    """The config, load options and listed methods of the load run in `out` (`--resume`)."""
    from specbench_cli.config.manifest import config_from_manifest
    from specbench_cli.jsonl import read_json_object

    path = Path(out) / MANIFEST
    if Path(out).is_symlink() or path.is_symlink():
        raise UsageError(f"{out}: a symbolic link; specbench never continues a folder through a link")
    doc = read_json_object(path, f"{out} is not a load run folder (no {MANIFEST})")
    if doc.get("kind") != KIND or not isinstance(doc.get("settings"), dict):
        raise UsageError(f"{path}: not a load run's manifest")
    settings = doc["settings"]
    cfg = config_from_manifest({"config": settings.get("config", {})}, str(path))
    opts = LoadOptions.from_json(settings.get("load"), str(path))
    methods = settings.get("methods")
    if not isinstance(methods, list) or not all(isinstance(m, str) for m in methods):
        raise UsageError(f"{path}: 'settings.methods' must be a list of method labels")
    return cfg, opts, methods


# ----------------------------------------------------------------------------- the run

def _prompts(plan: LoadPlan, tokenizer: Any, context: Optional[int]) -> list[Prompt]:
    from specbench_cli.models.prompting import ChatPrompter, user_turn
    from specbench_cli.run.limits import ContextFull, Room

    cfg = plan.cfg
    budgets = [b for b in plan.opts.bcs if isinstance(b, int)] or [
        cfg.budget.block_complexity if isinstance(cfg.budget.block_complexity, int) else 16]
    if ADAPTIVE in plan.opts.bcs or cfg.budget.block_complexity == ADAPTIVE:
        budgets.append(max(cfg.budget.auto_candidates or [24]))
    budgets += [i.budget for i in plan.instances if isinstance(i.budget, int)]
    room = Room(context, budgets)
    prompter = ChatPrompter(tokenizer, cfg.model.prompt_template)
    out = []
    for q in plan.questions:
        ids = prompter(user_turn(q.turns[0]))
        try:
            cap = room.new_tokens(len(ids), cfg.decoding.max_new_tokens)
        except ContextFull as e:
            raise UsageError(f"question {q.task}/{q.id}: {e}; drop it (--question-ids)") from None
        out.append(Prompt(str(q.id), str(q.category), tuple(int(t) for t in ids), cap))
    return out


def _eta(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


class LoadProgress:
    """A line per (point, method) as it starts and ends, and one every few seconds meanwhile:
    requests done / total, errors, elapsed, ETA."""

    def __init__(self, pairs: int) -> None:
        self.pairs, self.pair = pairs, 0

    def begin(self, point: LoadPoint, label: str, total: int) -> None:
        self.pair += 1
        self.point, self.label, self.total = point, label, total
        self.started = self.last = time.monotonic()
        err.print(f"[{self.pair}/{self.pairs}] {point.name} {escape(label)}: {total} requests", highlight=False)

    def tick(self, done: int, errors: int) -> None:
        now = time.monotonic()
        if now - self.last < PROGRESS_EVERY_S and done < self.total:
            return
        self.last = now
        spent = now - self.started
        left = spent / done * (self.total - done) if done else math.inf
        left = min(left, max(0.0, self.point.time_limit_s - spent))
        note = f", {errors} errors" if errors else ""
        err.print(f"  {self.point.name} {escape(self.label)} {done}/{self.total} requests{note}, "
                  f"{_eta(spent)} elapsed" + (f", eta {_eta(left)}" if done < self.total else ""), highlight=False)


def execute(plan: LoadPlan, out: Path, manifest_doc: Optional[dict], trust_remote_code: bool = False) -> Path:
    """Run `plan` into folder `out` (created, or continued when `manifest_doc` is its manifest)."""
    from specbench_cli.store.lock import FolderLock

    safe_folder(out)
    with FolderLock(out, LOCK, "specbench load", lambda m: err.print(f"[yellow]note:[/] {escape(m)}")):
        return _execute(plan, out, manifest_doc, trust_remote_code)


def _load(plan: LoadPlan, trust_remote_code: bool):
    """(the loaded target or None, the tokenizer, the model's context, its vocabulary size)."""
    from specbench_cli.models.load import declared_context, declared_vocab, load_model, load_tokenizer
    from specbench_cli.models.prompting import default_threads, set_threads

    cfg = plan.cfg
    if plan.own_loop:
        from specbench_cli.models.header import model_context_length

        threads = set_threads(cfg.model.threads, default_threads())
        err.print(f"[dim]loading {cfg.model.name} ({cfg.model.dtype}, {cfg.model.device}, {threads} threads)[/dim]")
        lm = load_model(cfg.model.name, device=cfg.model.device, dtype=cfg.model.dtype, forward=cfg.model.forward,
                        target=cfg.model.target, trust_remote_code=trust_remote_code, kernels=cfg.model.kernels,
                        note=lambda text: err.print(f"[dim]{text}[/dim]"))
        context = model_context_length(lm.target)
        tokenizer = lm.tokenizer
        vocab = getattr(lm.target, "vocab_size", None)
    else:
        lm = None
        tokenizer = _gguf_tokenizer(cfg.model.name) or load_tokenizer(cfg.model.name,
                                                                      trust_remote_code=trust_remote_code)
        context = declared_context(cfg.model.name)
        vocab = None
    declared = declared_vocab(cfg.model.name)
    vocab = max(v for v in (vocab, declared, len(tokenizer)) if v)
    return lm, tokenizer, context, vocab


def _hand_over_ar_answers(backend: Any, folder: Path, trace: Sequence[TraceRequest]) -> None:
    """Give a backend that drafts from AR's answers (the own loop, for `synthetic`) the answers the
    point's `ar` gave to the same requests, so it need not decode them again."""
    path = folder / f"{method_file(AR)}.jsonl"
    if not path.is_file() or path.is_symlink():
        return
    prompts = {t.index: t.prompt_ids for t in trace if t.index >= 0}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        ids = rec.get("output_ids") if isinstance(rec, dict) else None
        index = rec.get("index") if isinstance(rec, dict) else None
        if rec.get("error") is None and isinstance(ids, list) and index in prompts \
                and all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
            backend.reference(prompts[index], ids)


def _gguf_tokenizer(ref: str) -> Any:
    """A GGUF model's tokenizer read from the file itself, as the GGUF's conversion reads it
    (models/load.py), without de-quantising its weights: an engine-only run needs no weights here.
    None for a model that is no GGUF."""
    from specbench_cli.models.load import resolve

    kind, location = resolve(ref)
    if kind != "gguf":
        return None
    from transformers import AutoTokenizer

    from specbench_cli.gguf_header import check_gguf

    check_gguf(Path(location))
    p = Path(location)
    return AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name, trust_remote_code=False)


def _execute(plan: LoadPlan, out: Path, manifest_doc: Optional[dict], trust_remote_code: bool) -> Path:
    from specbench_cli.load.backends import make_backend
    from specbench_cli.load.schedule import error_record
    from specbench_cli.run.plan import plan_instance
    from specbench_cli.store.runfolder import environment, now_iso

    cfg, opts = plan.cfg, plan.opts
    lm, tokenizer, context, vocab = _load(plan, trust_remote_code)
    prompts = _prompts(plan, tokenizer, context)
    slots = opts.slots
    longest = max(len(p.prompt_ids) + p.max_new_tokens for p in prompts)
    budgets = [b for b in opts.bcs if isinstance(b, int)] + [16]
    slot_ctx = -(-(longest + max(budgets) + 16) // 256) * 256
    settings = folder_settings(cfg, opts, plan.instances)
    if manifest_doc is None:
        threads = cfg.model.threads
        if threads is None:
            from specbench_cli.models.prompting import default_threads

            threads = default_threads()
        manifest_doc = {
            "kind": KIND, "created": now_iso(), "finished": None,
            "config": {**manifest_config(cfg), "threads": threads, "methods": [i.label for i in plan.instances]},
            "load": {**opts.to_json(), "slots": slots, "slot_ctx": slot_ctx, "seed": cfg.decoding.seed},
            "points": [point_dict(p) for p in plan.points],
            "point_methods": {p.name: [i.label for i in plan.per_point[p.name]] for p in plan.points},
            "methods": [i.label for i in plan.instances],
            "baselines": {i.label: "" if is_baseline(i.name) else baseline_of(i.name) for i in plan.instances},
            "slo": opts.slo,
            "model": {"ref": cfg.model.name, "name": lm.name if lm is not None else Path(cfg.model.name).stem,
                      "vocab_size": vocab},
            "machine": environment(),
            "settings": settings,
        }
        atomic_write(out / MANIFEST, json.dumps(manifest_doc, indent=2) + "\n")
    pairs = [(p, i) for p in plan.points for i in plan.per_point[p.name]]
    todo = [(p, i) for p, i in pairs if not finished(out / "load" / p.name, i.label)]
    if len(todo) < len(pairs):
        err.print(f"continuing {escape(str(out))}: {len(pairs) - len(todo)} of {len(pairs)} (point, method) pairs are "
                  f"finished", highlight=False, soft_wrap=True)
    err.print(f"load run folder: [bold]{escape(str(out))}[/bold] ({len(plan.points)} points x "
              f"{len(plan.instances)} methods, {len(prompts)} questions, max {cfg.decoding.max_new_tokens} new "
              f"tokens, {slots} slots)", highlight=False, soft_wrap=True)
    progress = LoadProgress(len(todo))
    errors = failed_starts = 0
    traces: dict[str, list] = {}
    for point, inst in todo:
        folder = safe_folder(out / "load" / point.name)
        if point.name not in traces:
            traces.clear()   # one point's trace in memory at a time
            path = trace_path(out, point)
            if path.exists():
                traces[point.name] = read_trace(path, vocab, point)
            else:
                traces[point.name] = build_trace(point, prompts, cfg.decoding.seed)
                write_trace(path, traces[point.name])
        trace = traces[point.name]
        bc = point.block_complexity
        at = cfg.with_(block_complexity=bc) if bc is not None else cfg
        at = at.with_(output_dir=str(out))
        planned = None
        if inst.engine is not None:
            budget = inst.budget_in(at.budget.block_complexity)
            planned = plan_instance(at, inst, budget if isinstance(budget, int) else 16)
        measured = sum(1 for t in trace if t.index >= 0)
        progress.begin(point, inst.label, measured)
        records = RecordFile(folder, inst.label)
        baseline = "" if is_baseline(inst.name) else baseline_of(inst.name)

        def record(rec: RequestRecord, point=point, inst=inst, baseline=baseline, records=records) -> None:
            if rec.index < 0:
                return
            rec.point, rec.method, rec.baseline = point.name, inst.label, baseline
            rec.speculative = not is_baseline(inst.name)
            records.write(rec)
            progress.tick(records.count, records.errors)

        backend = make_backend(at.with_(batch_size=min(slots, 256)) if inst.engine is None else at, inst, planned,
                               lm, out, slots, slot_ctx, vocab, opts.max_concurrency)
        if hasattr(backend, "reference") and AR in {i.name for i in plan.per_point[point.name]}:
            _hand_over_ar_answers(backend, folder, trace)
        started_at = now_iso()
        try:
            try:
                backend.start()
            except (RuntimeFailure, UsageError) as e:   # a server that would not start: every request says so
                failed_starts += 1
                for req in trace:
                    if req.index >= 0:
                        record(error_record(req, f"{inst.label}: {e}", None, getattr(backend, "tail", lambda: None)()))
                records.close()
                errors += records.errors
                err.print(f"[red]error:[/red] {escape(inst.label)} at {point.name}: {escape(str(e).splitlines()[0])}",
                          highlight=False, soft_wrap=True)
                continue
            backend.serve(point, trace, record)
        except KeyboardInterrupt:
            records.close()
            err.print(f"[yellow]interrupted[/yellow]: finished points are kept in {escape(str(out))}; continue with: "
                      f"specbench load --resume {escape(str(out))}", highlight=False, soft_wrap=True)
            raise
        finally:
            backend.stop()
        records.finish({"requests": records.count, "errors": records.errors, "started": started_at,
                        "finished": now_iso()})
        errors += records.errors
    doc = json.loads((out / MANIFEST).read_text())
    doc["finished"] = now_iso()
    atomic_write(out / MANIFEST, json.dumps(doc, indent=2) + "\n")
    err.print(f"records: {escape(str(out / 'load'))} (report: specbench report {escape(str(out))})", highlight=False,
              soft_wrap=True)
    if failed_starts:
        raise RuntimeFailure(f"{failed_starts} (point, method) pair(s) could not start; their requests are error rows "
                             f"and run again when the folder is run again")
    if errors:
        raise RuntimeFailure(f"{errors} request(s) failed; see the records with an 'error' in {out / 'load'}")
    return out
