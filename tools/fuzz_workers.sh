#!/usr/bin/env bash
# Long fuzz runs on a machine with many cores (the GPU machine): N libFuzzer workers per target, all
# targets at once, binaries and libs from .devshare/fz.tar.xz (bin/, lib/); logs and CPU times to $OUT.
#   tools/fuzz_workers.sh SECONDS WORKERS TARGET...
set -u
S=$1; W=$2; shift 2
mkdir -p fz && tar -xJf .devshare/fz.tar.xz -C fz
export LD_LIBRARY_PATH=$PWD/fz/lib
export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
nproc; uname -a; cat /proc/cpuinfo | grep "model name" | head -1
for t in "$@"; do
  ( mkdir -p run/$t/corpus run/$t/artifacts; cd run/$t
    { time ../../fz/bin/$t -jobs=$W -workers=$W -rss_limit_mb=2048 -timeout=20 -max_len=65536 \
        -print_final_stats=1 -max_total_time=$S -artifact_prefix=$PWD/artifacts/ corpus ../../fuzz/corpus/$t ; } \
        > driver.log 2> time.log; echo "exit $?" >> time.log ) &
done
wait
for t in "$@"; do
  echo "== $t"; cat run/$t/time.log | tail -5
  ls run/$t/artifacts | head; ls run/$t/corpus | wc -l
  grep -hE '^(stat::number_of_executed_units|#[0-9]+ +DONE)' run/$t/fuzz-*.log | head -3
  grep -lE 'ERROR: (Address|Leak|Undefined)Sanitizer|runtime error:|deadly signal' run/$t/fuzz-*.log | head
done
tar -czf $OUT/runs.tgz --exclude=corpus run  # logs and findings; the grown corpora can be large
