"""Stand-in for torchaudio (no build exists for our torch): imported by chatterbox's S3Gen
and by s3tokenizer; the parts the parity tests call are given by the runner."""
