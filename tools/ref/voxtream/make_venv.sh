#!/usr/bin/env bash
# Creates the VoXtream2 reference environment (.venv-ref-voxtream) that runs voxtream==0.2.5
# (its SpeechGenerator, text front end and Mimi through moshi) for parity tests, kept apart
# from .venv. voxtream pins torch<2.9 (a CUDA build of ~3.9 GB: PyPI has no CPU build of
# 2.4-2.8 for Linux); the modules it runs on CPU in fp32 behave the same on the CPU build of
# torch 2.13 that lies on disk, so it goes in with --no-deps plus only what its inference
# path imports; stubs (tools/ref/voxtream/stubs, on PYTHONPATH) stand in for modules it
# imports and never calls there (g2p_en, bitsandbytes, sounddevice, sphn, datasets).
# Idempotent: an environment whose marker matches these pins is left alone.
# Usage: tools/ref/voxtream/make_venv.sh [VENV_DIR]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
venv="${1:-$repo/.venv-ref-voxtream}"
python="${PYTHON:-python3}"

# Bump when any pin below changes, so old environments are rebuilt.
pins="torch==2.13.0 torchaudio==2.11.1 voxtream==0.2.5 torchtune==0.4.0 torchao==0.9.0 moshi==0.2.13 silero-vad==6.2.0 transformers==4.57.6 regex==2026.11.19 v2"
marker="$venv/.voiceserver-ref-pins"
probe="import voxtream.generator, voxtream.utils.text.normalizer, moshi.models.loaders"

if [[ -f "$marker" && "$(cat "$marker")" == "$pins" ]] \
    && PYTHONPATH="$here/stubs" "$venv/bin/python" -c "$probe" >/dev/null 2>&1; then
    echo "voxtream reference env up to date: $venv"
    exit 0
fi

rm -rf "$venv"
"$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install --disable-pip-version-check -q --no-warn-script-location)
"${pip[@]}" torch==2.13.0
"${pip[@]}" torch==2.13.0 "numpy<2.3" safetensors "huggingface_hub==0.36.2" "einops<0.9" tqdm \
    omegaconf psutil Pillow sentencepiece tiktoken blobfile "aiohttp<3.12" inflect==7.5.0 \
    nltk==3.9.1 regex==2026.11.19 six packaging soundfile==0.13.1 pyloudnorm==0.2.0 transformers==4.57.6 \
    "setuptools<81"
"${pip[@]}" --no-deps voxtream==0.2.5 torchtune==0.4.0 torchao==0.9.0 moshi==0.2.13 \
    silero-vad==6.2.0
# torchaudio: voxtream imports it (Resample, load). No build targets torch 2.13; PyPI's 2.11.1
# wheel's compiled ops are a CUDA build (they need libc10_cuda.so, which the CPU torch lacks).
# With the libraries removed it imports with its extension off; Resample and the mel
# transforms are pure Python over torch.
"${pip[@]}" --no-deps torchaudio==2.11.1
site="$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")"
rm -f "$site"/torchaudio/lib/*.so
PYTHONPATH="$here/stubs" "$venv/bin/python" -c "$probe" \
    || { echo "voxtream does not import in $venv" >&2; exit 1; }
echo "$pins" >"$marker"
echo "voxtream reference env ready: $venv"
