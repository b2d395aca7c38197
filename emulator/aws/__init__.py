"""The AWS APIs a SageMaker user's code calls (SageMaker training jobs, S3, STS), answered locally
inside botocore (`emulator.aws.stub`): the SDK's session and plain boto3 code run unchanged and nothing
is sent to AWS."""
