"""The jobs layer: a training job's one record, as the service describes it, beneath every front end."""
