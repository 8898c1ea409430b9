# Sourced by the offline GPU benchmarks (bench_gpu_frontend.sh,
# bench_gpus.sh): their common options, the programs they run, and the
# generated clips. The caller sets ROOT and a default DIR first.

# bench_options USAGE "$@": -b BUILD_DIR (default ROOT/build), -n CLIPS
# (10000), -r ROUNDS (3), -d DIR; sets BUILD, N, ROUNDS, DIR, SSAE and GEN
# (both must be built).
bench_options() {
  local usage=$1 opt
  shift
  BUILD=$ROOT/build
  N=10000
  ROUNDS=3
  OPTIND=1
  while getopts "b:n:r:d:" opt; do
    case $opt in
      b) BUILD=$OPTARG ;;
      n) N=$OPTARG ;;
      r) ROUNDS=$OPTARG ;;
      d) DIR=$OPTARG ;;
      *) echo "usage: $usage" >&2; exit 2 ;;
    esac
  done
  SSAE=$BUILD/ssae
  GEN=$BUILD/tools/ssae-gen
  local f
  for f in "$SSAE" "$GEN"; do
    [ -x "$f" ] || { echo "$f: not built" >&2; exit 1; }
  done
}

# bench_clips DIR FIRST COUNT: ten-second clips clipSEED.wav for the
# ssae-gen seeds FIRST .. FIRST + COUNT - 1 in DIR (ssae-gen is
# deterministic: a complete set is reused).
bench_clips() {
  local dir=$1 first=$2 count=$3
  mkdir -p "$dir"
  if [ "$(find "$dir" -name 'clip*.wav' | wc -l)" -ne "$count" ]; then
    rm -f "$dir"/clip*.wav
    echo "generating $count clips in $dir ..." >&2
    seq "$first" $((first + count - 1)) |
      xargs -P "$(nproc)" -I{} "$GEN" --seed {} --seconds 10 -o "$dir/clip{}.wav"
  fi
}

now() { date +%s.%N; }
