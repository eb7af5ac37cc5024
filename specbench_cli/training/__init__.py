"""Training recipes: drafters (subclone, scratch, distillation), heads (Medusa/EAGLE/KOALA), SFT and MSN. Modules import torch lazily."""
