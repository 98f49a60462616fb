"""Deciding: statistics, baselines, gates, and the tools that compare or recommend from results."""
