"""Hyperparameter tuning jobs: the request, its parameter ranges and the strategies that propose trials."""
