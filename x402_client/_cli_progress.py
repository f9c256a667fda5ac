"""Moved to the public `x402_client.progress`; kept so old imports keep working."""

from __future__ import annotations

from .progress import ProgressDisplay, bridge_progress_display

__all__ = ["ProgressDisplay", "bridge_progress_display"]
