"""Inference engines (llama.cpp, vLLM, any OpenAI-compatible server): finding them, starting and
stopping their servers, and reading what they report. The engine *targets* (specbench's drafters
verified by an engine's forward) live in targets/; the engines' own speculation is run
as methods named `ENGINE:METHOD`."""
