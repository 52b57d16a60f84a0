"""Per-frame processing stages."""
