"""The training images: which local image stands for a framework or Hugging Face version, the recipes
of images/, building ahead what a job would run."""
