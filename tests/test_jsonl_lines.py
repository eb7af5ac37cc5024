"""JSONL lines are split at "\\n" only: a JSON string may hold U+2028, U+0085 and other characters
that `str.splitlines` treats as line ends, unescaped."""

from __future__ import annotations

import json

from specbench_cli.jsonl import read_lines


def test_a_line_holding_unicode_line_separators_stays_one_line(tmp_path):
    records = [{"question_id": 1, "turns": ["a\u2028b\u0085c\x1cd\x0be\x0cf"]}, {"question_id": 2, "turns": ["x"]}]
    path = tmp_path / "q.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\r\n" for r in records), encoding="utf-8")
    assert [json.loads(line) for line in read_lines(path)] == records
