"""`specbench report RUN --html`: one self-contained page (inline CSS, script and SVG; it loads
nothing) with the report's tables, its figures, the run's conditions and an answer viewer.

The viewer shows, for a chosen question, every chosen method's answer token by token, each token
coloured by the verification step that produced it: the prefill's token, draft tokens the target
accepted, and the target's own token that ends every step (the bonus token); step parity
alternates the shade so steps stay apart. Tokens that differ from AR's answer at the same
position are marked. Hovering a token names its step, the tokens that step accepted and the
draft's size. Each token's text comes from the row (`output_pieces`, written by `specbench run`);
rows of older runs get it from the tokenizer their manifest names, and without that tokenizer the
page has no viewer and says why.
"""

from __future__ import annotations

import html
import json
import re
from typing import Any, Callable, Optional, Sequence

from specbench_cli.report import metrics
from specbench_cli.report.html_assets import CSS, JS
from specbench_cli.report.table import TableData
from specbench_cli.store.runfolder import Run
from specbench_cli.tasks.categories import canonical_category, display_category, order_categories

# --------------------------------------------------------------------------- the viewer's data


def step_of_tokens(n_tokens: int, accept_lengths: Sequence[int]) -> tuple[list[int], str]:
    """Per output token: the step that produced it (0 = prefill) and its kind: `p` the prefill's
    token, `d` a draft token the target accepted, `b` the target's token that ends a step,
    `e` a token after the decoding loop (a lossy method's epilogue)."""
    steps, kinds = [0], ["p"]
    for step, added in enumerate(accept_lengths, start=1):
        for j in range(int(added)):
            steps.append(step)
            kinds.append("d" if j < added - 1 else "b")
    steps, kinds = steps[:n_tokens], kinds[:n_tokens]
    while len(steps) < n_tokens:
        steps.append(-1)
        kinds.append("e")
    return steps, "".join(kinds)


def differing(ids: Sequence[int], ar_ids: Optional[Sequence[int]]) -> Optional[list[int]]:
    """Positions where `ids` differ from AR's tokens (None: no AR answer to compare with)."""
    if ar_ids is None:
        return None
    return [i for i, tok in enumerate(ids) if i >= len(ar_ids) or ar_ids[i] != tok]


Pieces = Callable[[dict], Optional[list[str]]]


def piece_source(runs: Sequence[Run], load_tokenizer: Callable[[str], Any]) -> tuple[dict[str, Pieces], list[str]]:
    """Per run id, how to get a row's token texts, and notes for runs whose answers cannot be shown.

    A run whose ok rows all carry `output_pieces` needs nothing else; an older run loads the
    tokenizer its manifest names (`load_tokenizer(ref)`), once."""
    from specbench_cli.models.pieces import token_pieces

    sources: dict[str, Pieces] = {}
    notes = []
    for run in runs:
        ok = [r for r in run.rows if r["status"] == "ok"]
        if all(_stored(r) is not None for r in ok):
            sources[run.run_id] = _stored
            continue
        ref = (run.manifest.get("model") or {}).get("ref") or (run.manifest.get("config") or {}).get("model")
        try:
            if not ref:
                raise ValueError("the manifest names no model")
            tokenizer = load_tokenizer(str(ref))
        except Exception as exc:  # noqa: BLE001 - any failure means: no viewer for this run, said in a note
            notes.append(f"answers of {run.run_id} are not shown: its rows predate per-token text and the tokenizer "
                         f"of its model ({ref or 'unknown'}) could not be loaded ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})")
            continue

        def from_tokenizer(row: dict, tokenizer=tokenizer) -> list[str]:
            return _stored(row) or token_pieces(tokenizer, row["output_ids"])

        sources[run.run_id] = from_tokenizer
    return sources, notes


def _stored(row: dict) -> Optional[list[str]]:
    pieces = row.get("output_pieces")
    return pieces if isinstance(pieces, list) and len(pieces) == len(row.get("output_ids") or []) else None


def viewer_data(runs: Sequence[Run], sources: dict[str, Pieces]) -> Optional[dict]:
    """Questions, methods and every answer (first repeat) of the runs whose token texts are known,
    as the page's script reads them; None when no answer can be shown."""
    shown = [run for run in runs if run.run_id in sources]
    if not shown:
        return None
    several = len(shown) > 1
    ar_runs = [run for run in shown if any(r["method"] == metrics.AR_METHOD for r in run.rows)]
    # a sweep's answers per temperature, each compared with AR's at that temperature
    swept = len({metrics.temperature_of(r) for run in shown for r in run.rows}) > 1
    questions: dict[str, dict] = {}
    methods: dict[str, dict] = {}
    answers: dict[str, dict[str, list]] = {}
    for run in shown:
        rows = _first_repeat(run.rows)
        if not rows:
            continue
        ar_run = run if run in ar_runs else next((a for a in ar_runs if a.model_name == run.model_name), None)
        ar_ids = {} if ar_run is None else {
            _answer_key(r): r["output_ids"] for r in _first_repeat(ar_run.rows)
            if r["method"] == metrics.AR_METHOD and r["status"] == "ok"}
        for row in sorted(rows, key=lambda r: (r["method"] != metrics.AR_METHOD, r["turn"])):
            qkey = f"{row.get('task', '')}|{row['question_id']}"
            if qkey not in questions:
                category = canonical_category(row.get("task", ""), row["category"])
                label = f"{display_category(category)} · {row['question_id']}"
                if row.get("difficulty"):
                    label += f" · {row['difficulty']}"
                questions[qkey] = {"key": qkey, "label": label, "category": category}
            method_label = row["method_label"] + (f" (T={metrics.temperature_of(row):g})" if swept else "")
            mkey = f"{run.run_id}|{method_label}"
            if mkey not in methods:
                is_ar = row["method"] == metrics.AR_METHOD
                methods[mkey] = {"key": mkey, "label": f"{run.run_id}: {method_label}" if several
                                 else method_label, "ar": is_ar}
            answers.setdefault(qkey, {}).setdefault(mkey, []).append(
                _turn(row, sources[run.run_id], ar_ids.get(_answer_key(row))))
    if not answers:
        return None
    order = {c: i for i, c in enumerate(order_categories({q["category"] for q in questions.values()}))}
    qlist = sorted(questions.values(), key=lambda q: order[q["category"]])  # stable: run order within a category
    mlist = sorted(methods.values(), key=lambda m: not m["ar"])
    return {"questions": qlist, "methods": mlist, "answers": answers}


def _answer_key(row: dict) -> tuple:
    """The turn an answer is compared with AR's on: (task, question, turn, temperature)."""
    return (row.get("task"), str(row["question_id"]), row["turn"], metrics.temperature_of(row))


def _first_repeat(rows: Sequence[dict]) -> list[dict]:
    if not rows:
        return []
    first = min(int(r.get("repeat", 0)) for r in rows)
    return [r for r in rows if int(r.get("repeat", 0)) == first]


def _turn(row: dict, pieces: Pieces, ar_ids: Optional[list[int]]) -> dict:
    """One turn as the script reads it: t texts, k kinds, s steps, a accepted lengths, d draft sizes,
    x positions that differ from AR, same (equal to AR; None without AR)."""
    if row["status"] != "ok":
        return {"error": row.get("error") or "failed", "t": [], "k": "", "s": [], "a": [], "d": [], "x": [],
                "same": None}
    ids = row["output_ids"]
    steps, kinds = step_of_tokens(len(ids), row["accept_lengths"])
    is_ar = row["method"] == metrics.AR_METHOD
    diff = None if is_ar else differing(ids, ar_ids)
    return {"t": pieces(row), "k": kinds, "s": steps, "a": list(row["accept_lengths"]),
            "d": list(row.get("draft_sizes") or [0] * len(row["accept_lengths"])), "x": diff or [],
            "same": None if diff is None else not diff}


# --------------------------------------------------------------------------- the page


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def table_html(table: TableData, caption: bool = True) -> str:
    """A TableData as an HTML table (display cells as in the Markdown report) and its notes."""
    head = "".join(f'<th class="{"num" if c.numeric else ""}">{_e(c.header)}</th>' for c in table.columns)
    body = []
    for (_, row), cells in zip(table.frame.iterrows(), table.cells()):
        cls = ' class="ar"' if metrics.is_ar_label(row.get("method_label")) else ""
        tds = "".join(f'<td class="{"num" if c.numeric else ""}">{_e(v)}</td>' for c, v in zip(table.columns, cells))
        body.append(f"<tr{cls}>{tds}</tr>")
    notes = "".join(f"<li>{_e(n)}</li>" for n in table.notes)
    title = f"<caption>{_e(table.title)}</caption>" if caption else ""
    return (f'<table class="data">{title}<thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table>' + (f'<ul class="notes">{notes}</ul>' if notes else ""))


SHARE_COLOURS = ("#4e79a7", "#e15759", "#f28e2b", "#76b7b2", "#59a14f", "#bab0ac", "#b07aa1", "#9c755f")


def share_bars(table: TableData) -> str:
    """One horizontal stacked bar per row of a table whose columns carry shares (the time table:
    each part's share of the decode time), in inline HTML and CSS; "" when no row has them."""
    parts = [c for c in table.columns if c.share_key]
    if not parts:
        return ""
    label_cols = [c for c in table.columns if not c.numeric] or table.columns[:1]
    colour = {c.key: SHARE_COLOURS[i % len(SHARE_COLOURS)] for i, c in enumerate(parts)}
    bars = []
    for _, row in table.frame.iterrows():
        shares = [(c, row.get(c.share_key)) for c in parts]
        if not all(isinstance(v, (int, float)) and v == v for _, v in shares):
            continue
        label = " · ".join(str(row.get(c.key)) for c in label_cols)
        segs = "".join(
            f'<span class="seg" style="width:{max(100 * float(v), 0):.2f}%;background:{colour[c.key]}" '
            f'title="{_e(c.header)}: {100 * float(v):.1f}%"></span>' for c, v in shares)
        bars.append(f'<div class="sharerow"><span class="sharelabel">{_e(label)}</span>'
                    f'<span class="sharebar">{segs}</span></div>')
    if not bars:
        return ""
    legend = "".join(f'<span class="key"><span class="swatch" style="background:{colour[c.key]}"></span>'
                     f'{_e(c.header)}</span>' for c in parts)
    style = ("<style>.shares{margin:.5em 0 1.5em}.sharerow{display:flex;align-items:center;gap:.6em;margin:.2em 0}"
             ".sharelabel{width:14em;text-align:right;font-size:.85em;overflow:hidden;text-overflow:ellipsis;"
             "white-space:nowrap}.sharebar{display:flex;flex:1;max-width:40em;height:1.1em;background:#eee}"
             ".sharebar .seg{display:block;height:100%}.sharelegend{font-size:.8em;margin-top:.3em}"
             ".sharelegend .key{margin-right:1em}.swatch{display:inline-block;width:.8em;height:.8em;"
             "margin-right:.3em;vertical-align:middle}</style>")
    return (f'{style}<div class="shares" role="img" aria-label="share of decode time per part">{"".join(bars)}'
            f'<div class="sharelegend">{legend}</div></div>')


def conditions(run: Run) -> list[tuple[str, str]]:
    """What a reader needs to judge a run's numbers: model, settings, machine, load, versions."""
    m, config = run.manifest, run.manifest.get("config") or {}
    model, host, versions = m.get("model") or {}, m.get("host") or {}, m.get("versions") or {}
    pairs = [
        ("model", f"{model.get('name') or model.get('ref') or '?'} ({model.get('params') or '?'} parameters)"),
        ("suite", f"{', '.join(map(str, config.get('tasks') or []))}"
                  + (f", categories {', '.join(config['categories'])}" if config.get("categories") else "")
                  + (f", at most {config['limit']} per category" if config.get("limit") else "")),
        ("methods", ", ".join(map(str, config.get("methods") or []))),
        ("decoding", f"block complexity {config.get('block_complexity')}, at most {config.get('max_new_tokens')} new "
                     f"tokens, temperature {config.get('temperature')}, top-p {config.get('top_p')}, "
                     f"{config.get('repeats') or 1} repeat(s)"),
        ("compute", f"{config.get('dtype')} on {config.get('device')}, {config.get('threads')} thread(s), forward "
                    f"{model.get('forward') or config.get('forward') or 'sdpa'}"),
        ("machine", f"{host.get('cpu_model') or host.get('processor') or '?'}, {host.get('cpu_count') or '?'} cores"
                    + (f", GPU {host['gpu'].get('name')}" if isinstance(host.get("gpu"), dict) else "")),
    ]
    for i, rec in enumerate(m.get("timing_conditions") or []):
        if isinstance(rec, dict):
            pairs.append((f"load (session {i + 1})", f"1-minute load average {_first(rec.get('load_start'))} at the "
                          f"start, up to {rec.get('load_max_1min')}, {_first(rec.get('load_end'))} at the end"))
    pairs += [("versions", ", ".join(f"{k} {v}" for k, v in versions.items())),
              ("commit", str(m.get("git_commit") or "unknown")),
              ("time", f"{m.get('created') or '?'} to {m.get('finished') or 'unfinished'}")]
    return pairs


def _first(values: object) -> str:
    return str(values[0]) if isinstance(values, list) and values else "?"


def page(runs: Sequence[Run], tables: Sequence[TableData], figures: Sequence[tuple[str, str]],
         viewer: Optional[dict], viewer_notes: Sequence[str], busy: Sequence[str]) -> str:
    """The whole HTML document."""
    title = ", ".join(run.run_id for run in runs)
    models = ", ".join(dict.fromkeys(run.model_name for run in runs))
    parts = [f"<header><h1>specbench report</h1><p class=\"sub\">{_e(title)} · {_e(models)}</p></header>"]
    parts += [f'<div class="busy" role="alert">Timed on a busy machine: {_e(b)}</div>' for b in busy]
    parts.append("<h2>Speedup over AR</h2>" + table_html(tables[0]))
    parts.append('<h2 id="viewer-title">Answers, token by token</h2>')
    if viewer is not None:
        parts.append(_viewer_html(viewer))
    parts += [f'<p class="sub">{_e(n)}</p>' for n in viewer_notes]
    if viewer is None and not viewer_notes:
        parts.append('<p class="sub">No answers to show.</p>')
    for table in tables[1:]:
        parts.append(f"<h2>{_e(table.title)}</h2>" + table_html(table, caption=False) + share_bars(table))
    if figures:
        shown = "".join(f"<figure>{svg}<figcaption>{_e(name)}</figcaption></figure>" for name, svg in figures)
        parts.append(f'<h2>Figures</h2><div class="figures">{shown}</div>')
    parts.append("<h2>Conditions</h2>")
    for run in runs:
        rows = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in conditions(run))
        parts.append(f"<h3>{_e(run.run_id)}</h3><dl class=\"conditions\">{rows}</dl>")
    script = f"<script>{JS}</script>" if viewer is not None else ""
    return without_surrogates("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>specbench report: {_e(title)}</title><style>{CSS}</style></head><body>"
            + "\n".join(parts) + script + "</body></html>\n")


# Inside <script> the HTML parser looks for "</script" and, after "<!--", for "<script" (which
# enters its double-escaped state, where "</script>" no longer ends the block: one answer holding
# "<!--<script>" swallowed the rest of the page). JSON may spell any character as \uXXXX, so the
# embedded data holds no "<", ">" or "&" at all; U+2028/2029 are escaped too (old JavaScript
# parsers end a line there).
SCRIPT_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_SCRIPT_UNSAFE = re.compile("[<>&\u2028\u2029]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def without_surrogates(text: str) -> str:
    """`text` with every lone surrogate (a row may hold "\\ud800", which no UTF-8 file can) made
    U+FFFD, the replacement character: the page is then always writable."""
    return _LONE_SURROGATE.sub("\ufffd", text)


def script_json(data: Any) -> str:
    """`data` as JSON that is inert inside a <script> element, whatever its strings hold."""
    text = without_surrogates(json.dumps(data, ensure_ascii=False, separators=(",", ":")))
    return _SCRIPT_UNSAFE.sub(lambda m: SCRIPT_ESCAPES[m.group()], text)


def _viewer_html(viewer: dict) -> str:
    blob = script_json(viewer)
    legend = ('<span class="tok d">&nbsp;</span><span class="tok d odd">&nbsp;</span> draft tokens the target accepted '
              '&nbsp; <span class="tok b">&nbsp;</span><span class="tok b odd">&nbsp;</span> the target\'s own token '
              'ending each step (shades alternate by step) &nbsp; <span class="tok p">&nbsp;</span> prefill &nbsp; '
              '<span class="tok x">abc</span> differs from AR')
    return ('<section id="viewer"><div class="controls"><label>Question <select id="question"></select></label>'
            '<span id="methods"></span></div>'
            f'<div class="legend">{legend}</div><div id="hover-info"></div><div id="answers"></div></section>'
            f'<script type="application/json" id="viewer-data">{blob}</script>')
