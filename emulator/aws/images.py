"""Which local image runs a job whose request names an ECR image.

A framework estimator without `image_uri` (`PyTorch(framework_version=..., py_version=...)`) asks the
SDK for the AWS Deep Learning Container of that framework, an ECR name such as
`763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.1.0-gpu-py310`. No registry is
reachable here, so such names map to local images through a table: a key is a whole image name, a
repository (`pytorch-training`), or a repository and tag (`pytorch-training:2.1.0-gpu-py310`); the
most specific key wins, and `*` stands for every other ECR image. The default table sends AWS's
PyTorch training images to the project's PyTorch variant (`hetero-emu image build --variant pytorch`:
PyTorch and the sagemaker-pytorch-training toolkit, so `torch_distributed` runs torchrun as there) and
every other ECR image to the project's training image (`hetero-emu image build`), which carries the
real sagemaker-training toolkit the framework images run. A name that is not an ECR name is a local
image already and is used as it is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from emulator.defaults import DEFAULT_IMAGE, PYTORCH_IMAGE

# <account>.dkr.ecr.<region>.amazonaws.com[.cn]/<repository>[:tag|@digest]
ECR_NAME = re.compile(r"(?P<registry>\d{12}\.dkr\.ecr(-fips)?\.[a-z0-9-]+\.amazonaws\.com(\.cn)?)/"
                      r"(?P<repository>[^:@]+)(?P<reference>[:@].+)?")
# The repositories of the SDK's PyTorch training images (sagemaker/image_uri_config/pytorch.json,
# pytorch-training-compiler.json, pytorch-smp.json): each runs sagemaker_pytorch_container.training:main.
PYTORCH_REPOSITORIES = ("pytorch-training", "sagemaker-pytorch", "pytorch-trcomp-training",
                        "smdistributed-modelparallel")
DEFAULT_IMAGE_MAP: Mapping[str, str] = {"*": DEFAULT_IMAGE, **{repo: PYTORCH_IMAGE for repo in PYTORCH_REPOSITORIES}}


def local_image(name: str, table: Mapping[str, str]) -> str:
    """The local image that runs for `name` (see the module's doc for the table's keys)."""
    match = ECR_NAME.fullmatch(name)
    if match is None:
        return name
    repository = match["repository"]
    tag = (match["reference"] or ":latest").lstrip(":")
    for key in (name, f"{repository}:{tag}", repository, "*"):
        if key in table:
            return table[key]
    return name
