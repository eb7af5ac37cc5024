import os
import sys
from pathlib import Path

# In a worker of a parallel run (pytest-xdist), the other worker keeps a core busy: OpenMP threads
# waiting at a barrier then sleep instead of spinning, so a two-thread forward (here or in a
# command a test starts, which inherits this) is not left waiting on a thread with no core. Set
# before torch loads the OpenMP runtime, which reads it once.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))

from helpers.tiny import make_model, make_tokenizer, save_tiny  # noqa: E402

from specbench_cli.targets import as_target  # noqa: E402


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: unknown when it is not installed
def pytest_xdist_auto_num_workers(config):
    """`-n auto`: a worker a core, at most 4 (each may load the real model and start servers)."""
    return max(1, min(4, len(os.sched_getaffinity(0))))

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
    """Keep converted models and downloads of tests out of the user's cache. The machine looks
    quiet to the cost curve's cache (a curve measured on a busy machine is not cached, and the
    test suite itself keeps the load up), so what is cached does not depend on the load."""
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr("specbench_cli.run.auto.calibrate.load_average", lambda: [0.0, 0.0, 0.0])
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


@pytest.fixture(scope="session")
def tiny_head_folders(tiny_heads, tmp_path_factory, tiny_model):
    """A heads folder of every head kind, trained on the tiny model: `tiny_heads` plus EAGLE-3."""
    from helpers.tiny_dflash import train_tiny_dflash
    from helpers.tiny_eagle3 import train_tiny_eagle3

    return {**tiny_heads, "eagle3": train_tiny_eagle3(tiny_model, tmp_path_factory.mktemp("eagle3") / "heads"),
            "dflash": train_tiny_dflash(tiny_model, tmp_path_factory.mktemp("dflash") / "heads")}


@pytest.fixture(scope="session")
def tiny_datastore(tmp_path_factory, tiny_model, tiny_tok):
    """A REST datastore for the tiny model: its own greedy answers to a few prompts (the lossless
    tests need some drafts accepted, not realistic ones)."""
    pytest.importorskip("draftretriever")
    from helpers.artifacts import DATASTORE_PROMPTS
    from helpers.tiny import EOS

    from specbench_cli import methods
    from specbench_cli.decoding.decoder import Decoder
    from specbench_cli.methods.core.method import MethodContext
    from specbench_cli.methods.retrieval.datastore import write

    dec = Decoder(as_target(tiny_model), {EOS})
    ar = methods.get("ar").create(MethodContext(tiny_model, tiny_tok, budget=1))
    seqs = [p + dec.generate(ar, p, 48, 1).output_ids for p in DATASTORE_PROMPTS]
    out = tmp_path_factory.mktemp("ds") / "store"
    write(seqs, tiny_tok, out, ["tiny answers"])
    return str(out)
