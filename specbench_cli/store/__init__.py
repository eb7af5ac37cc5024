"""The result format: the sample row type, the run folder (manifest + samples), its lock."""
