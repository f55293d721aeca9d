#!/usr/bin/env bash
# fp32 against bf16 decoding of the recipe's averaged models (beam 5, test2016, the lower-cased
# tokenized text they were trained on): BLEU, identical lines and the wall time of odet generate
# (with its ~3 s of start-up). Run from the repository root:
#   bash results/multi30k/decode-precision/run.sh [DATA_DIR] [THREADS]
set -euo pipefail
data=${1:-../shared/data/multi30k}
threads=${2:-2}
out=results/multi30k/decode-precision
runs=runs/experiments/multi30k-euler-vs-rk2-gated
export OMP_NUM_THREADS=$threads
: > "$out/times.txt"
echo "| model | precision | seconds (best of 2) | tok BLEU | lines equal to fp32 |" > "$out/results.md"
echo "|---|---|---|---|---|" >> "$out/results.md"
for model in euler/seed1 euler/seed2 rk2-gated/seed1 rk2-gated/seed2; do
  name=${model/\//-}
  for precision in fp32 bf16 fp32 bf16; do  # twice each, alternating: the machine is noisy
    hyp=$out/$name.$precision.hyp
    start=$(date +%s.%N)
    odet generate "$runs/$model/avg5" -i "$data/tok/test_2016_flickr.lc.norm.tok.en.gz" -o "$hyp" \
      --precision "$precision" --no-progress
    echo "$name $precision $(echo "$(date +%s.%N) - $start" | bc)" >> "$out/times.txt"
  done
  for precision in fp32 bf16; do
    hyp=$out/$name.$precision.hyp
    bleu=$(odet evaluate --hyp "$hyp" --ref "$data/tok/test_2016_flickr.lc.norm.tok.de.gz" \
      --tokenized --json | python -c "import json,sys; print('%.2f' % json.load(sys.stdin)['score'])")
    same=$(paste -d '\t' "$out/$name.fp32.hyp" "$hyp" | awk -F'\t' '$1==$2' | wc -l)
    secs=$(awk -v n="$name" -v p="$precision" '$1==n && $2==p {print $3}' "$out/times.txt" |
      sort -n | head -1 | xargs printf "%.1f")
    echo "| $name | $precision | $secs | $bleu | $same / $(wc -l < "$hyp") |" >> "$out/results.md"
  done
done
cat "$out/results.md"
