#!/usr/bin/env bash
# Creates the Chatterbox reference environment (.venv-ref-chatterbox) that runs
# chatterbox-tts==0.1.7 for parity tests, kept apart from .venv: its pins conflict
# with ours. Idempotent: an environment whose marker matches these pins is left alone.
# Usage: tools/ref/chatterbox/make_venv.sh [VENV_DIR]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
venv="${1:-$repo/.venv-ref-chatterbox}"
python="${PYTHON:-python3}"

# Bump when any pin below changes, so old environments are rebuilt.
pins="torch==2.13.0 torchaudio==2.11.1 transformers==5.2.0 diffusers==0.29.0 conformer==0.3.2 s3tokenizer==0.3.0 chatterbox-tts==0.1.7 v2"
marker="$venv/.voiceserver-ref-pins"

if [[ -f "$marker" && "$(cat "$marker")" == "$pins" ]] \
    && PYTHONPATH="$here/stubs" "$venv/bin/python" -c "import chatterbox.tts_turbo, torchaudio.compliance.kaldi" \
        >/dev/null 2>&1; then
    echo "chatterbox reference env up to date: $venv"
    exit 0
fi

rm -rf "$venv"
"$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install --disable-pip-version-check -q --no-warn-script-location)
# torch first and pinned: the CPU build lies on disk (the reference pins 2.6, a CUDA build
# of gigabytes; the modules it uses behave the same on 2.13).
"${pip[@]}" torch==2.13.0
"${pip[@]}" torch==2.13.0 "numpy<2" transformers==5.2.0 diffusers==0.29.0 conformer==0.3.2 \
    safetensors librosa==0.11.0 omegaconf pyloudnorm einops onnx tqdm
# resemble-perth (the watermark: parity is taken before it), gradio, spacy-pkuseg and
# pykakasi (other models) are left out: stubs stand in.
"${pip[@]}" --no-deps s3tokenizer==0.3.0 chatterbox-tts==0.1.7
# torchaudio: the oracle for the clone path's Kaldi filterbank (CAM++'s input) and 24 -> 16 kHz
# resampling, both pure Python over torch. No build targets torch 2.13; PyPI's 2.11.1 wheel
# asks only torch>=2.11, but its compiled ops are a CUDA build (they need libc10_cuda.so,
# which the CPU torch lacks) and torchaudio refuses to import when they fail to load. With
# the libraries removed it imports with its extension off (its own path for a missing
# library), and compliance.kaldi and transforms.Resample never touch them.
"${pip[@]}" --no-deps torchaudio==2.11.1
site="$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")"
rm -f "$site"/torchaudio/lib/*.so
"$venv/bin/python" -c "import torchaudio.compliance.kaldi, torchaudio.transforms" \
    || { echo "torchaudio does not import in $venv" >&2; exit 1; }
echo "$pins" >"$marker"
echo "chatterbox reference env ready: $venv"
