"""Hyperparameter tuning jobs: the request checked by the service's rules, its parameter ranges, the
search strategies that propose trials, the trials' names."""
