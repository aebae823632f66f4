"""Stand-in: voxtream's optional speech enhancement (Sidon) imports it at module level;
``enhance_prompt`` is off in the configs the bench runs."""
