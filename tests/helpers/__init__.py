"""Shared test fixtures: tiny models built in the test, run folders, the in-process CLI."""
