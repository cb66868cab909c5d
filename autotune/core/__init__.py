"""The vocabulary every package shares: the frozen records a trial flows through, credential redaction, exit
statuses. It imports nothing else of autotune."""
