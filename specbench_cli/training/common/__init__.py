"""What every trainer shares: the loop, the LR schedule, checkpoints, output folders."""
