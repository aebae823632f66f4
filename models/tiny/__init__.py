"""A random-init CPU model behind the real interfaces, for fast engine tests."""
