# GPU test image: the package with its Bayesian-optimisation extra on a CUDA build of PyTorch (which
# ships Triton). By default it runs the GPU test suite; see docs/docker.md.
ARG BASE_IMAGE=pytorch/pytorch:2.9.0-cuda12.8-cudnn9-runtime
FROM ${BASE_IMAGE}

# Triton compiles its kernel launchers with the host C compiler at run time. (SMAC 2.4+, the `bo`
# extra, is pure Python: no SWIG or pyrfr build is needed.)
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/triton_dejavu_like
COPY pyproject.toml README.md ./
COPY triton_dejavu_like ./triton_dejavu_like
# torch and triton come from the base image: pip keeps them, as they satisfy the requirements.
RUN python -m pip install --no-cache-dir ".[bo,test]"
COPY tests ./tests
COPY examples ./examples

CMD ["python", "-m", "pytest", "-m", "gpu", "-q", "tests"]
