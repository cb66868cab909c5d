"""Helpers the test modules share (no test module imports another): the racing landscape, the command line run
in-process, a tracked study, the fault-injection and transient runs, process waits. Fixtures live in
``tests/conftest.py``."""
