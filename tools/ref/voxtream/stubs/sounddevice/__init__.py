"""Stand-in: imported at module level by moshi; the reference path never calls it."""
