"""One verifier: which draft nodes the target accepts, and the bonus token.

Greedy (temperature 0): walk down from the root; at each node the target's argmax must equal
a child's token; the accepted path is the longest such walk and the bonus token is the
target's argmax after it. This reproduces greedy AR exactly.

Sampling (temperature > 0), two exact rules:
- drafts with drafter probabilities on a chain (draft models): speculative sampling.
  Accept token x at a node with probability min(1, q(x)/p(x)) (q target, p drafter); on
  rejection draw the bonus from normalise(max(q - p, 0)); if all are accepted draw it from q.
- drafts without probabilities, or trees: the matching rule. Draw x ~ q at the current node;
  if a child carries x, move there, else x is the bonus. The output is distributed exactly
  as plain sampling from q, whatever the drafter proposed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from specbench_cli.decoding.draft import Draft, children_lists
from specbench_cli.lazy import torch


@dataclass
class SamplingConfig:
    temperature: float = 0.0
    top_p: float = 1.0

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


def target_probs(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """`[..., V]` logits -> probabilities after temperature and nucleus (top-p) filtering."""
    probs = torch.softmax(logits.float() / cfg.temperature, dim=-1)
    if cfg.top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        # Keep the smallest prefix whose mass reaches top_p (the token that crosses it included).
        drop = (sorted_p.cumsum(-1) - sorted_p) >= cfg.top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_p)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


@dataclass
class Verdict:
    accepted: list[int]      # node indices of the accepted path, root's child first
    new_tokens: list[int]    # accepted tokens followed by the bonus token
    preds: Optional[list[int]] = None  # greedy: target argmax per row (row 0 = root)
    rejected: bool = False   # the draft offered a token after the accepted path and the target refused it
                             # (False: the draft ran out there); per-position acceptance needs the difference

    @property
    def path_length(self) -> int:
        """Draft positions along the path the target took: the accepted ones, plus the refused one."""
        return len(self.accepted) + self.rejected


def _acceptable(draft: Draft, node: int) -> bool:
    return draft.acceptable is None or draft.acceptable[node]


def verify_greedy(draft: Draft, logits: torch.Tensor, preds: Optional[list[int]] = None) -> Verdict:
    """`logits`: `[n+1, V]` target logits at root + nodes; `preds`: their argmax per row when the
    caller already brought it to the host (the loop does, once per step for every sequence)."""
    if preds is None:
        preds = logits.argmax(dim=-1).tolist()
    tokens = draft.tokens
    accepted: list[int] = []
    row = 0
    if draft.is_chain and draft.acceptable is None:
        for i, tok in enumerate(tokens):
            if preds[i] != tok:
                break
            accepted.append(i)
        row = len(accepted)
        rejected = row < len(tokens)
    else:
        children = children_lists(draft.parents)
        while True:
            want = preds[row]
            nxt = next((c for c in children[row] if tokens[c] == want and _acceptable(draft, c)), None)
            if nxt is None:
                break
            accepted.append(nxt)
            row = nxt + 1
        rejected = _offers(draft, children[row])
    return Verdict(accepted, [tokens[a] for a in accepted] + [preds[row]], preds, rejected)


def _offers(draft: Draft, children: list[int]) -> bool:
    """Whether any of `children` (one node's) could have been accepted."""
    return any(_acceptable(draft, c) for c in children)


def verify_sampling(draft: Draft, logits: torch.Tensor, cfg: SamplingConfig,
                    generator: Optional[torch.Generator]) -> Verdict:
    q = target_probs(logits, cfg)  # [n+1, V]
    tokens = draft.tokens
    accepted: list[int] = []
    if draft.probs is not None and draft.is_chain and draft.acceptable is None:
        p = draft.probs.to(q.device, torch.float32)
        u = torch.rand(len(tokens), generator=generator, device="cpu").tolist() if tokens else []
        for i, tok in enumerate(tokens):
            qx, px = q[i, tok].item(), p[i, tok].item()
            if px > 0 and u[i] < min(1.0, qx / px):
                accepted.append(i)
                continue
            residual = (q[i] - p[i]).clamp_min(0.0)
            total = residual.sum()
            dist = residual / total if total > 0 else q[i]
            bonus = int(torch.multinomial(dist.cpu(), 1, generator=generator))
            return Verdict(accepted, [tokens[a] for a in accepted] + [bonus], rejected=True)
        bonus = int(torch.multinomial(q[len(tokens)].cpu(), 1, generator=generator))
        return Verdict(accepted, [tokens[a] for a in accepted] + [bonus])

    children = children_lists(draft.parents)
    row = 0
    while True:
        x = int(torch.multinomial(q[row].cpu(), 1, generator=generator))
        nxt = next((c for c in children[row] if tokens[c] == x and _acceptable(draft, c)), None)
        if nxt is None:
            return Verdict(accepted, [tokens[a] for a in accepted] + [x], rejected=_offers(draft, children[row]))
        accepted.append(nxt)
        row = nxt + 1
