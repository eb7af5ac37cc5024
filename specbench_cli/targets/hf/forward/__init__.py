"""How the target computes a forward: sdpa, eager, short (few-token attention) and lean (the fused Llama decoder)."""
