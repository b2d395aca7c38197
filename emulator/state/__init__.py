"""What outlives a run on this machine: the state folder, the record of jobs, and whether the code running may wait."""
