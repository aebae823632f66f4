#!/usr/bin/env bash
# Downloads into <repo>/.whl-ref the wheels the qwen-tts==0.1.1 reference needs on the
# GPU machine (python 3.12, x86_64) beyond what it already has (torch, numpy, scipy,
# scikit-learn, numba, safetensors, einops, requests, psutil, hf-xet, ...), or has at a
# version the reference cannot use (transformers 5, tokenizers 0.23, huggingface_hub 1.x,
# accelerate 1.15). Versions are those of .venv-ref, where the reference is tested.
# On the GPU machine they go into their own directory, first on PYTHONPATH for the
# reference process only:
#   python3 -m pip install --no-index --no-deps --target /tmp/site-ref .whl-ref/*.whl
#   PYTHONPATH=/tmp/site-ref:tools/ref/stubs python3 -m bench.reference_qwen --model DIR ...
# Transfer: .whl-ref is git-ignored, so name it in the device run's carry (about 18 MB).
# Usage: tools/gpu/ref_wheels.sh [PYTHON_VERSION]   (default 3.12)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dest="$repo/.whl-ref"
pyver="${1:-3.12}"

wheels=(
    qwen-tts==0.1.1 # its declared deps (gradio, sox, onnxruntime, torchaudio) are stubbed
    transformers==4.57.3
    tokenizers==0.22.2
    huggingface_hub==0.36.2
    accelerate==1.12.0 # qwen-tts pins it
    librosa==0.11.0
    audioread==3.1.0
    decorator==5.3.1
    pooch==1.9.0
    platformdirs==4.14.9
    soxr==1.1.0
    soundfile==0.14.0
    cffi==2.1.1
    pycparser==3.12
)

mkdir -p "$dest"
# No constraints file: the pins above are the reference's, not this machine's.
PIP_CONSTRAINT="" python3 -m pip download --quiet --no-deps --only-binary=:all: \
    --python-version "$pyver" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 \
    -d "$dest" "${wheels[@]}" 2> >(grep -v "is ignored: it is neither" >&2)
ls -1 "$dest"
du -ch "$dest"/*.whl | tail -1
