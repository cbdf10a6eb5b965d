# syntax=docker/dockerfile:1
# Two images from one file (see docs/operator.md, "Images"):
#   docker build --target operator -t cudanalyst-operator:0.1.0 .
#   docker build --target runner   -t cudanalyst-runner:0.1.0 .
# Bases are pinned by digest (the tag is only a reminder); refresh both together when upgrading.
ARG PYTHON_BASE=python:3.11-slim-bookworm@sha256:b18992999dbe963a45a8a4da40ac2b1975be1a776d939d098c647482bcad5cba
ARG VLLM_BASE=vllm/vllm-openai:v0.14.0@sha256:1d6866b87630d94f5e0cdae55ab5abb4ce0b03fcb84d9d10612f9d518d19d4fd

############################## the operator: slim, Kubernetes only, no GPU or vLLM code
FROM ${PYTHON_BASE} AS operator-build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY src ./src
COPY operator ./operator
# The runner's source root (runner/) is not copied: the import below then proves the operator needs none of it.
RUN python -m venv /opt/cudanalyst \
 && /opt/cudanalyst/bin/pip install ".[operator]" \
 && /opt/cudanalyst/bin/python -c "import cudanalyst.operator.main"

FROM ${PYTHON_BASE} AS operator
COPY --from=operator-build /opt/cudanalyst /opt/cudanalyst
ENV PATH=/opt/cudanalyst/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
# Non-root, numeric so that runAsNonRoot can verify it; the chart also mounts the root read-only.
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["cudanalyst-operator"]

############################## the runner: vLLM's OpenAI server image + pycuda + this package
# The vLLM image is CUDA "devel" based: nvcc, headers and the libcuda stub for building pycuda are there.
FROM ${VLLM_BASE} AS runner-build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 CUDA_ROOT=/usr/local/cuda
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY src ./src
COPY runner ./runner
# The operator's source root (operator/) is not copied: no kopf code in this image.
RUN python3 -m pip wheel --no-deps --wheel-dir /wheels "pycuda>=2024.1" . \
 && ls /wheels

FROM ${VLLM_BASE} AS runner
COPY --from=runner-build /wheels /tmp/wheels
# vLLM and torch stay as the base image has them; only our package, its runner and gpu extras are added.
# Bytecode for every installed module, written now: vLLM's image ships none (vLLM's PR 55422), and at run time
# PYTHONDONTWRITEBYTECODE keeps a pod from writing any, so each server start (its API server and its engine
# process) would compile vLLM, torch and the rest from source again (docs/performance.md: 26 s against 12 s for
# the API server's imports on two cores). `|| true`: a few third-party files are not Python by design (test data);
# they keep importing from source, and the import check below still has to pass.
RUN python3 -m pip install --no-cache-dir --find-links /tmp/wheels "cudanalyst[runner,gpu]" \
 && rm -rf /tmp/wheels \
 && (python3 -m compileall -q -j 0 $(python3 -c "import site; print(*site.getsitepackages())") > /dev/null || true) \
 && python3 -c "import pycuda, vllm, cudanalyst.runner" \
 && useradd --uid 1000 --create-home --shell /usr/sbin/nologin runner
ENV HOME=/home/runner PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 HF_HUB_OFFLINE=1
USER 1000:1000
WORKDIR /home/runner
ENTRYPOINT ["cudanalyst-runner"]
