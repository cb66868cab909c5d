"""The rules a study decides by, as pure functions over measurements: racing, and verification of the best
configurations against the baseline."""
