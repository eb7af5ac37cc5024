"""Everything reports show, rebuilt from result files alone: metrics, tables, renderers, plots, baseline/check, export."""
