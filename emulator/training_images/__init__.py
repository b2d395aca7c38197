"""The training images: which local image stands for a framework or Hugging Face version, the recipes
of images/, the launchers an image carries for a distribution, building ahead what a job would run."""
