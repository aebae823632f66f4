"""Piper (VITS) voices, split at the decoder input so they stream."""
