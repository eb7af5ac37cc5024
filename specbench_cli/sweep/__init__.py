"""`specbench sweep`: grids of models x method sets x block complexities x dtypes x task shards,
run as `specbench run` jobs here or on a Ray cluster and merged with `specbench report`."""
