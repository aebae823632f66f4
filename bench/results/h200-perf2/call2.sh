python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/srv/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1; export PYTHONUNBUFFERED=1
# Chatterbox Turbo, streaming decode (model option stream_decode, now true by default) vs
# whole-clause decode, on one lent H200: run from the repo root as `bash .whl/cbx.sh`,
# `.whl` carried. Modelled on .whl/q27.sh.
# Order (most important first; each step under `timeout`, the whole script ends by ~540 s):
#   env check -> random real-size Chatterbox Turbo checkpoint -> WebSocket 1/16/64 with
#   streaming decode -> WebSocket 1/16 with stream_decode=false -> tests/gpu (Chatterbox and
#   Qwen3 first, then the rest as the budget allows).
# Everything lands in /tmp/cbxw and is re-packed into $OUT/cbx.tar.gz after every step, so
# a run cut short still brings back what finished; the whole log is $OUT/log.txt.
# voiceclient (bench.loadgen's client) lives in clients/python.
export PYTHONPATH="$PYTHONPATH:$PWD/clients/python"
set -u -o pipefail
OUT="${OUT:-/tmp/cbx-out}"
mkdir -p "$OUT"
W=/tmp/cbxw # results (packed); the checkpoint is $CK, outside it
rm -rf "$W"
mkdir -p "$W"
exec > >(tee -a "$OUT/log.txt") 2>&1

BUDGET=${CBX_BUDGET:-540} # seconds from the script's start (SECONDS counts from there)
GRACE=20                  # timeout -k: SIGKILL this long after the SIGINT
RESERVE=8                 # for the final pack
CK=/tmp/cbx

gpu() {
    nvidia-smi --query-gpu=memory.used,memory.total,utilization.gpu --format=csv,noheader 2>/dev/null |
        sed 's/^/    gpu: /'
    nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader 2>/dev/null |
        sed 's/^/    gpu app: /'
}
stamp() {
    echo "=== [$(date -u +%H:%M:%S) t=${SECONDS}s] $*"
    gpu
}
pack() {
    cp -f "$OUT/log.txt" "$W/log.txt" 2>/dev/null
    tar -czf "$OUT/cbx.tar.gz.part" -C /tmp cbxw && mv -f "$OUT/cbx.tar.gz.part" "$OUT/cbx.tar.gz"
    # A file comes back only under 16 MB: drop the server logs if it is larger.
    if [ "$(stat -c %s "$OUT/cbx.tar.gz" 2>/dev/null || echo 0)" -gt 15000000 ]; then
        tar -czf "$OUT/cbx.tar.gz" -C /tmp --exclude='server-*.log' cbxw
    fi
    rm -f "$OUT/cbx.tar.gz.part"
}
# step NAME CAP_S COMMAND...: COMMAND under timeout (SIGINT to its process group, so a
# spawned server stops too; SIGKILL GRACE s later), capped by what the budget leaves.
step() {
    local name=$1 cap=$2 left t rc d
    shift 2
    left=$((BUDGET - RESERVE - GRACE - SECONDS))
    if [ "$left" -lt 30 ]; then
        stamp "SKIP $name: only ${left}s of the budget left"
        echo "$name skipped (budget)" >>"$W/status.txt"
        return 0
    fi
    [ "$left" -lt "$cap" ] && cap=$left
    stamp "START $name (timeout ${cap}s): $*"
    t=$SECONDS
    timeout -s INT -k "$GRACE" "$cap" "$@"
    rc=$?
    stamp "END $name rc=$rc after $((SECONDS - t))s"
    echo "$name rc=$rc $((SECONDS - t))s" >>"$W/status.txt"
    # The log of a server that bench.loadgen spawned (bench/spawn.py: a fresh temp dir).
    for d in /tmp/voiceserver-bench-*; do
        [ -f "$d/server.log" ] && [ ! -e "$d/.cbx" ] || continue
        tail -c 2000000 "$d/server.log" >"$W/server-$name.log"
        touch "$d/.cbx"
    done
    pack
    return 0
}

stamp "START cbx on $(hostname) (budget ${BUDGET}s)"
nvidia-smi 2>&1 | head -15
nproc
free -g
# Raw Opus (opuslib) needs a system libopus; where the image has none, point find_library
# at the libopus bundled in the carried av wheel. Best effort: only Opus output needs it.
if ! python3 -c "import ctypes.util, sys; sys.exit(0 if ctypes.util.find_library('opus') else 1)"; then
    lib=$(ls /tmp/site/av.libs/libopus-*.so* 2>/dev/null | head -1)
    if [ -n "$lib" ]; then
        mkdir -p /tmp/opuslib
        ln -sf "$lib" /tmp/opuslib/libopus.so
        ln -sf "$lib" "/tmp/opuslib/${lib##*/}"
        export LD_LIBRARY_PATH="/tmp/opuslib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        export LIBRARY_PATH="/tmp/opuslib${LIBRARY_PATH:+:$LIBRARY_PATH}"
    fi
fi
timeout 60 python3 - <<'EOF'
import importlib, importlib.metadata as md, sys
import torch
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "NO CUDA")
for d in ("pytest", "pytest-asyncio", "pytest-timeout", "numpy", "httpx", "PyYAML",
          "safetensors", "triton", "starlette", "uvicorn", "websockets", "av", "msgspec"):
    try:
        print(f"  {d} {md.version(d)}")
    except md.PackageNotFoundError:
        print(f"  {d} MISSING")
for m in ("voiceserver.app", "bench.loadgen", "voiceclient", "models.chatterbox.loader",
          "tests.models.chatterbox.ckpt_full", "inflect", "regex", "pyloudnorm", "soxr",
          "opuslib"):
    try:
        importlib.import_module(m)
        print(f"  import {m}: ok")
    except Exception as exc:
        print(f"  import {m}: FAILED {type(exc).__name__}: {exc}")
EOF
pack

# 1) Real-size random checkpoint (T3 GPT-2 medium sized, real-size S3Gen; ~2.3 GB).
rm -rf "$CK"
step ckpt 150 python3 -m tests.models.chatterbox.ckpt_full "$CK" --real

if [ -f "$CK/t3_turbo_v1.safetensors" ] && [ -f "$CK/s3gen_meanflow.safetensors" ]; then
    # 2) Through the server's WebSocket (bench/results/h200-chatterbox/README.md's
    # "Commands"), streaming decode: the default (stream_decode=true).
    step ws-stream 170 python3 -m bench.loadgen --spawn-model "$CK" \
        --server-option device=cuda --server-option dtype=bfloat16 \
        --server-option bench_ignore_eos=true --server-option max_contexts=64 \
        --server-option max_new_tokens=75 \
        --server-engine max_ar_batch=64 --server-engine max_vocoder_batch=64 \
        --server-engine admission_load=0 \
        --concurrency 1 16 64 --processes 8 --quiet --out "$W/ws-stream.json"
    # 3) The same with each clause decoded whole (stream_decode=false), 1 and 16 streams.
    step ws-whole 110 python3 -m bench.loadgen --spawn-model "$CK" \
        --server-option device=cuda --server-option dtype=bfloat16 \
        --server-option bench_ignore_eos=true --server-option max_contexts=64 \
        --server-option max_new_tokens=75 --server-option stream_decode=false \
        --server-engine max_ar_batch=64 --server-engine max_vocoder_batch=64 \
        --server-engine admission_load=0 \
        --concurrency 1 16 --processes 8 --quiet --out "$W/ws-whole.json"
else
    stamp "no checkpoint at $CK: the benchmarks are skipped"
    echo "benchmarks skipped (no checkpoint)" >>"$W/status.txt"
fi
rm -rf "$CK" # free the disk and page cache before the tests

# 4) The Chatterbox GPU tests, then Qwen3 1.7B with Poisson arrivals at 128 active.
step gpu-tests 150 python3 -m pytest -q tests/gpu/test_chatterbox_cuda.py \
    -p no:cacheprovider -rs --durations=10 --junitxml="$W/gpu-tests.xml"
step ckpt17 120 python3 -m tests.models.qwen3_tts.ckpt /tmp/ck17 --real 1b7 --bf16 --seed 1
step ws-poisson128 200 python3 -m bench.loadgen --spawn-model /tmp/ck17 \
    --server-option device=cuda --server-option dtype=bfloat16 \
    --server-option bench_ignore_eos=true --server-option max_frames=100 \
    --server-option max_contexts=1024 \
    --server-engine max_ar_batch=1024 --server-engine max_vocoder_batch=256 \
    --server-engine admission_load=0 \
    --arrivals poisson --session-s 8.2 --concurrency 128 --requests-per-level 700 \
    --processes 8 --quiet --out "$W/ws-poisson128.json"

stamp "DONE"
cat "$W/status.txt"
pack
ls -la "$OUT"
sleep 1
