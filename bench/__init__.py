"""Load generation and reports for the voice server (run ``python -m bench.loadgen``)."""
