"""Benchmarks of the tuner on the simulator's ground truth: strategies, interval coverage, worker scaling."""
