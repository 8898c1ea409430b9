#!/bin/bash
# ssae score --shard, --files-from and --resume outside any scheduler (the
# cluster suite runs the same under Slurm): the parts merged equal one
# plain run (TSV, JSON, windows); a part cut short and resumed keeps its
# done files without reading them again; --resume alone is shard 0/1; a
# changed list is refused; --shard auto takes a Kubernetes index and
# refuses outside a scheduler; bad values are usage errors (exit 2).
# usage: test_score_shard.sh SSAE_GEN   (SSAE: the ssae program)
set -uo pipefail
GEN=$1
T=$(mktemp -d /tmp/ssae-score-shard-XXXXXX)
trap 'rm -rf "$T"' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
# No scheduler in sight, whatever ran this test.
unset SLURM_ARRAY_TASK_ID SLURM_ARRAY_TASK_MIN SLURM_ARRAY_TASK_MAX SLURM_ARRAY_TASK_COUNT \
  SLURM_ARRAY_TASK_STEP SLURM_JOB_ID JOB_COMPLETION_INDEX SSAE_SHARD_COUNT
score() { "$SSAE" score --quiet --backend cpu --jobs 2 "$@"; }

mkdir -p "$T/a/fan" "$T/a/pump"
for i in $(seq 1 9); do
  "$GEN" --seed "$i" --seconds $((i % 4 + 1)) \
    -o "$T/a/$([ $((i % 2)) = 0 ] && echo fan || echo pump)/c$i.wav" || exit 1
done
echo "$T/a/pump" >"$T/list"
echo "$T/a/fan" >>"$T/list"
score --windows "$T/ref.windows.tsv" "$T/a" >"$T/ref.tsv" || fail "plain run: exit $?"
score --format json "$T/a" >"$T/ref.json" || fail "plain json run: exit $?"
[ "$(wc -l <"$T/ref.tsv")" = 9 ] || fail "plain run: $(wc -l <"$T/ref.tsv") lines"

# --files-from without --shard: the list's paths, as given, stdin too.
score --files-from - <"$T/list" >"$T/list.tsv" || fail "--files-from -: exit $?"
[ "$(sort "$T/list.tsv")" = "$(sort "$T/ref.tsv")" ] || fail "--files-from - scored other files"

# Three parts, merged: the plain run, line for line.
for k in 0 1 2; do
  score --files-from "$T/list" --shard "$k/3" -o "$T/part-$k.tsv" \
    --windows "$T/win-$k.tsv" || fail "shard $k/3: exit $?"
  score --files-from "$T/list" --shard "$k/3" --format json -o "$T/part-$k.json" ||
    fail "shard $k/3 json: exit $?"
  head -n 1 "$T/part-$k.tsv" | grep -q "^# ssae-shard $k/3 inputs=9 " ||
    fail "part $k header: $(head -n 1 "$T/part-$k.tsv")"
done
"$SSAE" merge --files-from "$T/list" "$T"/part-{0,1,2}.tsv | cmp -s - "$T/ref.tsv" ||
  fail "merged TSV differs from the plain run"
"$SSAE" merge "$T"/win-{2,1,0}.tsv | cmp -s - "$T/ref.windows.tsv" ||
  fail "merged windows differ from the plain run"
"$SSAE" merge "$T"/part-*.json | cmp -s - "$T/ref.json" || fail "merged JSON differs"

# A shard cut short (killed after its first file): the rest scored, the
# first kept. Its file is overwritten first: read again it would fail.
head -n 2 "$T/part-1.tsv" >"$T/part-1.tsv.partial"
rm "$T/part-1.tsv"
done_file=$(sed -n 2p "$T/part-1.tsv.partial" | cut -f1)
files=$(sed -n '1s/.* files=\([0-9]*\) .*/\1/p' "$T/part-1.tsv.partial")
cp "$done_file" "$T/saved.wav"
head -c "$(stat -c %s "$done_file")" /dev/urandom >"$done_file"
score --files-from "$T/list" --shard 1/3 --resume -o "$T/part-1.tsv" 2>"$T/err" ||
  fail "resume: exit $?: $(cat "$T/err")"
grep -q "ssae score: shard 1/3: 1 of $files files done already" "$T/err" ||
  fail "resume message: $(cat "$T/err")"
[ ! -e "$T/part-1.tsv.partial" ] || fail "the .partial is left after the resume"
"$SSAE" merge "$T"/part-{0,1,2}.tsv | cmp -s - "$T/ref.tsv" ||
  fail "resumed part merged differs (the done file read again?)"
# The list has changed (that file's size): refused, nothing mixed.
head -c 100 "$T/saved.wav" >"$done_file"
rc=0
score --files-from "$T/list" --shard 1/3 --resume -o "$T/part-1.tsv" 2>"$T/err" || rc=$?
[ "$rc" = 1 ] && grep -q "not mixing" "$T/err" || fail "changed list: exit $rc, $(cat "$T/err")"
cp "$T/saved.wav" "$done_file"

# --resume without --shard: shard 0/1; run again, nothing rescored.
score --resume -o "$T/all.tsv" "$T/a" || fail "--resume alone: exit $?"
head -n 1 "$T/all.tsv" | grep -q '^# ssae-shard 0/1 inputs=9 files=9 ' ||
  fail "--resume alone: header $(head -n 1 "$T/all.tsv")"
[ "$(tail -n +2 "$T/all.tsv")" = "$(cat "$T/ref.tsv")" ] || fail "--resume alone: results"
score --resume -o "$T/all.tsv" "$T/a" 2>"$T/err" || fail "second --resume: exit $?"
grep -q "shard 0/1: 9 of 9 files done already" "$T/err" || fail "second --resume: $(cat "$T/err")"

# A file that cannot be read: a failure record, the part complete, exit 1.
cp "$T/list" "$T/list2"
echo "$T/a/gone.wav" >>"$T/list2"
rc=0
score --files-from "$T/list2" --shard 0/1 -o "$T/gone.tsv" 2>/dev/null || rc=$?
[ "$rc" = 1 ] && grep -q "^# ssae-failed	$T/a/gone.wav	" "$T/gone.tsv" ||
  fail "unreadable file in a shard: exit $rc"

# --shard auto: a Kubernetes index is the shard; outside a scheduler refused.
JOB_COMPLETION_INDEX=2 SSAE_SHARD_COUNT=3 score --files-from "$T/list" --shard auto \
  -o "$T/k8s.tsv" || fail "--shard auto (k8s): exit $?"
cmp -s "$T/k8s.tsv" "$T/part-2.tsv" || fail "--shard auto (index 2 of 3) is not shard 2/3"
rc=0
score --shard auto "$T/a" >/dev/null 2>"$T/err" || rc=$?
[ "$rc" = 2 ] && grep -q "neither a Slurm job array (SLURM_ARRAY_TASK_ID) nor a Kubernetes" \
  "$T/err" || fail "--shard auto outside a scheduler: exit $rc, $(cat "$T/err")"

# Usage errors.
for bad in "--shard 3/3" "--shard 1" "--shard x/2" "--shard 0/2 --shard-count 3" \
  "--resume" "--shard-count 2"; do
  rc=0
  # shellcheck disable=SC2086
  score $bad "$T/a" >/dev/null 2>&1 || rc=$?
  [ "$rc" = 2 ] || fail "ssae score $bad: exit $rc, not 2"
done

[ "$failures" = 0 ] && echo "ssae score shards: pass"
exit $((failures > 0))
