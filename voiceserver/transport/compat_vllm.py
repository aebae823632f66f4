"""Placeholder until the real handler lands (being written now)."""


async def vllm_speech_stream(request):  # type: ignore[no-untyped-def]
    raise NotImplementedError
