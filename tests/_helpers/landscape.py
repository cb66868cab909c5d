"""The racing landscape: five configurations of the small space, run in this order against an incumbent, and their
true means. Shared by the racing, planning, sequential, verification and paired-verdict tests."""

INCUMBENT = {"cudagraph_mode": "PIECEWISE", "capture_sizes": "tiny", "num_speculative_tokens": 0}
WORSE = {"cudagraph_mode": "NONE", "num_speculative_tokens": 0}
CLOSE = {"cudagraph_mode": "FULL_AND_PIECEWISE", "capture_sizes": "tiny", "num_speculative_tokens": 0}
BEHIND = {"cudagraph_mode": "PIECEWISE", "capture_sizes": "tiny", "num_speculative_tokens": 1, "draft": "ngram"}
BETTER = {"cudagraph_mode": "FULL_AND_PIECEWISE", "capture_sizes": "tiny", "num_speculative_tokens": 1,
          "draft": "ngram"}
#: True means by (mode, K), run in this order against a 100 tok/s incumbent: a clearly worse challenger, a close
#: one just ahead (101), one just behind the new incumbent (100), and a clearly better one.
TRUTH = {("PIECEWISE", 0): 100.0, ("NONE", 0): 40.0, ("FULL_AND_PIECEWISE", 0): 101.0, ("PIECEWISE", 1): 100.0,
         ("FULL_AND_PIECEWISE", 1): 250.0, ("default", 0): 90.0}
ORDER = [INCUMBENT, WORSE, CLOSE, BEHIND, BETTER]
