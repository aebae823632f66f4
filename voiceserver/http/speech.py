"""Placeholder until the real handler lands (being written now)."""


async def speech(request):  # type: ignore[no-untyped-def]
    raise NotImplementedError
