"""The training images: which local image stands for a framework or Hugging Face version, which
local image runs for an ECR image name, the recipes of images/, the launchers an image carries for a
distribution. Pure: no engine is asked."""
