#!/usr/bin/env bash
# Creates the Fish Speech reference environment (.venv-ref-fish) that runs fish-speech==0.1.0
# (its DualARTransformer and modded DAC) for parity tests, kept apart from .venv: the package
# pins numpy<=1.26.4 and pulls gradio, lightning, wandb ... which its inference classes never
# import, so it goes in with --no-deps plus only what those classes import.
# Idempotent: an environment whose marker matches these pins is left alone.
# Usage: tools/ref/fish_speech/make_venv.sh [VENV_DIR]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
venv="${1:-$repo/.venv-ref-fish}"
python="${PYTHON:-python3}"

# Bump when any pin below changes, so old environments are rebuilt.
pins="torch==2.13.0 torchaudio==2.11.1 fish-speech==0.1.0 descript-audio-codec==1.0.0 descript-audiotools==0.7.2 v1"
marker="$venv/.voiceserver-ref-pins"
probe="import fish_speech.models.text2semantic.llama, fish_speech.models.dac.modded_dac, fish_speech.models.dac.rvq"

if [[ -f "$marker" && "$(cat "$marker")" == "$pins" ]] && "$venv/bin/python" -c "$probe" >/dev/null 2>&1; then
    echo "fish-speech reference env up to date: $venv"
    exit 0
fi

rm -rf "$venv"
"$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install --disable-pip-version-check -q --no-warn-script-location)
# torch first and pinned: the CPU build lies on disk (the reference asks torch>=2.5.1).
"${pip[@]}" torch==2.13.0
"${pip[@]}" torch==2.13.0 "numpy<2" einops loguru tiktoken loralib hydra-core omegaconf soundfile \
    librosa transformers safetensors flatten_dict julius ffmpy importlib_resources tensorboard \
    randomname argbind
"${pip[@]}" --no-deps fish-speech==0.1.0 descript-audio-codec==1.0.0 descript-audiotools==0.7.2
# torchaudio: audiotools imports it at module level. No build targets torch 2.13; PyPI's 2.11.1
# wheel's compiled ops are a CUDA build (they need libc10_cuda.so, which the CPU torch lacks).
# With the libraries removed it imports with its extension off, and nothing the reference's
# inference classes run touches them.
"${pip[@]}" --no-deps torchaudio==2.11.1
site="$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")"
rm -f "$site"/torchaudio/lib/*.so
"$venv/bin/python" -c "$probe" || { echo "fish-speech does not import in $venv" >&2; exit 1; }
echo "$pins" >"$marker"
echo "fish-speech reference env ready: $venv"
