"""The engine: one thread per device driving the AR model and the vocoder."""
