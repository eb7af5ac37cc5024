"""Draft heads on the target's last hidden state (after the final norm): Medusa and EAGLE(-2),
with KOALA's K-layer variants (their checkpoint IO is methods/heads/checkpoint.py; what a kind is, its
declaration in methods/heads/<kind>/kind.py).

Both heads reuse the target's frozen LM head (and EAGLE its frozen token embedding). They are
bound to the target with `bind(target)`, held outside `state_dict()`, so checkpoints hold only
the head's own weights, in the public formats:

- Medusa (v2 / TGI form, `FasterDecoding/Medusa`): `config.json` (`medusa_num_heads`,
  `medusa_num_layers`, `version: "2"`) + `medusa_lm_head.safetensors` with `{head}.{layer}.linear.*`.
- EAGLE-1/2 (`SafeAILab/EAGLE`): `config.json` = a LlamaConfig with `num_hidden_layers = K`,
  `bias: true` + `model.safetensors` with `fc.*`, `layers.{k}.*` (layer 0 has no input norm).

Our provenance (target, data, recipe, tokens seen, time, kind, K, adversarial, lambda) sits
under the `"specbench"` key of `config.json`. Inference APIs are documented on each class;
the EAGLE-2 tree and the Medusa tree builders live in methods/heads/draft_trees.py.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from specbench_cli.errors import UsageError
from specbench_cli.methods.heads.kv import CachedHeadMixin, HeadKV  # noqa: F401 - HeadKV is part of this module's API


def _target_parts(target: Any) -> tuple[nn.Module, nn.Module]:
    """(output head [h -> V], input embedding [V -> h]) of a target (decoding/target.py; a
    transformers model is wrapped in an `HFTarget`)."""
    from specbench_cli.targets import as_target

    target = as_target(target)
    return target.output_projection(), target.token_embeddings()


class DraftVocabMixin:
    """A restricted draft vocabulary at inference (`use_vocab`): the heads' logits are then computed
    against the target LM head's rows `ids` only ([..., V'] instead of [..., V]); `to_target` maps
    indices of those logits back to target token ids. Speed only: the target verifies every draft,
    so a token outside the vocabulary is merely never proposed (EAGLE-3's draft vocabulary idea)."""

    def use_vocab(self, ids: torch.Tensor | None) -> None:
        """ids: sorted target ids [V'] (None = the full vocabulary). Copies V' rows of the LM head."""
        if ids is None:
            self.__dict__["vocab_ids"] = self.__dict__["vocab_w"] = None
            return
        w = self.lm_head.weight
        ids = ids.to(w.device)
        self.__dict__["vocab_ids"], self.__dict__["vocab_w"] = ids, w.index_select(0, ids).contiguous()

    def project(self, states: torch.Tensor) -> torch.Tensor:
        """[..., h] -> [..., V] logits, or [..., V'] over the draft vocabulary when one is set."""
        w = self.__dict__.get("vocab_w")
        if w is None:
            return self.lm_head(states.to(self.lm_head.weight.dtype))
        return F.linear(states.to(w.dtype), w, self.lm_head.bias[self.vocab_ids] if self.lm_head.bias is not None
                        else None)

    @property
    def draft_ids(self) -> torch.Tensor | None:
        """The draft vocabulary's target ids [V'], None = full vocabulary."""
        return self.__dict__.get("vocab_ids")

    def to_target(self, idx: torch.Tensor) -> torch.Tensor:
        """Indices into `project`'s last dimension -> target token ids (same shape)."""
        ids = self.__dict__.get("vocab_ids")
        return idx if ids is None else ids[idx.to(ids.device)]


class ResBlock(nn.Module):
    """x + SiLU(Linear(x)); the weight starts at zero so a new block is the identity (+ SiLU(bias))."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden, hidden)
        nn.init.zeros_(self.linear.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.silu(self.linear(x))


class MedusaHeads(DraftVocabMixin, nn.ModuleList):
    """H heads of K distinct ResBlocks each; head i predicts token t+2+i from the feature at t.

    State-dict keys are exactly Medusa's `{i}.{j}.linear.weight|bias`. Medusa-2 / TGI heads
    (`vocab=None`) project through the target's LM head; Medusa-1 heads (`vocab=V`) end in their
    own trained `Linear(h, V, bias=False)`, key `{i}.{K}.weight`.
    Inference: `head_logits(hidden [..., h]) -> [..., H, V]` ([..., H, V'] after `use_vocab(ids)`
    on shared-LM-head heads; map indices back with `to_target`).
    """

    kind = "medusa"

    def __init__(self, hidden: int, heads: int, layers: int, vocab: int | None = None) -> None:
        if heads < 1 or layers < 1:
            raise UsageError("Medusa needs --heads-count >= 1 and --layers >= 1")
        blocks = [[ResBlock(hidden) for _ in range(layers)] for _ in range(heads)]
        if vocab is not None:
            for b in blocks:
                b.append(nn.Linear(hidden, vocab, bias=False))
        super().__init__([nn.Sequential(*b) for b in blocks])
        self.hidden, self.n_heads, self.n_layers, self.own_vocab = hidden, heads, layers, vocab
        self.__dict__["lm_head"] = None  # bound target part, kept out of state_dict/parameters
        self.use_vocab(None)

    def bind(self, target: Any) -> "MedusaHeads":
        self.__dict__["lm_head"] = _target_parts(target)[0]
        return self

    def use_vocab(self, ids: torch.Tensor | None) -> None:
        if self.own_vocab is not None and ids is not None:
            raise ValueError("Medusa-1 heads project through their own vocabulary; a draft vocabulary does not apply")
        super().use_vocab(ids)

    def head_states(self, hidden: torch.Tensor) -> torch.Tensor:
        """[..., h] -> [..., H, h] (pre-projection states of every head)."""
        return torch.stack([head[:self.n_layers](hidden) for head in self], dim=-2)

    def head_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[..., h] target feature(s) -> [..., H, V] logits ([..., H, V'] with a draft vocabulary)."""
        dtype = self[0][0].linear.weight.dtype if self.own_vocab is not None else self.lm_head.weight.dtype
        states = self.head_states(hidden.to(dtype))
        if self.own_vocab is not None:
            return torch.stack([head[self.n_layers](states[..., i, :]) for i, head in enumerate(self)], dim=-2)
        return self.project(states)

    def config_dict(self) -> dict:
        return {"medusa_num_heads": self.n_heads, "medusa_num_layers": self.n_layers, "hidden_size": self.hidden,
                "version": "1" if self.own_vocab is not None else "2", "architectures": ["MedusaHeads"]}


def eagle_config(target_config: Any, layers: int):
    """LlamaConfig of a K-layer EAGLE head for a Llama-style target (its widths, K layers, bias)."""
    from transformers import LlamaConfig

    if layers < 1:
        raise UsageError("EAGLE needs --layers >= 1")
    t = target_config
    cfg = LlamaConfig(vocab_size=t.vocab_size, hidden_size=t.hidden_size, intermediate_size=t.intermediate_size,
                      num_hidden_layers=layers, num_attention_heads=t.num_attention_heads,
                      num_key_value_heads=getattr(t, "num_key_value_heads", t.num_attention_heads),
                      max_position_embeddings=t.max_position_embeddings, rms_norm_eps=t.rms_norm_eps,
                      rope_theta=getattr(t, "rope_theta", None) or 10000.0, hidden_act=t.hidden_act)
    cfg.rope_parameters = getattr(t, "rope_parameters", None) or cfg.rope_parameters
    cfg.bias = True
    cfg.architectures = ["LlamaForCausalLM"]
    return cfg


class EagleHead(CachedHeadMixin, DraftVocabMixin, nn.Module):
    """EAGLE-1/2 draft head with K decoder layers (KOALA K > 1).

    Input pair at position t: (feature_t [h], token_{t+1}); output: predicted feature_{t+1} [h]
    and its logits lm_head(feature_{t+1}) [V] (the distribution of token t+2).
    Training: `forward(features [B,T,h], tokens [B,T], mask [B,1,T,T] bool) -> [B,T,h]`.
    Inference: `new_cache()`, then `step(cache, features [n,h], tokens [n], positions [n],
    mask [n, cache.length + n] bool | None) -> (features [n,h], logits [n,V])`, which appends
    the n pairs to the cache (mask None = causal over the n new pairs). After `use_vocab(ids)`
    the logits are [n, V'] over the draft vocabulary (map indices back with `to_target`).
    """

    kind = "eagle"

    def __init__(self, config: Any) -> None:
        from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

        super().__init__()
        config._attn_implementation = "sdpa"
        self.config = config
        h = config.hidden_size
        self.fc = nn.Linear(2 * h, h, bias=getattr(config, "bias", True))
        self.layers = nn.ModuleList([LlamaDecoderLayer(config, k) for k in range(config.num_hidden_layers)])
        self.layers[0].input_layernorm = nn.Identity()  # EAGLE: layer 0 has no input norm (no weight saved)
        self.rotary = LlamaRotaryEmbedding(config)
        self.n_layers = config.num_hidden_layers
        self.__dict__["lm_head"] = None
        self.__dict__["embed"] = None
        self.use_vocab(None)

    def bind(self, target: Any) -> "EagleHead":
        self.__dict__["lm_head"], self.__dict__["embed"] = _target_parts(target)
        return self

    def _run(self, features, tokens, positions, mask, cache=None) -> torch.Tensor:
        """features [B,T,h], tokens [B,T], positions [B,T], mask [B,1,T,S] bool -> [B,T,h]."""
        emb = self.embed(tokens).to(self.fc.weight.dtype)
        x = self.fc(torch.cat([emb, features.to(self.fc.weight.dtype)], dim=-1))  # EAGLE's order: (emb, feature)
        pos_emb = self.rotary(x, positions)
        for layer in self.layers:
            x = layer(x, attention_mask=mask, position_ids=positions, past_key_values=cache,
                      position_embeddings=pos_emb)
        return x

    def forward(self, features: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Teacher-forced training pass over whole sequences (positions 0..T-1)."""
        positions = torch.arange(tokens.shape[1], device=tokens.device).expand(tokens.shape[0], -1)
        return self._run(features, tokens, positions, mask)

    def logits(self, states: torch.Tensor) -> torch.Tensor:
        """[..., h] -> [..., V] through the target's LM head ([..., V'] with a draft vocabulary)."""
        return self.project(states)



def causal_mask(valid: torch.Tensor) -> torch.Tensor:
    """valid [B,T] bool -> [B,1,T,T] bool: causal over real tokens; padded rows see themselves
    (an all-False row would give NaN in SDPA)."""
    t = valid.shape[1]
    m = torch.ones(t, t, dtype=torch.bool, device=valid.device).tril()[None] & valid[:, None, :]
    m |= torch.eye(t, dtype=torch.bool, device=valid.device)[None]
    return m[:, None]


def count_params(head: nn.Module) -> int:
    return sum(p.numel() for p in head.parameters())
