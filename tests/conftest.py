import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from helpers.tiny import make_model, make_tokenizer, save_tiny  # noqa: E402

SHARED_QUESTIONS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "spec_bench" / "question.jsonl"


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    """Tiny models run fastest single-threaded and then do not fight other processes for cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_tok():
    return make_tokenizer()


@pytest.fixture(scope="session")
def tiny_model():
    return make_model(0)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("tiny-target"), seed=0)


@pytest.fixture
def isolated_cache(tmp_path, monkeypatch):
    """Keep converted models and downloads of tests out of the user's cache."""
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def spec_bench_questions():
    if not SHARED_QUESTIONS.is_file():
        pytest.skip("../shared/data/spec_bench/question.jsonl not present")
    return SHARED_QUESTIONS


@pytest.fixture(scope="session")
def tiny_heads(tmp_path_factory, tiny_model, tiny_tok):
    """{"medusa": folder, "eagle": folder, "hydra": folder}: heads trained a few seconds on the tiny model (tiny_heads.py)."""
    from helpers.tiny_heads import train_tiny_heads

    return train_tiny_heads(tiny_model, tiny_tok, tmp_path_factory.mktemp("tiny-heads"))
