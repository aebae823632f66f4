"""Stand-in for torchaudio: qwen-tts imports it only for the 25 Hz tokenizer, never used here."""
