"""The progress line on an interactive terminal (never in CI logs, pipes or xdist workers)."""

from __future__ import annotations

import pytest

from specguard.measure.progress import ProgressEvent, RunStarted
from specguard.report.progress import SweepProgress, progress_text


class LiveLine:
    """Written past pytest's output capture, over the current terminal line, which is restored
    when the cell is done so pytest's own progress output stays intact."""

    def __init__(self, config: pytest.Config, progress: SweepProgress) -> None:
        self.tw = config.get_terminal_writer()
        self.capman = config.pluginmanager.getplugin("capturemanager")
        self.progress = progress

    def __call__(self, event: ProgressEvent) -> None:
        if isinstance(event, RunStarted):  # the time left counts runs; other events only show
            self.progress.run_started()
        width = max(self.tw.fullwidth - 1, 20)
        self._write("\r" + self.progress.line(progress_text(event))[:width].ljust(width))

    def clear(self) -> None:
        width = max(self.tw.fullwidth - 1, 20)
        self._write("\r" + " " * width + "\r" + getattr(self.tw, "_current_line", ""))

    def _write(self, text: str) -> None:
        if self.capman is None:
            self.tw.write_raw(text, flush=True)
            return
        with self.capman.global_and_fixture_disabled():
            self.tw.write_raw(text, flush=True)
