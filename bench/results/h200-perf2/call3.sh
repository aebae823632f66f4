python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/srv/*.whl && export PYTHONPATH=/tmp/site:$PWD:$PWD/clients/python || exit 1
export PYTHONUNBUFFERED=1
W=/tmp/poi; mkdir -p $W; exec > >(tee -a "$OUT/log.txt") 2>&1
date; python3 -m tests.models.qwen3_tts.ckpt /tmp/ck17 --real 1b7 --bf16 --seed 1 >/dev/null
date
B="--model /tmp/ck17 --option device=cuda --option dtype=bfloat16 --option bench_ignore_eos=true --option max_frames=100 --extra temperature=0.9 --session-s 8.1"
timeout 200 python3 -m bench.engine_sim $B --arrivals poisson --concurrency 128 --requests 500 --out $W/engine-poisson128.json
date
timeout 120 python3 -m bench.engine_sim $B --arrivals burst --concurrency 128 --out $W/engine-burst128.json
date
timeout 150 python3 -m bench.engine_sim $B --arrivals poisson --concurrency 256 --requests 800 --out $W/engine-poisson256.json
date
cp $W/*.json $OUT/
