"""Qwen3-TTS (CustomVoice, VoiceDesign, Base) from an unmodified Hugging Face checkpoint."""
