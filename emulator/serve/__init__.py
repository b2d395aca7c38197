"""`hetero-emu serve`: the AWS endpoint and the live page of each job, on one HTTP port."""
