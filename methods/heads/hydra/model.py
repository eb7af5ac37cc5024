"""Hydra heads (Ankner et al. 2024, `zankner/Hydra`): Medusa-style heads made sequentially
dependent. Head i reads the target's feature at the last accepted position together with the
input embeddings of the root and of the i tokens drafted below it, and predicts the next one:

    head i:  x = cat(base_t, emb(root), emb(d_1), ..., emb(d_i))       [(i + 2) h]
             s = first_i(x) = res_i(x) + SiLU(linear_i(x)),  then  s <- s + SiLU(shared_i(s))  (layers - 1 times)
             logits = lm_head_i(s)     (own [V, h] + bias, published)   or   target LM head (trained here)

`res_i` is a Linear((i+2)h -> h) (Hydra's `res_connection`; the identity when a head is not
grounded). Published Hydra repeats one ResBlock object for the later layers
(`[ResBlock(h)] * (layers - 1)`), so they share weights; this module keeps that: `shared_i` is
applied `layers - 1` times.

`hydra_head_arch = "prefix-mlp"` (Hydra++, the published checkpoints) first runs the target's
features through one extra decoder layer of the target's shape plus an RMSNorm (`prefix`), with
its own KV cache over the accepted positions: base_t is that layer's output. `"mlp"` reads the
target's features directly.

Checkpoint: `config.json` (`hydra_num_heads`, `hydra_num_layers`, `hydra_head_arch`,
`grounded_heads`, `hidden_size`, `vocab_size`, `own_lm_heads`, `prefix`: the prefix layer's
Llama fields) + `hydra_heads.safetensors` with `first.{i}.linear|res_connection.*`,
`shared.{i}.linear.*`, `lm_heads.{i}.weight|bias`, `prefix.layer.*`, `prefix.norm.weight`.
The prefix layer's attention geometry, norm epsilon and RoPE are the target's (Hydra builds it
from a copy of the target's config); a folder without them (an imported one) takes them from
the target when it loads.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from specbench_cli.errors import UsageError
from specbench_cli.methods.heads.kv import HeadKV
from specbench_cli.methods.heads.model import DraftVocabMixin, ResBlock, _target_parts

ARCHS = ("prefix-mlp", "mlp")
PREFIX_FIELDS = ("intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps",
                 "rope_theta", "max_position_embeddings", "hidden_act")


class FirstBlock(nn.Module):
    """Hydra's first ResBlock of head i: res(x) + SiLU(linear(x)) on a [(cond + 1) h] input;
    `res` is a Linear when the input is wider than h, else the identity. Starts as `res`."""

    def __init__(self, hidden: int, cond: int) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden * (cond + 1), hidden)
        nn.init.zeros_(self.linear.weight)
        self.res_connection = nn.Linear(hidden * (cond + 1), hidden) if cond > 0 else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        res = x if self.res_connection is None else self.res_connection(x)
        return res + F.silu(self.linear(x))


class PrefixLayer(nn.Module):
    """One Llama decoder layer + RMSNorm over the target's features (Hydra++'s prefix layer)."""

    def __init__(self, config: Any) -> None:
        from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRMSNorm, LlamaRotaryEmbedding

        super().__init__()
        config._attn_implementation = "sdpa"
        self.config = config
        self.layer = LlamaDecoderLayer(config, 0)
        self.norm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary = LlamaRotaryEmbedding(config)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, cache: HeadKV | None = None):
        """x [B,T,h], positions [B,T], mask [B,1,T,S] bool -> [B,T,h]."""
        x = x.to(self.norm.weight.dtype)
        pos_emb = self.rotary(x, positions)
        x = self.layer(x, attention_mask=mask, position_ids=positions, past_key_values=cache,
                       position_embeddings=pos_emb)
        return self.norm(x)


def prefix_config(cfg: dict, target_config: Any = None, header: dict | None = None):
    """The prefix layer's LlamaConfig: the target's shape (one layer) when the target is known,
    else the folder's `prefix` fields, else (an imported folder checked before the target loads)
    a geometry that only reproduces the tensors' shapes from the file's header."""
    from transformers import LlamaConfig

    from specbench_cli.methods.heads.model import eagle_config

    if target_config is not None:
        out = eagle_config(target_config, 1)
        out.vocab_size = int(cfg.get("vocab_size") or out.vocab_size)
        return out
    pre = cfg.get("prefix") or {}
    h = int(cfg["hidden_size"])
    fields = {k: pre[k] for k in PREFIX_FIELDS if pre.get(k) is not None}
    if "num_attention_heads" not in fields:
        if not header:
            raise UsageError("hydra heads without the prefix layer's attention fields need the target's config")
        q = header.get("prefix.layer.self_attn.q_proj.weight", (None, (h, h)))[1][0]
        kv = header.get("prefix.layer.self_attn.k_proj.weight", (None, (h, h)))[1][0]
        if kv <= 0 or q % kv:
            raise UsageError(f"prefix.layer.self_attn.q_proj.weight rows ({q}) are not a multiple of k_proj's ({kv})")
        fields.update(num_attention_heads=q // kv, num_key_value_heads=1, head_dim=kv)
    # The prefix layer never embeds tokens: no special-token ids (transformers warns when they
    # fall outside a placeholder vocabulary).
    return LlamaConfig(hidden_size=h, num_hidden_layers=1, vocab_size=int(cfg.get("vocab_size") or 1),
                       bos_token_id=None, eos_token_id=None, pad_token_id=None, **fields)


class HydraHeads(DraftVocabMixin, nn.Module):
    """H sequentially dependent heads (see the module docstring).

    Inference: `new_cache()`; `base(cache, hidden [k, h], positions [k]) -> [k, h]` (through the
    prefix layer, appending the k positions to its cache; the features themselves for "mlp");
    `head_logits(i, base [n, h], path_embs [n, (i + 1) h]) -> [n, V]` (or [n, V'] after
    `use_vocab(ids)` on heads that share the target's LM head; `to_target` maps back).
    Training: `train_states(features [B,T,h], tokens [B,T], valid [B,T]) -> [H x [B,T-1-i,h]]`.
    """

    kind = "hydra"

    def __init__(self, hidden: int, heads: int, layers: int, arch: str = "prefix-mlp", grounded: bool = True,
                 vocab: int | None = None, prefix: Any = None) -> None:
        super().__init__()
        if heads < 1 or layers < 1:
            raise UsageError("Hydra needs --heads-count >= 1 and --layers >= 1")
        if arch not in ARCHS:
            raise UsageError(f"Hydra head architecture '{arch}' is not supported (one of: {', '.join(ARCHS)})")
        self.hidden, self.n_heads, self.n_layers, self.arch, self.grounded = hidden, heads, layers, arch, grounded
        self.own_vocab = vocab
        self.first = nn.ModuleList([FirstBlock(hidden, i + 1 if grounded else 0) for i in range(heads)])
        self.shared = nn.ModuleList([ResBlock(hidden) for _ in range(heads)]) if layers > 1 else None
        self.lm_heads = nn.ModuleList([nn.Linear(hidden, vocab) for _ in range(heads)]) if vocab else None
        self.prefix = PrefixLayer(prefix) if arch == "prefix-mlp" else None
        self.__dict__["lm_head"] = self.__dict__["embed"] = None
        self.use_vocab(None)

    def bind(self, target: Any) -> "HydraHeads":
        self.__dict__["lm_head"], self.__dict__["embed"] = _target_parts(target)
        return self

    def use_vocab(self, ids: torch.Tensor | None) -> None:
        if self.own_vocab is not None and ids is not None:
            raise ValueError("published Hydra heads project through their own LM heads; a draft vocabulary does not apply")
        super().use_vocab(ids)

    @property
    def dtype(self) -> torch.dtype:
        return self.first[0].linear.weight.dtype

    # -- inference ------------------------------------------------------------------------------
    @staticmethod
    def new_cache() -> HeadKV:
        return HeadKV()

    @torch.no_grad()
    def base(self, cache: HeadKV, hidden: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        if self.prefix is None:
            return hidden.to(self.dtype)
        n, past = hidden.shape[0], cache.length
        mask = torch.ones(n, past + n, dtype=torch.bool, device=hidden.device)
        mask[:, past:] = torch.ones(n, n, dtype=torch.bool, device=hidden.device).tril()
        return self.prefix(hidden[None], positions[None], mask[None, None], cache)[0]

    def embed_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.embed(tokens).to(self.dtype)

    def states(self, i: int, base: torch.Tensor, path_embs: torch.Tensor | None) -> torch.Tensor:
        """Head i's state [..., h] from base [..., h] and the embeddings of root + i drafted tokens."""
        x = torch.cat([base, path_embs], -1) if self.grounded else base
        s = self.first[i](x)
        for _ in range(self.n_layers - 1):
            s = self.shared[i](s)
        return s

    def logits(self, i: int, states: torch.Tensor) -> torch.Tensor:
        if self.lm_heads is not None:
            return self.lm_heads[i](states)
        return self.project(states)

    @torch.no_grad()
    def head_logits(self, i: int, base: torch.Tensor, path_embs: torch.Tensor | None) -> torch.Tensor:
        return self.logits(i, self.states(i, base, path_embs))

    # -- training -------------------------------------------------------------------------------
    def train_states(self, features: torch.Tensor, tokens: torch.Tensor, valid: torch.Tensor) -> list[torch.Tensor]:
        """Teacher-forced head states: entry i is [B, T-1-i, h], row t = head i at position t
        (base_t, tokens t+1 .. t+1+i), which predicts token t+2+i."""
        from specbench_cli.methods.heads.model import causal_mask

        base = features.to(self.dtype)
        if self.prefix is not None:
            positions = torch.arange(tokens.shape[1], device=tokens.device).expand(tokens.shape[0], -1)
            base = self.prefix(base, positions, causal_mask(valid))
        emb = self.embed(tokens).to(self.dtype).detach()
        out, t = [], tokens.shape[1]
        for i in range(self.n_heads):
            if t - 1 - i <= 0:
                break
            path = torch.cat([emb[:, 1 + j: t - i + j] for j in range(i + 1)], -1) if self.grounded else None
            out.append(self.states(i, base[:, : t - 1 - i], path))
        return out

    def config_dict(self) -> dict:
        pre = self.prefix.config if self.prefix is not None else None
        return {"hydra_num_heads": self.n_heads, "hydra_num_layers": self.n_layers, "hydra_head_arch": self.arch,
                "grounded_heads": self.grounded, "hidden_size": self.hidden, "own_lm_heads": self.own_vocab is not None,
                "vocab_size": self.own_vocab, "architectures": ["HydraHeads"],
                "prefix": {k: getattr(pre, k, None) for k in PREFIX_FIELDS} if pre is not None else None}


def hydra_fields(cfg: dict, path: Any) -> None:
    """Type-check a Hydra config.json (UsageError naming the file and the field)."""
    import json

    def bad(key: str, what: str) -> UsageError:
        return UsageError(f"{path}: '{key}' must be {what}, got {json.dumps(cfg.get(key))}")

    for key in ("hydra_num_heads", "hydra_num_layers", "hidden_size"):
        v = cfg.get(key)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise bad(key, "a positive int")
    if cfg.get("hydra_head_arch", "prefix-mlp") not in ARCHS:
        raise UsageError(f"{path}: hydra_head_arch {json.dumps(cfg.get('hydra_head_arch'))} is not supported "
                         f"(one of: {', '.join(ARCHS)}; Hydra's cross-attn / eagle-attn heads are not)")
    if not isinstance(cfg.get("grounded_heads", True), bool) or not isinstance(cfg.get("own_lm_heads", False), bool):
        raise bad("grounded_heads", "true or false")
    v = cfg.get("vocab_size")
    if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
        raise bad("vocab_size", "a positive int or null")
    if cfg.get("own_lm_heads") and v is None:
        raise bad("vocab_size", "the LM heads' vocabulary (own_lm_heads is true)")
    pre = cfg.get("prefix")
    if pre is not None and not isinstance(pre, dict):
        raise bad("prefix", "an object")


def build_hydra(cfg: dict, target_config: Any = None, header: dict | None = None) -> HydraHeads:
    arch = cfg.get("hydra_head_arch", "prefix-mlp")
    prefix = prefix_config(cfg, target_config, header) if arch == "prefix-mlp" else None
    return HydraHeads(int(cfg["hidden_size"]), int(cfg["hydra_num_heads"]), int(cfg["hydra_num_layers"]), arch,
                      bool(cfg.get("grounded_heads", True)), int(cfg["vocab_size"]) if cfg.get("own_lm_heads") else None,
                      prefix)
