"""Reporting: the results document and its renderings (terminal, markdown, HTML, plots, progress)."""
