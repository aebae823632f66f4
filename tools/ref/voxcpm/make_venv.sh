#!/usr/bin/env bash
# Creates the VoxCPM2 reference environment (.venv-ref-voxcpm) that runs voxcpm==2.0.3 (its
# VoxCPM pipeline, VoxCPM2Model and AudioVAE V2) for parity tests, kept apart from .venv.
# voxcpm asks for torchaudio, gradio, modelscope, funasr, datasets and more that only its web
# demo, denoiser, training and v1 model use; it goes in with --no-deps plus only what its
# VoxCPM2 inference path imports, on the CPU build of torch 2.13 that lies on disk. A stub
# (tools/ref/voxcpm/stubs, on PYTHONPATH) stands in for torchaudio, imported and never called.
# Pinned exactly where the reference's output depends on them: transformers and tokenizers
# (transformers 5 rebuilds the tokenizer's pipeline itself, so its version decides the ids),
# librosa, soundfile and soxr (how a prompt clip is read and resampled to 16 kHz); these are
# the versions of upstream's own lock file (uv.lock of the 2.0.3 sdist).
# Idempotent: an environment whose marker matches these pins is left alone.
# Usage: tools/ref/voxcpm/make_venv.sh [VENV_DIR]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
venv="${1:-$repo/.venv-ref-voxcpm}"
python="${PYTHON:-python3}"

# Bump when any pin below changes, so old environments are rebuilt.
pins="torch==2.13.0 voxcpm==2.0.3 transformers==5.3.0 tokenizers==0.22.2 huggingface_hub==1.3.0 librosa==0.11.0 soxr==1.0.0 soundfile==0.13.1 numpy==2.4.6 v1"
marker="$venv/.voiceserver-ref-pins"
probe="import voxcpm, voxcpm.model.voxcpm2, transformers, librosa"

if [[ -f "$marker" && "$(cat "$marker")" == "$pins" ]] \
    && PYTHONPATH="$here/stubs" "$venv/bin/python" -c "$probe" >/dev/null 2>&1; then
    echo "voxcpm reference env up to date: $venv"
    exit 0
fi

rm -rf "$venv"
"$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install --disable-pip-version-check -q --no-warn-script-location)
"${pip[@]}" torch==2.13.0
"${pip[@]}" torch==2.13.0 numpy==2.4.6 transformers==5.3.0 tokenizers==0.22.2 \
    huggingface_hub==1.3.0 librosa==0.11.0 soxr==1.0.0 soundfile==0.13.1 numba==0.68.1 \
    einops==0.8.2 "pydantic>=2,<3" tqdm safetensors==0.8.0
"${pip[@]}" --no-deps voxcpm==2.0.3
PYTHONPATH="$here/stubs" "$venv/bin/python" -c "$probe" \
    || { echo "voxcpm does not import in $venv" >&2; exit 1; }
echo "$pins" >"$marker"
echo "voxcpm reference env ready: $venv"
