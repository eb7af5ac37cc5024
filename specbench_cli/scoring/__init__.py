"""Answer quality: GSM8K exact match, HumanEval pass@1, and the sandbox model-written code runs in."""
