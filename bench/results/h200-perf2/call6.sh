python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/srv/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1; export PYTHONUNBUFFERED=1
# call 6 (issue 27, third lend): the WebSocket figures again on the tree with both Poisson
# fixes (the capped last frame in the graph, vocoder chunks grouped by graph length).
# Order: env check -> random real-size 1.7B checkpoint -> WebSocket burst 1/64/256 ->
#   WebSocket Poisson ~128 active -> WebSocket Poisson ~256 active.
# Everything lands in /tmp/q27 and is re-packed into $OUT/q27.tar.gz after every step, so
# a run cut short still brings back what finished; the whole log is $OUT/log.txt.
# voiceclient (bench.loadgen's client) lives in clients/python (call 3 failed without it).
export PYTHONPATH="$PYTHONPATH:$PWD/clients/python"
set -u -o pipefail
OUT="${OUT:-/tmp/q27-out}"
mkdir -p "$OUT"
W=/tmp/q27
rm -rf "$W"
mkdir -p "$W/step"
exec > >(tee -a "$OUT/log.txt") 2>&1

BUDGET=${Q27_BUDGET:-570} # seconds from the script's start (SECONDS counts from there)
GRACE=20                  # timeout -k: SIGKILL this long after the SIGINT
RESERVE=8                 # for the final pack
CK=/tmp/ck17

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
    local d
    for d in "$W"/step/step-trace-*.json; do [ -f "$d" ] && gzip -f "$d"; done
    cp -f "$OUT/log.txt" "$W/log.txt" 2>/dev/null
    tar -czf "$OUT/q27.tar.gz.part" -C /tmp q27 && mv -f "$OUT/q27.tar.gz.part" "$OUT/q27.tar.gz"
    # A file comes back only under 16 MB: drop the larger traces first, then all of them.
    if [ "$(stat -c %s "$OUT/q27.tar.gz" 2>/dev/null || echo 0)" -gt 15000000 ]; then
        tar -czf "$OUT/q27.tar.gz" -C /tmp --exclude='step-trace-b64*' --exclude='step-trace-b256*' q27
    fi
    if [ "$(stat -c %s "$OUT/q27.tar.gz" 2>/dev/null || echo 0)" -gt 15000000 ]; then
        tar -czf "$OUT/q27.tar.gz" -C /tmp --exclude='step-trace-*' q27
    fi
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
        [ -f "$d/server.log" ] && [ ! -e "$d/.q27" ] || continue
        tail -c 2000000 "$d/server.log" >"$W/server-$name.log"
        touch "$d/.q27"
    done
    pack
    return 0
}

stamp "START q27 on $(hostname) (budget ${BUDGET}s)"
nvidia-smi 2>&1 | head -20
nproc
free -g
# Raw Opus (opuslib) needs a system libopus; where the image has none, point find_library
# at the libopus bundled in the carried av wheel (gcc/ld and objdump resolve it through
# LIBRARY_PATH/LD_LIBRARY_PATH). Best effort: only the server's Opus output needs it.
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
timeout 120 python3 - <<'EOF'
import importlib, importlib.metadata as md, sys
import torch
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "NO CUDA")
for d in ("pytest", "pytest-asyncio", "pytest-timeout", "pluggy", "anyio", "h11", "click",
          "typing_extensions", "uvloop", "prometheus_client", "tokenizers", "numpy", "httpx",
          "PyYAML", "safetensors", "triton", "starlette", "uvicorn", "websockets", "av", "msgspec"):
    try:
        print(f"  {d} {md.version(d)}")
    except md.PackageNotFoundError:
        print(f"  {d} MISSING")
for m in ("voiceserver.app", "voiceserver.transport.protocols", "voiceserver.http.voices",
          "bench.loadgen", "bench.engine_bench", "bench.step_profile", "voiceclient",
          "models.qwen3_tts.loader", "inflect", "regex", "pyloudnorm", "soxr", "opuslib"):
    try:
        importlib.import_module(m)
        print(f"  import {m}: ok")
    except Exception as exc:
        print(f"  import {m}: FAILED {type(exc).__name__}: {exc}")
EOF
pack

step ckpt 240 python3 -m tests.models.qwen3_tts.ckpt "$CK" --real 1b7 --bf16 --seed 1

SERVER=(--spawn-model "$CK" --server-option device=cuda --server-option dtype=bfloat16
    --server-option bench_ignore_eos=true --server-option max_frames=100
    --server-option max_contexts=1024 --server-engine max_ar_batch=1024
    --server-engine max_vocoder_batch=256 --server-engine admission_load=0)
if [ -f "$CK/model.safetensors" ]; then
    step ws-burst 200 python3 -m bench.loadgen "${SERVER[@]}" \
        --concurrency 1 64 256 --processes 8 --quiet --out "$W/ws-burst.json"
    # Poisson: 100 frames = 8 s heard from the first chunk, ~8.2 s from the first text;
    # N active / 8.2 s arrivals a second (Little's law).
    step ws-poisson128 150 python3 -m bench.loadgen "${SERVER[@]}" \
        --arrivals poisson --session-s 8.2 --concurrency 128 --requests-per-level 700 \
        --processes 8 --quiet --out "$W/ws-poisson128.json"
    step ws-poisson 200 python3 -m bench.loadgen "${SERVER[@]}" \
        --arrivals poisson --session-s 8.2 --concurrency 256 --requests-per-level 1600 \
        --processes 8 --quiet --out "$W/ws-poisson.json"
else
    stamp "no checkpoint at $CK: the benchmarks are skipped"
    echo "benchmarks skipped (no checkpoint)" >>"$W/status.txt"
fi

stamp "DONE"
cat "$W/status.txt"
pack
ls -la "$OUT"
sleep 1
