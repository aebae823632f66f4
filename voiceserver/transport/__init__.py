"""Thin I/O adapters between sockets and the sans-I/O protocol."""
