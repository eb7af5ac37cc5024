"""One draft tree from several drafters' trees over the same root: the union of their paths (a
path drafted twice is one node, with the higher score), cut to the best-scoring nodes.

Each node comes with a score, the drafter's estimate that the target accepts it (its whole path).
A child never scores above its parent (its score is capped by the parent's), and on equal
scores the shallower node comes first, so the kept nodes always include every kept node's
parent. Used by `samd -o samd.merge=true` (the automaton's chain with Token Recycling's tree).
"""

from __future__ import annotations

from specbench_cli.decoding.draft import Draft


def path_scores(draft: Draft, factor) -> list[float]:
    """Scores as products along each path of `factor(i)`, node i's chance given its parent."""
    out: list[float] = []
    for i, p in enumerate(draft.parents):
        out.append((1.0 if p < 0 else out[p]) * factor(i))
    return out


def merge(parts: list[tuple[Draft, list[float]]], cap: int) -> Draft:
    """The union of the drafts in `parts` (each with one score per node), at most `cap` nodes."""
    nodes: dict[tuple[int, ...], list] = {}  # path -> [score, signal, first seen]
    for draft, scores in parts:
        paths: list[tuple[int, ...]] = []
        for i, (token, parent) in enumerate(zip(draft.tokens, draft.parents)):
            path = (paths[parent] if parent >= 0 else ()) + (int(token),)
            paths.append(path)
            signal = draft.signal[i] if draft.signal is not None else 0
            have = nodes.get(path)
            if have is None:
                nodes[path] = [scores[i], signal, len(nodes)]
            elif scores[i] > have[0]:
                have[0], have[1] = scores[i], signal
    for path in sorted(nodes, key=len):  # parents before children
        if len(path) > 1:
            nodes[path][0] = min(nodes[path][0], nodes[path[:-1]][0])
    kept = sorted(nodes, key=lambda p: (-nodes[p][0], len(p), nodes[p][2]))[:max(0, cap)]
    kept.sort(key=lambda p: (len(p), nodes[p][2]))
    index = {p: i for i, p in enumerate(kept)}
    return Draft(tokens=[p[-1] for p in kept], parents=[index[p[:-1]] if len(p) > 1 else -1 for p in kept],
                 signal=[nodes[p][1] for p in kept])
