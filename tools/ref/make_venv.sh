#!/usr/bin/env bash
# Creates the reference environment (.venv-ref) that runs qwen-tts==0.1.1 for parity tests.
# Idempotent: an environment whose marker matches these pins is left alone.
# Usage: tools/ref/make_venv.sh [VENV_DIR]   (default: <repo>/.venv-ref)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv="${1:-$repo/.venv-ref}"
python="${PYTHON:-python3}"

# Bump when any pin below changes, so old environments are rebuilt.
pins="torch==2.13.0 transformers==4.57.3 accelerate==1.12.0 qwen-tts==0.1.1 tokenizers==0.22.2 huggingface_hub==0.36.2 v1"
marker="$venv/.voiceserver-ref-pins"

# qwen_tts imports modules the stubs stand in for (see run_reference.py).
if [[ -f "$marker" && "$(cat "$marker")" == "$pins" ]] \
    && PYTHONPATH="$here/stubs" "$venv/bin/python" -c "import qwen_tts" >/dev/null 2>&1; then
    echo "reference env up to date: $venv"
    exit 0
fi

rm -rf "$venv"
"$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install --disable-pip-version-check -q --no-warn-script-location)
# torch first and pinned: the CPU build lies on disk; an unpinned torch would pull a CUDA build.
"${pip[@]}" torch==2.13.0
"${pip[@]}" transformers==4.57.3 accelerate==1.12.0 tokenizers==0.22.2 huggingface_hub==0.36.2 \
    einops librosa soundfile torch==2.13.0
# qwen-tts pins gradio/torchaudio/sox/onnxruntime that the 12 Hz path never uses: stubs stand in.
"${pip[@]}" --no-deps qwen-tts==0.1.1
echo "$pins" >"$marker"
echo "reference env ready: $venv"
