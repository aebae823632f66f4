"""Placeholder until the real handler lands (being written now)."""


async def list_voices(request):  # type: ignore[no-untyped-def]
    raise NotImplementedError
