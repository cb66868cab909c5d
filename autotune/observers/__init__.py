"""Observers of a running study: the progress bar and MLflow."""
