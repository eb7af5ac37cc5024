"""Draft models for speculative sampling: subclone or scratch, distillation data, KLD/TVD/TVD++ fine-tuning, evaluation."""
