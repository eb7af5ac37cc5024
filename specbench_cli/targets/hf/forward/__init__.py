"""How the target computes a forward: sdpa, eager, short (few-token attention) lean (the fused Llama decoder) and native (lean with its short blocks in C)."""
