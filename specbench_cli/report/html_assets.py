"""The style sheet and the script of `report --html` (inlined into the page: it loads nothing)."""

CSS = """
:root { --ink: #1d232b; --muted: #5d6673; --line: #d9dee5; --bg: #fbfcfd;
        --draft: #b7e4b7; --draft2: #8ccf8c; --target: #d9e3f5; --target2: #bccbec;
        --prefill: #e4e4e4; --epilogue: #f5e0a8; --diff: #c62828; }
* { box-sizing: border-box; }
body { margin: 0; padding: 24px 32px 48px; color: var(--ink); background: var(--bg);
       font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 32px 0 10px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
.sub { color: var(--muted); margin: 0; }
.busy { margin: 16px 0; padding: 10px 14px; border: 1px solid #e0a800; background: #fff6d6; border-radius: 6px; }
table.data { border-collapse: collapse; margin: 6px 0; font-variant-numeric: tabular-nums; }
table.data caption { text-align: left; font-weight: 600; padding: 4px 0 8px; }
table.data th, table.data td { padding: 4px 10px; border-bottom: 1px solid var(--line); }
table.data th { background: #eef2f6; text-align: left; font-weight: 600; }
table.data td.num, table.data th.num { text-align: right; }
table.data tr.ar td { color: var(--muted); }
ul.notes { color: var(--muted); margin: 6px 0 0; padding-left: 20px; }
.figures { display: flex; flex-wrap: wrap; gap: 18px; }
.figures figure { margin: 0; background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: 8px; }
.figures figure svg { max-width: 640px; height: auto; display: block; }
.figures figcaption { color: var(--muted); font-size: 12px; margin-top: 4px; }
.controls { display: flex; flex-wrap: wrap; gap: 10px 24px; align-items: center; margin: 6px 0 10px; }
.controls select { font: inherit; padding: 3px 6px; max-width: 420px; }
#methods label { margin-right: 12px; white-space: nowrap; }
.legend span.tok { padding: 1px 6px; margin-right: 4px; }
.legend { color: var(--muted); font-size: 12.5px; }
#answers { display: grid; grid-template-columns: repeat(auto-fit, minmax(300px, 1fr)); gap: 14px; }
.answer { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: 10px 12px; min-width: 0; }
.answer h3 { font-size: 14px; margin: 0 0 2px; }
.answer .stats { color: var(--muted); font-size: 12px; margin-bottom: 6px; }
.answer .turn-label { color: var(--muted); font-size: 12px; margin: 8px 0 2px; }
.tokens { white-space: pre-wrap; word-break: break-word; font: 13px/1.7 ui-monospace, "DejaVu Sans Mono", Menlo, monospace; }
.error { color: var(--diff); }
span.tok { border-radius: 2px; }
span.tok.d { background: var(--draft); }
span.tok.d.odd { background: var(--draft2); }
span.tok.b { background: var(--target); }
span.tok.b.odd { background: var(--target2); }
span.tok.p { background: var(--prefill); }
span.tok.e { background: var(--epilogue); }
span.tok.x { color: var(--diff); text-decoration: underline wavy var(--diff); text-decoration-skip-ink: none; }
span.tok:hover { outline: 1px solid var(--ink); }
#hover-info { min-height: 1.45em; color: var(--ink); font-size: 12.5px; margin: 4px 0 10px; }
.badge { display: inline-block; font-size: 11px; padding: 0 6px; border-radius: 9px; margin-left: 6px;
         vertical-align: 1px; border: 1px solid var(--line); color: var(--muted); }
.badge.bad { border-color: var(--diff); color: var(--diff); }
dl.conditions { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; margin: 4px 0 12px; }
dl.conditions dt { color: var(--muted); }
dl.conditions dd { margin: 0; }
"""

JS = r"""
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("viewer-data").textContent);
  var select = document.getElementById("question");
  var methodBox = document.getElementById("methods");
  var answers = document.getElementById("answers");
  var info = document.getElementById("hover-info");

  data.questions.forEach(function (q, i) {
    var option = document.createElement("option");
    option.value = String(i);
    option.textContent = q.label;
    select.appendChild(option);
  });
  data.methods.forEach(function (m, i) {
    var label = document.createElement("label");
    var box = document.createElement("input");
    box.type = "checkbox";
    box.value = String(i);
    box.checked = true;
    label.appendChild(box);
    label.appendChild(document.createTextNode(" " + m.label));
    methodBox.appendChild(label);
  });

  function title(kind, step, accepted, drafted) {
    if (kind === "p") return "prefill: the target's first token";
    if (kind === "e") return "after decoding: the method's epilogue (lossy)";
    var head = "step " + step + ": ";
    if (kind === "d") return head + "draft token, accepted (" + (accepted - 1) + " of " + drafted + " drafted accepted)";
    if (drafted === 0) return head + "target token (nothing drafted)";
    return head + "target token after " + (accepted - 1) + " of " + drafted + " drafted accepted";
  }

  function turnNode(turn, isAr) {
    var box = document.createElement("div");
    box.className = "tokens";
    if (turn.error) {
      box.className = "tokens error";
      box.textContent = "error: " + turn.error;
      return box;
    }
    var diff = {};
    (turn.x || []).forEach(function (i) { diff[i] = true; });
    for (var i = 0; i < turn.t.length; i++) {
      var kind = turn.k.charAt(i), step = turn.s[i];
      var span = document.createElement("span");
      var cls = "tok " + kind;
      if (!isAr && step > 0 && step % 2 === 1) cls += " odd";
      if (diff[i]) cls += " x";
      span.className = cls;
      span.textContent = turn.t[i];
      var accepted = step > 0 ? turn.a[step - 1] : 0, drafted = step > 0 ? turn.d[step - 1] : 0;
      span.title = title(kind, step, accepted, drafted) + (diff[i] ? " | differs from AR" : "");
      box.appendChild(span);
    }
    return box;
  }

  function answerNode(method, turns) {
    var card = document.createElement("div");
    card.className = "answer";
    card.setAttribute("data-method", method.label);
    var head = document.createElement("h3");
    head.textContent = method.label;
    if (!method.ar && turns) {
      var badge = document.createElement("span");
      var same = turns.every(function (t) { return t.same === true; });
      var known = turns.every(function (t) { return t.same !== null && t.same !== undefined; });
      badge.className = "badge" + (known && !same ? " bad" : "");
      badge.textContent = known ? (same ? "= AR" : "differs from AR") : "no AR answer";
      head.appendChild(badge);
    }
    card.appendChild(head);
    if (!turns) {
      var none = document.createElement("div");
      none.className = "stats";
      none.textContent = "no answer to this question in this run";
      card.appendChild(none);
      return card;
    }
    var tokens = 0, steps = 0, added = 0;
    turns.forEach(function (t) {
      tokens += t.t.length; steps += t.a.length;
      t.a.forEach(function (a) { added += a; });
    });
    var stats = document.createElement("div");
    stats.className = "stats";
    stats.textContent = tokens + " tokens, " + steps + " steps" + (steps ? ", #MAT " + (added / steps).toFixed(2) : "");
    card.appendChild(stats);
    turns.forEach(function (t, i) {
      if (turns.length > 1) {
        var label = document.createElement("div");
        label.className = "turn-label";
        label.textContent = "turn " + (i + 1);
        card.appendChild(label);
      }
      card.appendChild(turnNode(t, method.ar));
    });
    return card;
  }

  function render() {
    var q = data.questions[Number(select.value)];
    var chosen = Array.prototype.filter.call(methodBox.querySelectorAll("input"), function (b) { return b.checked; })
      .map(function (b) { return data.methods[Number(b.value)]; });
    answers.textContent = "";
    chosen.forEach(function (m) {
      answers.appendChild(answerNode(m, (data.answers[q.key] || {})[m.key] || null));
    });
    answers.setAttribute("data-question", q.key);
    info.textContent = "Hover a token: the verification step that produced it.";
  }

  answers.addEventListener("mouseover", function (event) {
    if (event.target.classList && event.target.classList.contains("tok")) info.textContent = event.target.title;
  });
  select.addEventListener("change", render);
  methodBox.addEventListener("change", render);
  var wanted = /[#&]q=(\d+)/.exec(window.location.hash);
  if (wanted && Number(wanted[1]) < data.questions.length) select.value = wanted[1];
  render();
})();
"""
