"""Plain HTTP routes."""
