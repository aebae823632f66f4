"""Per-connection session runtime."""
