#!/usr/bin/env bash
# Text -> tokenize -> pack(2048): Sluice (build/bench/text_bench) against tf.data +
# tf_text.SentencepieceTokenizer (bench/tf_text_reference.py), on a generated corpus and a
# SentencePiece model trained here by spm_train; checks that both give identical ids for the
# first 2000 texts. Prints the load average before and after. With BASELINE (another build
# folder, e.g. one from before a change), also runs that build's text_bench on the same corpus
# and model and checks its ids are the same.
#
#   bench/text_bench.sh [BUILD=build] [PYTHON=/tmp/text-venv/bin/python] [MB=64] [BASELINE=]
set -euo pipefail
BUILD=${1:-build}
PYTHON=${2:-/tmp/text-venv/bin/python}
MB=${3:-64}
BASELINE=${4:-}
WORK=$(mktemp -d /tmp/text_bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
python3 - "$WORK/corpus.jsonl" "$MB" <<'PY'
import json, random, sys
rng = random.Random(2024)  # fixed seed: the same corpus every run
syll = ["ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "ze", "an", "or", "th", "ing", "er",
        "qu", "é", "ü", "日", "本", "ß"]
words = ["".join(rng.choice(syll) for _ in range(rng.randint(1, 4))) for _ in range(20000)]
weights = [1.0 / (i + 1) for i in range(len(words))]  # Zipf-like
target, total = int(sys.argv[2]) * 1000 * 1000, 0
with open(sys.argv[1], "w") as out:
    while total < target:
        n = rng.randint(20, 1500)
        text = " ".join(rng.choices(words, weights, k=n)) + "."
        out.write(json.dumps({"text": text, "id": total}, ensure_ascii=False) + "\n")
        total += len(text.encode())
PY
head -c 20000000 "$WORK/corpus.jsonl" | python3 -c '
import json, sys
for line in sys.stdin:
    try: print(json.loads(line)["text"])
    except Exception: pass' > "$WORK/train.txt"
spm_train --input="$WORK/train.txt" --model_prefix="$WORK/spm" --vocab_size=8000 --hard_vocab_limit=false \
  --input_sentence_size=20000 --shuffle_input_sentence=true --num_threads=2 \
  > "$WORK/spm_train.log" 2>&1
echo "load before: $(cat /proc/loadavg)"
"$BUILD/bench/text_bench" --jsonl="$WORK/corpus.jsonl" --model="$WORK/spm.model" --length=2048 \
  --dump_ids="$WORK/sluice_ids.txt" --dump_count=2000
echo "load between: $(cat /proc/loadavg)"
if [[ -n "$BASELINE" ]]; then
  echo "baseline $BASELINE:"
  "$BASELINE/bench/text_bench" --jsonl="$WORK/corpus.jsonl" --model="$WORK/spm.model" \
    --length=2048 --dump_ids="$WORK/baseline_ids.txt" --dump_count=2000
  echo "load after the baseline: $(cat /proc/loadavg)"
  cmp -s "$WORK/sluice_ids.txt" "$WORK/baseline_ids.txt" || { echo "ids: baseline DIFFERS"; exit 1; }
  echo "ids: the baseline's are identical"
fi
"$PYTHON" bench/tf_text_reference.py --jsonl="$WORK/corpus.jsonl" --model="$WORK/spm.model" \
  --length=2048 --dump_ids="$WORK/tf_ids.txt" --dump_count=2000 2>/dev/null
echo "load after: $(cat /proc/loadavg)"
if cmp -s "$WORK/sluice_ids.txt" "$WORK/tf_ids.txt"; then
  echo "ids: identical for the first $(wc -l < "$WORK/tf_ids.txt") texts"
else
  echo "ids: DIFFER"; diff <(head -3 "$WORK/sluice_ids.txt") <(head -3 "$WORK/tf_ids.txt") || true
  exit 1
fi
