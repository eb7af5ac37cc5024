"""Draft heads on the target's last hidden state (after the final norm): Medusa and EAGLE(-2),
with KOALA's K-layer variants, plus their checkpoint IO (safetensors + JSON; loading never runs code).

Both heads reuse the target's frozen LM head (and EAGLE its frozen token embedding). They are
bound to the target with `bind(target)`, held outside `state_dict()`, so checkpoints hold only
the head's own weights, in the public formats:

- Medusa (v2 / TGI form, `FasterDecoding/Medusa`): `config.json` (`medusa_num_heads`,
  `medusa_num_layers`, `version: "2"`) + `medusa_lm_head.safetensors` with `{head}.{layer}.linear.*`.
- EAGLE-1/2 (`SafeAILab/EAGLE`): `config.json` = a LlamaConfig with `num_hidden_layers = K`,
  `bias: true` + `model.safetensors` with `fc.*`, `layers.{k}.*` (layer 0 has no input norm).

Our provenance (target, data, recipe, tokens seen, time, kind, K, adversarial, lambda) sits
under the `"specbench"` key of `config.json`. Inference APIs are documented on each class;
the EAGLE-2 tree and the Medusa tree builders live in heads_tree.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from specbench_cli.atomic import atomic_write
from specbench_cli.errors import UsageError
from specbench_cli.methods.heads.kv import CachedHeadMixin, HeadKV  # noqa: F401 - HeadKV is part of this module's API

MEDUSA_FILE = "medusa_lm_head.safetensors"
EAGLE_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
VOCAB_FILE = "draft_vocab.safetensors"  # {"ids": int64 [V'] sorted target ids}: the training sub-vocabulary


def _target_parts(target: Any) -> tuple[nn.Module, nn.Module]:
    """(output head [h -> V], input embedding [V -> h]) of a causal LM."""
    return target.get_output_embeddings(), target.get_input_embeddings()


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


# ----------------------------------------------------------------------------- checkpoints

def save_heads(head: nn.Module, folder: Path, meta: dict, vocab: torch.Tensor | None = None) -> Path:
    """Write `config.json` (public fields + "specbench": meta) and the head's safetensors; with
    `vocab` (sorted target ids [V']) also `draft_vocab.safetensors`, the draft vocabulary the
    methods use by default (the head was trained to rank tokens within it)."""
    from safetensors.torch import save_file

    folder = Path(folder).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in head.state_dict().items() if not k.startswith("rotary.")}
    cfg = {**head.config_dict(), "specbench": {**meta, "kind": head.kind, "layers": head.n_layers,
                                               "params": count_params(head)}}
    if head.kind == "medusa":
        cfg["specbench"]["heads"] = head.n_heads
    save_file(state, str(folder / (MEDUSA_FILE if head.kind == "medusa" else EAGLE_FILE)),
              metadata={"format": "pt"})
    if vocab is not None:
        save_file({"ids": vocab.detach().to(torch.long).contiguous().cpu()}, str(folder / VOCAB_FILE))
    atomic_write(folder / CONFIG_FILE, json.dumps(cfg, indent=2, default=str) + "\n")
    return folder


def load_draft_vocab(folder: Path) -> torch.Tensor | None:
    """Sorted target ids [V'] from `draft_vocab.safetensors`, or None when the folder has none;
    UsageError when the file is not a 1-D sorted, duplicate-free, non-negative id list."""
    from safetensors.torch import load_file

    path = Path(folder).expanduser() / VOCAB_FILE
    if not path.is_file():
        return None
    try:
        ids = load_file(str(path))["ids"]
    except Exception as e:  # noqa: BLE001 - any unreadable file is the user's input problem
        raise UsageError(f"{path}: not a draft vocabulary ({e})") from None
    if ids.dim() != 1 or ids.numel() == 0 or ids.dtype != torch.long or int(ids.min()) < 0 \
            or (ids.numel() > 1 and not bool((ids[1:] > ids[:-1]).all())):
        raise UsageError(f"{path}: 'ids' must be sorted distinct non-negative int64 token ids")
    return ids


# EAGLE config fields the head is built from: name -> (type, required)
EAGLE_FIELDS = {"hidden_size": (int, True), "intermediate_size": (int, True), "num_hidden_layers": (int, True),
                "num_attention_heads": (int, True), "vocab_size": (int, True), "num_key_value_heads": (int, False),
                "max_position_embeddings": (int, False), "rms_norm_eps": (float, False), "rope_theta": (float, False),
                "head_dim": (int, False)}


def read_heads_config(folder: Path) -> tuple[str, dict]:
    """(kind, config dict) of a heads folder; UsageError naming the file when it is not one
    (missing, not UTF-8, not a JSON object, a field of the wrong type)."""
    folder = Path(folder).expanduser()
    path = folder / CONFIG_FILE
    if not folder.is_dir():
        raise UsageError(f"heads folder not found: {folder}")
    if not path.is_file():
        raise UsageError(f"{folder} is not a heads folder (no {CONFIG_FILE})")
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"{path} is not valid JSON: {e}") from None
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}") from None
    if not isinstance(cfg, dict):
        raise UsageError(f"{path} must hold a JSON object, not {type(cfg).__name__}")
    if not isinstance(cfg.get("specbench", {}), dict):
        raise UsageError(f"{path}: 'specbench' must be an object")
    if not (folder / MEDUSA_FILE).is_file() and not (folder / EAGLE_FILE).is_file():
        pickled = [n for n in ("medusa_lm_head.pt", "pytorch_model.bin", "medusa_lm_head.bin") if (folder / n).is_file()]
        if pickled:
            raise UsageError(f"{folder} holds published pickled weights ({pickled[0]}); convert them once: "
                             f"specbench heads import {folder} --out DIR")
    if (folder / MEDUSA_FILE).is_file():
        return "medusa", cfg
    if (folder / EAGLE_FILE).is_file() and "num_hidden_layers" in cfg:
        eagle3 = "draft_vocab_size" in cfg
        fields = {**EAGLE_FIELDS, "draft_vocab_size": (int, True), "target_hidden_size": (int, False)} \
            if eagle3 else EAGLE_FIELDS
        for key, (typ, required) in fields.items():
            value = cfg.get(key)
            if value is None and not required:
                continue
            ok = isinstance(value, typ) or (typ is float and isinstance(value, int))
            if not ok or isinstance(value, bool) or not value > 0:
                raise UsageError(f"{path}: '{key}' must be a positive {typ.__name__}, got {json.dumps(value)}")
        if eagle3:
            layers = cfg.get("feature_layers")
            if layers is not None and not (isinstance(layers, list) and len(layers) == 3 and all(
                    isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in layers)):
                raise UsageError(f"{path}: 'feature_layers' must be three layer indices, got {json.dumps(layers)}")
            if cfg["num_hidden_layers"] != 1:
                raise UsageError(f"{path}: an EAGLE-3 head has one layer (num_hidden_layers 1), got "
                                 f"{cfg['num_hidden_layers']}")
            return "eagle3", cfg
        return "eagle", cfg
    raise UsageError(f"{folder} holds neither {MEDUSA_FILE} nor an EAGLE {EAGLE_FILE}")


def _medusa_layout(path: Path, found: dict) -> tuple[int, int, int, int | None]:
    """(hidden, heads, layers, own vocabulary or None) from Medusa keys: `{head}.{layer}.linear.*`
    (v2 / TGI), plus `{head}.{layers}.weight` [V, h] per head (Medusa-1's own projections)."""
    blocks, projections = [], []
    for key in found:
        parts = key.split(".")
        if len(parts) == 4 and parts[2] == "linear" and parts[0].isdigit() and parts[1].isdigit():
            blocks.append((int(parts[0]), int(parts[1])))
        elif len(parts) == 3 and parts[2] == "weight" and parts[0].isdigit() and parts[1].isdigit():
            projections.append((int(parts[0]), int(parts[1])))
        else:
            raise UsageError(f"{path}: tensor '{key}' is not a Medusa key ({{head}}.{{layer}}.linear.* or "
                             f"{{head}}.{{layers}}.weight)")
    if "0.0.linear.weight" not in found:
        raise UsageError(f"{path}: missing tensor '0.0.linear.weight'")
    hidden = found["0.0.linear.weight"][1][0]
    heads, layers = 1 + max(p[0] for p in blocks), 1 + max(p[1] for p in blocks)
    vocab = None
    if projections:
        if any(j != layers for _, j in projections):
            raise UsageError(f"{path}: tensor '{projections[0][0]}.{projections[0][1]}.weight' is not after the last "
                             f"block (Medusa-1 projections are {{head}}.{layers}.weight)")
        vocab = found[f"0.{layers}.weight"][1][0] if f"0.{layers}.weight" in found else None
        if vocab is None:
            raise UsageError(f"{path}: missing tensor '0.{layers}.weight'")
    return hidden, heads, layers, vocab


def _build(kind: str, cfg: dict, layout: tuple[int, int, int] | None) -> nn.Module:
    from transformers import LlamaConfig

    if kind == "medusa":
        hidden, n_heads, n_layers, vocab = layout
        return MedusaHeads(hidden, n_heads, n_layers, vocab)
    config = LlamaConfig(**{k: v for k, v in cfg.items() if k != "specbench"})
    if kind == "eagle3":
        from specbench_cli.methods.heads.eagle3 import Eagle3Head

        return Eagle3Head(config)
    return EagleHead(config)


def inspect_heads(folder: Path) -> tuple[str, dict]:
    """Check a heads folder without loading tensors: config typed, the weight file's bytes and
    header, every key and shape against the head its config describes. (kind, config)."""
    from specbench_cli.models.weights import check_state_shapes, safetensors_header

    folder = Path(folder).expanduser()
    kind, cfg = read_heads_config(folder)
    path = folder / (MEDUSA_FILE if kind == "medusa" else EAGLE_FILE)
    found = safetensors_header(path)
    layout = _medusa_layout(path, found) if kind == "medusa" else None
    try:
        with torch.device("meta"):
            module = _build(kind, cfg, layout)
    except (TypeError, ValueError) as e:
        raise UsageError(f"{folder / CONFIG_FILE}: does not describe a {kind} head ({str(e).splitlines()[0]})") from None
    state = {k: v for k, v in module.state_dict().items() if not k.startswith("rotary.")}
    expected = {k: v.shape for k, v in state.items()}
    dtypes = {k: ("BOOL", "U8") if v.dtype == torch.bool else ("I64", "I32")
              for k, v in state.items() if not v.dtype.is_floating_point}
    check_state_shapes(path, found, expected, ignore=("embed_tokens.", "rotary."), dtypes=dtypes)
    return kind, cfg


def load_heads(folder: Path, target: Any | None = None, dtype: torch.dtype = torch.float32) -> nn.Module:
    """Load a Medusa or EAGLE heads folder (safetensors + JSON only), bound to `target` if given.

    Medusa: the head and layer counts come from the tensor keys (public configs can lie about
    them); a v1 per-head vocabulary projection (`{i}.{K}.weight`) is refused here (v2 heads only;
    `specbench heads import` converts v1). Every key and shape is checked before any tensor loads.
    """
    from safetensors.torch import load_file

    folder = Path(folder).expanduser()
    kind, cfg = inspect_heads(folder)
    path = folder / (MEDUSA_FILE if kind == "medusa" else EAGLE_FILE)
    state = {k: v for k, v in load_file(str(path)).items() if not k.startswith("embed_tokens.")}
    layout = _medusa_layout(path, {k: (str(v.dtype), tuple(v.shape)) for k, v in state.items()}) \
        if kind == "medusa" else None
    head = _build(kind, cfg, layout)
    head.load_state_dict(state, strict=False)  # keys and shapes were checked by inspect_heads
    head.to(dtype).eval()
    head.meta = cfg.get("specbench", {})
    return head.bind(target) if target is not None else head
