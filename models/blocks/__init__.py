"""Shared model blocks: what more than one family is built from.

- :mod:`models.blocks.llama`: the Llama/Qwen2/Qwen3-style decoder (RMSNorm, rotary
  positions, grouped-query attention with optional q/k norms, SwiGLU), module names
  as Hugging Face checkpoints spell them (Qwen3-TTS's talker and code predictor);
- :mod:`models.blocks.gpt2`: the GPT-2 decoder (learned positions, LayerNorm, fused
  QKV, GELU MLP), names as GPT-2 checkpoints spell them (Chatterbox's T3);
- :mod:`models.blocks.paged`: the decoder layer loop over the paged KV cache, for a
  prompt (padded rows) and for one position per row (graph-capturable), shared by
  both decoders;
- :mod:`models.blocks.flow`: a conditional (mean-)flow-matching mel decoder over
  speech tokens (CosyVoice's lineage: Chatterbox's S3Gen flow);
- :mod:`models.blocks.hift`: HiFT, a neural-source-filter iSTFT vocoder, mel ->
  24 kHz (S3Gen's ``mel2wav``);
- :mod:`models.blocks.dac`: Fish Speech's modded DAC codec (causal convolutions,
  window-limited transformers, a semantic + residual quantizer), 44.1 kHz audio <->
  10 codes per 2048 samples (S2 Pro's ``codec.pth``), with ``dac_conv``, ``dac_rvq``
  and ``dac_transformer`` beside it;
- :mod:`models.blocks.mimi`: Kyutai's Mimi codec (SEANet, a 250-step causal
  transformer, a split residual quantizer), 24 kHz audio <-> 12.5 frames a second,
  loaded from Kyutai's file; ``mimi_stream`` keeps streamed decoding's state in slot
  tables and ``mimi_vocoder`` serves it as a batched, exact streaming ``Vocoder``
  (VoXtream2's codec);
- :mod:`models.blocks.redimnet`: IDRnD's ReDimNet speaker encoder (16 kHz audio ->
  an embedding), built from its ``.pt`` file's ``model_config`` (VoXtream2's clones).
"""
