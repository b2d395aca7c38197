"""What a valid spec allows but probably does not mean: warnings, not errors, since the service runs
such a job too. `validate`, `render` and `run` print them (docs/spec.md, Warnings).

- A ShardedByS3Key channel with fewer files than the hosts it reaches: the service gives each host a
  share of the keys, so some hosts get an empty channel folder and a script that expects data fails
  there (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_S3DataSource.html,
  S3DataDistributionType: "some of the instances may not receive any data").
- A channel or the distribution aimed at an instance group of instance_count 0: that group has no
  host, so the channel reaches no one there, and a distribution names a group that launches nothing.
- Managed spot training without a checkpoint URI: the service allows it, but an interrupted job
  starts again from zero ("If you don't use checkpoints, the training job restarts from the
  beginning", https://docs.aws.amazon.com/sagemaker/latest/dg/model-managed-spot-training.html).
"""

from __future__ import annotations

from emulator.errors import Problem
from emulator.jobspec.model import JobSpec


def spec_warnings(spec: JobSpec) -> list[Problem]:
    """The warnings of a checked spec, in field order (each a Problem: path, message, hint)."""
    counts = {g.instance_group_name: g.instance_count for g in spec.instance_groups}
    found: list[Problem] = []
    for name, channel in spec.inputs.items():
        path = f"inputs.{name}"
        empty = [g for g in channel.instance_groups if counts.get(g) == 0]
        for group in empty:
            found.append(Problem(f"{path}.instance_groups", f"instance group {group!r} has instance_count 0: "
                                 "no host of it receives this channel",
                                 "give the group hosts, or leave it out of the channel's instance_groups"))
        hosts = sum(counts.get(g, 0) for g in channel.instance_groups or counts)
        files = len(channel.files)
        if channel.distribution == "ShardedByS3Key" and 0 < files < hosts:
            left = hosts - files
            found.append(Problem(path, f"ShardedByS3Key over {hosts} hosts but only {files} "
                                 f"file{'s' if files != 1 else ''}: {left} host{'s get' if left != 1 else ' gets'} "
                                 "no file", "split the data into at least as many files as hosts, or use "
                                 "FullyReplicated"))
    if spec.distribution is not None:
        for group in spec.distribution.instance_groups:
            if counts.get(group) == 0:
                found.append(Problem("distribution.instance_groups", f"instance group {group!r} has "
                                     "instance_count 0: the distribution launches on no host",
                                     "give the group hosts, or aim the distribution at another group"))
    if spec.use_spot_instances and spec.checkpoint_s3_uri is None:
        found.append(Problem("use_spot_instances", "managed spot training without checkpoint_s3_uri: an "
                             "interrupted job starts again from zero", "give checkpoint_s3_uri and have the "
                             "script save to /opt/ml/checkpoints and resume from what it finds there"))
    return found
