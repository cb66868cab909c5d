"""What a study stores and how workers share it: the ledger (every stored key), claims, heartbeats, the study's
directory and its fingerprint. The only package that touches Optuna's storage internals."""
