"""What the user writes: the search space (YAML -> Optuna parameters -> ``EngineConfig``) and the workload."""
