"""Chat-model clients: one async interface, providers behind it (issue #3)."""
