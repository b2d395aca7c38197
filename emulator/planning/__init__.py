"""The job plan and the files it gives each host: the plan, the /opt/ml contract, one container per
host, the compose project, what each instance type gives a host here."""
