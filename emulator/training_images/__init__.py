"""The training images: which local image stands for a framework or Hugging Face version, which
local image runs for an ECR image name, the recipes of images/. Pure: no engine is asked."""
