#!/bin/bash
# ssae merge as a user runs it: parts written by shard_list (the shard
# calls as ssae score makes them), merged to a file or stdout; exit 1 with
# the missing shard, the changed list or the failed input named; exit 2 on
# usage errors. And the list's order is that of `ssae score DIR`.
# usage: test_merge_cli.sh SHARD_LIST SSAE_GEN   (SSAE: the ssae program)
set -euo pipefail
SHARD_LIST=$1
T=$(mktemp -d /tmp/ssae-merge-cli-XXXXXX)
trap 'rm -rf "$T"' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

mkdir -p "$T/a/x" "$T/a/y"
for i in $(seq 1 17); do head -c $((i * 1000 % 7001 + 100)) /dev/zero >"$T/a/$([ $((i % 3)) = 0 ] && echo x || echo y)/f$i.wav"; done
echo "$T/a" >"$T/list"
echo "$T/a/gone.wav" >>"$T/list"   # does not exist: a failure record

"$SHARD_LIST" --shard 0/1 --files-from "$T/list" -o "$T/ref" 2>/dev/null || true
tail -n +2 "$T/ref" | grep -v '^# ssae-failed' >"$T/ref.tsv"
for k in 0 1 2; do
  "$SHARD_LIST" --shard "$k/3" --files-from "$T/list" -o "$T/part-$k.tsv" 2>/dev/null || true
  "$SHARD_LIST" --shard "$k/3" --files-from "$T/list" --json -o "$T/part-$k.json" 2>/dev/null || true
done

# Merged: the rest in input order, the failed input named, exit 1.
rc=0
"$SSAE" merge --files-from "$T/list" -o "$T/merged.tsv" "$T"/part-{2,0,1}.tsv 2>"$T/err" || rc=$?
[ "$rc" = 1 ] || fail "a failed input: exit $rc, not 1"
grep -q "gone.wav: failed in shard" "$T/err" || fail "the failed input is not named: $(cat "$T/err")"
cmp -s "$T/merged.tsv" "$T/ref.tsv" || fail "merged result differs from one run"
[ "$(wc -l <"$T/merged.tsv")" = 17 ] || fail "17 results wanted"

# Without the failure: exit 0; stdout; JSON.
grep -v gone.wav "$T/list" >"$T/list2"
for k in 0 1 2; do
  "$SHARD_LIST" --shard "$k/3" --files-from "$T/list2" -o "$T/ok-$k.tsv"
  "$SHARD_LIST" --shard "$k/3" --files-from "$T/list2" --json -o "$T/ok-$k.json"
done
"$SSAE" merge "$T"/ok-{0,1,2}.tsv >"$T/stdout.tsv" || fail "merge to stdout: exit $?"
cmp -s "$T/stdout.tsv" "$T/ref.tsv" || fail "merged on stdout differs"
"$SSAE" merge -o "$T/merged.json" "$T"/ok-*.json || fail "json merge: exit $?"
[ "$(cut -d'"' -f4 "$T/merged.json")" = "$(cut -f1 "$T/ref.tsv")" ] || fail "json paths in order"

# A missing shard: named, nothing written.
rc=0
"$SSAE" merge -o "$T/none.tsv" "$T"/ok-{0,1}.tsv 2>"$T/err" || rc=$?
[ "$rc" = 1 ] && grep -q "shard 2/3 missing" "$T/err" && [ ! -e "$T/none.tsv" ] ||
  fail "missing shard: exit $rc, $(cat "$T/err")"
# The list changed since: refused with both digests.
echo "$T/a/y/f1.wav" >"$T/list3"
rc=0
"$SSAE" merge --files-from "$T/list3" -o "$T/none.tsv" "$T"/ok-*.tsv 2>"$T/err" || rc=$?
[ "$rc" = 1 ] && grep -q "digest" "$T/err" && [ ! -e "$T/none.tsv" ] ||
  fail "another list: exit $rc, $(cat "$T/err")"
# A value that is not one ssae score writes (an edited or damaged part):
# named with its file and line, nothing written; each format.
sed '2s/\t[0-9]*\t1\tnormal$/\tgarbage\t1\tnormal/' "$T/ok-1.tsv" >"$T/bad-1.tsv"
sed '2s/"windows":1/"windows":-1/' "$T/ok-1.json" >"$T/bad-1.json"
for f in tsv json; do
  cmp -s "$T/ok-1.$f" "$T/bad-1.$f" && fail "the $f part was not edited"
  rc=0
  "$SSAE" merge -o "$T/none.$f" "$T/ok-0.$f" "$T/bad-1.$f" "$T/ok-2.$f" 2>"$T/err" || rc=$?
  [ "$rc" = 1 ] && grep -q "bad-1.$f line 2: .*not one ssae score writes" "$T/err" &&
    [ ! -e "$T/none.$f" ] || fail "a bad $f value: exit $rc, $(cat "$T/err")"
done
# A path holding a tab keeps it (the values are the last three fields).
mkdir -p "$T/tab"
printf 'x' >"$T/tab/a	b.wav"
"$SHARD_LIST" --shard 0/1 "$T/tab" -o "$T/tab-0.tsv" 2>/dev/null
"$SSAE" merge -o "$T/tab.tsv" "$T/tab-0.tsv" 2>"$T/err" && grep -q "^$T/tab/a	b.wav	" "$T/tab.tsv" ||
  fail "a path with a tab: $(cat "$T/err") $(cat "$T/tab.tsv" 2>/dev/null)"

# Usage errors.
for args in "" "--bogus $T/ok-0.tsv" "-o"; do
  rc=0
  "$SSAE" merge $args 2>/dev/null >/dev/null || rc=$?
  [ "$rc" = 2 ] || fail "'ssae merge $args': exit $rc, not 2"
done
"$SSAE" merge --help | grep -q "usage: ssae merge" || fail "--help"

# The list's order is the order `ssae score DIR` prints a directory in
# (names chosen where a plain sort of whole paths would differ).
if [ -n "${2:-}" ]; then
  mkdir -p "$T/o/b" "$T/o/b.d"
  for n in b/x b-1 b.d/y b a; do "$2" --seconds 1 --seed 3 -o "$T/o/$n.wav"; done
  "$SSAE" score -q --backend cpu "$T/o" | cut -f1 >"$T/score-order"
  "$SHARD_LIST" "$T/o" | tail -n +2 | cut -f1 >"$T/shard-order"
  cmp -s "$T/score-order" "$T/shard-order" ||
    fail "list order $(tr '\n' ' ' <"$T/shard-order") is not ssae score's $(tr '\n' ' ' <"$T/score-order")"
  LC_ALL=C sort "$T/score-order" | cmp -s - "$T/score-order" &&
    fail "these names no longer tell the walk from a plain sort"
fi

[ "$failures" = 0 ] && echo pass
exit $((failures > 0))
