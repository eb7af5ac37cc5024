"""Task suites: reading, selection, the Spec-Bench file and its download path."""

from __future__ import annotations

import hashlib
import http.server
import threading

import pytest

from specbench_cli import tasks
from specbench_cli.errors import RuntimeFailure, UsageError
from specbench_cli.tasks import spec_bench
from specbench_cli.tasks.base import SPEC_BENCH_CATEGORIES, read_jsonl_questions
from specbench_cli.tasks.base import select as select_questions


def test_mini_suite_covers_the_six_categories_and_has_multi_turn_prompts():
    qs = tasks.get("mini").load()
    assert {q.category for q in qs} == set(SPEC_BENCH_CATEGORIES)
    assert any(len(q.turns) == 2 for q in qs)
    assert len({q.id for q in qs}) == len(qs)


def test_refine_suite_asks_every_question_twice_the_second_time_about_the_first_answer():
    qs = tasks.get("refine").load()
    assert {q.category: sum(x.category == q.category for x in qs) for q in qs} == {c: 3 for c in SPEC_BENCH_CATEGORIES}
    assert all(len(q.turns) == 2 for q in qs) and len({q.id for q in qs}) == len(qs)
    revise = ("revise", "rewrite", "shorten", "continue", "repeat", "check", "now", "same")
    assert all(any(w in q.turns[1].lower() for w in revise) for q in qs)


def test_real_spec_bench_file(spec_bench_questions):
    qs = tasks.get("spec_bench").load(spec_bench_questions)
    assert len(qs) == 480
    counts = {c: sum(q.category == c for q in qs) for c in SPEC_BENCH_CATEGORIES}
    assert counts == {c: 80 for c in SPEC_BENCH_CATEGORIES}
    assert spec_bench.sha256_of(spec_bench_questions) == spec_bench.SHA256


def test_limit_is_per_category_and_spreads_over_mt_bench_subcategories(spec_bench_questions):
    qs = select_questions(tasks.get("spec_bench").load(spec_bench_questions), limit=3)
    assert len(qs) == 18
    mt = [q for q in qs if q.category == "mt_bench"]
    assert len({q.subcategory for q in mt}) == 3


def test_select_by_category_and_id():
    qs = tasks.get("mini").load()
    assert {q.category for q in select_questions(qs, categories=["qa"])} == {"qa"}
    assert [q.id for q in select_questions(qs, question_ids=["t2"])] == ["t2"]
    with pytest.raises(UsageError, match="did you mean 'qa'|Did you mean 'qa'"):
        select_questions(qs, categories=["qaa"])
    with pytest.raises(UsageError, match="not found"):
        select_questions(qs, question_ids=["nope"])


@pytest.mark.parametrize("content,message", [
    ('{"question_id": 1, "turns": ["a"]}\nnot json\n', ":2: not valid JSON"),
    ('{"question_id": 1, "turns": []}\n', "'turns' must be a non-empty list"),
    ('{"turns": ["x"]}\n', "missing 'question_id'"),
    ('[1, 2]\n', "expected a JSON object"),
    ('\n', "no questions"),
])
def test_malformed_jsonl_is_one_clear_error(tmp_path, content, message):
    p = tmp_path / "q.jsonl"
    p.write_text(content)
    with pytest.raises(UsageError, match=message):
        read_jsonl_questions(p, "jsonl")


def test_unknown_task_suggests_a_name():
    with pytest.raises(UsageError, match="Did you mean 'spec_bench'"):
        tasks.get("spec-bench")


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def http_dir(tmp_path):
    """A loopback HTTP server serving tmp_path/www."""
    root = tmp_path / "www"
    root.mkdir()
    handler = lambda *a, **k: _Quiet(*a, directory=str(root), **k)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_download_checks_sha256_and_keeps_only_a_verified_file(http_dir, tmp_path):
    root, base = http_dir
    body = b'{"question_id": 1, "category": "qa", "turns": ["hi"]}\n'
    (root / "question.jsonl").write_bytes(body)
    dest = tmp_path / "cache" / "question.jsonl"
    good = hashlib.sha256(body).hexdigest()
    assert spec_bench.download(dest, url=f"{base}/question.jsonl", sha256=good) == dest
    assert dest.read_bytes() == body
    dest.unlink()
    with pytest.raises(RuntimeFailure, match="sha256"):
        spec_bench.download(dest, url=f"{base}/question.jsonl", sha256="0" * 64)
    assert not dest.exists() and not dest.with_suffix(".part").exists()
    with pytest.raises(RuntimeFailure, match="could not download"):
        spec_bench.download(dest, url=f"{base}/missing.jsonl", sha256=good)


def test_find_questions_downloads_the_pinned_file_when_nothing_is_local(http_dir, spec_bench_questions,
                                                                        isolated_cache, monkeypatch, tmp_path):
    root, base = http_dir
    (root / "question.jsonl").write_bytes(spec_bench_questions.read_bytes())
    monkeypatch.setattr(spec_bench, "local_candidates", lambda: [tmp_path / "nowhere.jsonl"])
    monkeypatch.setenv("SPECBENCH_QUESTIONS_URL", f"{base}/question.jsonl")
    path = spec_bench.find_questions()
    assert path.is_relative_to(isolated_cache)
    assert len(spec_bench.SpecBench.load(str(path))) == 480
    # second time: found in the cache, no server needed
    monkeypatch.setenv("SPECBENCH_QUESTIONS_URL", f"{base}/gone.jsonl")
    assert spec_bench.find_questions() == path


def test_pinned_url_names_a_commit():
    assert spec_bench.SPEC_BENCH_COMMIT in spec_bench.URL and len(spec_bench.SPEC_BENCH_COMMIT) == 40
