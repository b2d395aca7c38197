"""Hyperparameter tuning jobs: the request's parameter ranges, the search strategies, the trials' names."""
