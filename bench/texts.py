"""The built-in texts: English sentences whose first ten words form a clause ending in a
comma, with no punctuation before it, so the server's segmenter cannot start the first
clause before the client's flush does."""

from __future__ import annotations

import re

FIRST_CLAUSE_WORDS = 10

SENTENCES: tuple[str, ...] = (
    "The morning train to the city was running quite late, so I grabbed a coffee "
    "and watched the rain drift across the empty platform.",
    "Your order has shipped and should arrive by Thursday afternoon, and you can track "
    "the package from the link in your confirmation email.",
    "The weekly team meeting has been moved to three today, which leaves us about an "
    "hour to finish the slides before everyone joins.",
    "Thanks for calling the support line about your internet connection, I can see "
    "that your router restarted twice during the night.",
    "If you turn left at the second set of lights, the museum entrance is on your "
    "right just past the little bakery.",
    "Most people underestimate how much water they need each day, especially when the "
    "weather turns hot and they spend hours outside.",
    "The recipe calls for two cups of flour and butter, but you can swap in olive oil "
    "if you want a lighter version.",
    "Our flight lands in Chicago a little after six tonight, so please save us some "
    "dinner and leave the porch light on.",
    "Before we start I want to thank everyone for coming, because this quarter was "
    "harder than any of us expected.",
    "The forecast says the storm will reach the coast tonight, and officials are asking "
    "residents to stay indoors until morning.",
)


def word_pieces(text: str) -> list[str]:
    """Word-sized pieces, each with its trailing whitespace, that join back into ``text``
    (what an LLM's token stream looks like, give or take sub-word splits)."""
    return re.findall(r"\S+\s*|\s+", text)


def text_for(request_index: int) -> str:
    return SENTENCES[request_index % len(SENTENCES)]
