"""Loading targets and drafters (aliases, Hugging Face folders, GGUF via a safetensors cache) and chat prompting."""
