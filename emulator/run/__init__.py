"""The run and its features: the service's lifecycle over an engine, the job folder, artifacts,
attempts, checkpoints, Pipe mode, the debuggers, AWS inside a job, warm pools, wheelhouses, logs and
metrics; and building ahead, on an engine's images, the image a job will run (prebuild)."""
