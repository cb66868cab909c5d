"""Numbers from restarts: intervals and comparisons, latency against limits, the cold-start test. Pure functions."""
