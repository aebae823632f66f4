python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/srv/*.whl && export PYTHONPATH=/tmp/site:$PWD:$PWD/clients/python || exit 1
export PYTHONUNBUFFERED=1
exec > >(tee -a "$OUT/log.txt") 2>&1
date
timeout 80 python3 -m pytest -q tests/gpu/test_qwen3_cuda.py -p no:cacheprovider -x 2>&1 | tail -6
date; python3 -m tests.models.qwen3_tts.ckpt /tmp/ck17 --real 1b7 --bf16 --seed 1 >/dev/null; date
timeout 130 python3 -m bench.engine_sim --model /tmp/ck17 --option device=cuda --option dtype=bfloat16 --option bench_ignore_eos=true --option max_frames=100 --extra temperature=0.9 --session-s 8.1 --arrivals poisson --concurrency 128 --requests 400 --out $OUT/engine-poisson128-lastframe.json
date
