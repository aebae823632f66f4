python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/srv/*.whl && export PYTHONPATH=/tmp/site:$PWD:$PWD/clients/python || exit 1
export PYTHONUNBUFFERED=1
W=/tmp/g4; mkdir -p $W; exec > >(tee -a "$OUT/log.txt") 2>&1
date
timeout 150 python3 -m pytest -q tests/gpu/test_qwen3_cuda.py -p no:cacheprovider -x 2>&1 | tail -15
date; python3 -m tests.models.qwen3_tts.ckpt /tmp/ck17 --real 1b7 --bf16 --seed 1 >/dev/null; date
B="--model /tmp/ck17 --option device=cuda --option dtype=bfloat16 --option bench_ignore_eos=true --option max_frames=100 --extra temperature=0.9 --session-s 8.1"
timeout 150 python3 -m bench.engine_sim $B --arrivals poisson --concurrency 128 --requests 500 --out $W/engine-poisson128-grouped.json
date
timeout 100 python3 -m bench.engine_sim $B --arrivals burst --concurrency 128 256 --out $W/engine-burst-grouped.json
date
cp $W/*.json $OUT/
