"""The artifacts a method declares it needs (`Method.requires`), supplied by the tests' tiny
fixtures, so tests run every registered method without naming any."""

from __future__ import annotations

from specbench_cli.targets import as_target

# the prompts of the lossless test: the tiny datastore holds the tiny model's answers to them
DATASTORE_PROMPTS = [
    [2, 5, 9, 14, 7, 3, 2, 6, 30, 31, 32, 33, 9, 14],
    [2, 40, 41, 42, 40, 41, 42, 40, 41],
    [2, 77],
]

# the id the tiny targets' mask-token methods use as their mask: a filler word of the tiny vocabulary whose
# mask guesses get some drafts accepted on the lossless and the sampling tests' targets
TINY_MASK_ID = 102


def expects_acceptance(method_cls) -> bool:
    """Should the method get draft tokens accepted on the tiny model? Not when it drafts nothing
    (AR), when its drafts are guesses never conditioned on the accepted text (vanilla Jacobi: only
    luck gets one accepted, and on the tiny model that luck does not come), or when it drafts from
    a reference answer the test does not hand it (synthetic)."""
    from specbench_cli.decoding.drafter import Structure

    return (method_cls.structure is not Structure.NONE and not method_cls.drafts_by_chance
            and not getattr(method_cls, "reference_drafts", False))


def artifact_options(method_cls, request) -> dict:
    """Options giving `method_cls` what it requires: "heads" -> tiny heads of its kind
    (`tiny_head_folders`), "datastore" -> the tiny REST datastore (`tiny_datastore`), "mask_token"
    -> option `mask_id` = `TINY_MASK_ID`. A draft model ("draft_model") comes through the context
    (`MethodContext(draft_model=...)`)."""
    options = {}
    if "heads" in method_cls.requires:
        options["heads"] = request.getfixturevalue("tiny_head_folders")[method_cls.kind]
    if "datastore" in method_cls.requires:
        options["datastore"] = request.getfixturevalue("tiny_datastore")
    if "mask_token" in method_cls.requires:  # a target fine-tuned with a mask token (space)
        options["mask_id"] = TINY_MASK_ID
    if getattr(method_cls, "draft_format", None) == "pard":  # a draft model that declares a mask token
        from helpers.tiny_pard import pard_copy

        options["draft_model"] = pard_copy(request.getfixturevalue("draft_dir"))
    return options


def equals_ar_counting(method, target, tokenizer, budget: int, stat: str, prompts=None, max_new: int = 48) -> int:
    """Decode each prompt (default: DATASTORE_PROMPTS) with `method` and with AR at `budget`;
    assert the tokens are AR's and no step verified more than the budget; return the sum of the
    method's `stat` over the prompts (how often the part under test drafted)."""
    from helpers.tiny import EOS
    from specbench_cli import methods
    from specbench_cli.decoding.decoder import Decoder
    from specbench_cli.methods.core.method import MethodContext

    dec = Decoder(as_target(target), {EOS})
    ar = methods.get("ar").create(MethodContext(target, tokenizer, budget=budget))
    total = 0
    for prompt in prompts if prompts is not None else DATASTORE_PROMPTS:
        got = dec.generate(method, prompt, max_new, budget)
        assert got.output_ids == dec.generate(ar, prompt, max_new, budget).output_ids, f"{method.label()} differs from AR"
        assert max(got.budget_used, default=1) <= budget
        total += got.stats[stat]
    return total
