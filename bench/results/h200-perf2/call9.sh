python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/srv9/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1; export PYTHONUNBUFFERED=1
# call 9 (issue 27, third lend): every GPU test on the tree as submitted (call 8 ran
# the backed-out vocoder change), espeak-ng set up as in call8.sh.
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

BUDGET=${Q27_BUDGET:-585} # seconds from the script's start (SECONDS counts from there)
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
if [ -f .whl/esp/esp.tgz ]; then
    mkdir -p /tmp/esp && tar xzf .whl/esp/esp.tgz -C /tmp/esp
    E=/tmp/esp/usr/lib/x86_64-linux-gnu
    ln -sf "$E/libespeak-ng.so.1" "$E/libespeak-ng.so"
    rm -f "$E"/libpcaudio.so*
    cat >/tmp/esp/pcaudio.c <<'C'
#include <stddef.h>
struct audio_object;
struct audio_object *create_audio_device_object(const char *d, const char *a, const char *n) { return NULL; }
int audio_object_open(struct audio_object *o, int f, unsigned r, unsigned char c) { return -1; }
void audio_object_close(struct audio_object *o) {}
void audio_object_destroy(struct audio_object *o) {}
int audio_object_write(struct audio_object *o, const void *d, size_t b) { return -1; }
int audio_object_drain(struct audio_object *o) { return -1; }
int audio_object_flush(struct audio_object *o) { return -1; }
const char *audio_object_strerror(struct audio_object *o, int e) { return "no audio device"; }
C
    gcc -shared -fPIC -O1 -Wl,-soname,libpcaudio.so.0 -o "$E/libpcaudio.so.0" /tmp/esp/pcaudio.c
    export LD_LIBRARY_PATH="$E${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export LIBRARY_PATH="$E${LIBRARY_PATH:+:$LIBRARY_PATH}" ESPEAK_DATA_PATH="$E"
    ldd "$E/libespeak-ng.so.1" | grep -i "not found"
    python3 -c "import ctypes.util; print('espeak-ng:', ctypes.util.find_library('espeak-ng'))"
fi
step gpu-tests 290 python3 -m pytest -q tests/gpu -p no:cacheprovider -rs --durations=15 \
    --junitxml="$W/gpu-tests.xml"

stamp "DONE"
cat "$W/status.txt"
pack
ls -la "$OUT"
