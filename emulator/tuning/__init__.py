"""Hyperparameter tuning jobs: the request checked by the service's rules, its parameter ranges, the
search strategies that propose trials and the rules that stop them, the trials as training jobs
(their requests, objectives and counters), the service's five operations and the loop that runs one
tuning job (docs/tuning.md)."""
