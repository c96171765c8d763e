#!/usr/bin/env bash
# The committed all-reduce results (results/allreduce/): this machine at np 1, 2, 4 and the emulated
# cluster (scripts/cluster/cluster.sh) at 2 nodes x 2 ranks and 4 nodes x 1 rank, links unshaped and
# shaped to 1 Gbit/s; every algorithm; then the plots. Each run records the load average in its JSON.
#   usage: scripts/bench/allreduce_results.sh [BUILD_DIR] [OUT_DIR]     (as root, for the cluster part)
# HPDT_RESULTS_PARTS="local cluster" picks parts (default both); "auto-check" is the separate check of
# `--algo auto` on 2 nodes x 2 ranks at 1 Gbit/s: every algorithm measured with more iterations, a
# tuning file written from it, then every algorithm and auto again with that file (cluster_2x2_1gbit_auto*);
# both passes time the algorithms of each size round by round (--interleave), so that the shaped link's
# token bucket and other drift hit them alike, and every timed loop lasts at least 25 ms (--loop-ms: the
# small sizes get hundreds of operations per loop instead of 10).
set -euo pipefail
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$src/build/cpu} out=${2:-$src/results/allreduce}
perf=$build/bench/allreduce/hpdt-allreduce-perf
[ -x "$perf" ] || { echo "no $perf: build hpdt-allreduce-perf first" >&2; exit 1; }
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1
algos=ring,tree,rhd,hier,mpi,auto
parts=${HPDT_RESULTS_PARTS:-local cluster}
cluster=$src/scripts/cluster/cluster.sh

take_cluster() {  # the emulated cluster is this script's until it exits (one user at a time), then torn down
  exec 8>/tmp/hpdt-cluster.lock
  flock -w 600 8 || { echo "emulated cluster busy" >&2; exit 1; }
  export HPDT_CLUSTER_DIR=/tmp/hpdt-results-cluster
  trap '"$cluster" down > /dev/null 2>&1 || true' EXIT
}

if [[ " $parts " == *" local "* ]]; then
  for np in 1 2 4; do
    echo "== this machine, np $np"
    timeout 900 mpiexec -n $np --oversubscribe --bind-to none "$perf" -b 8 -e 64M -f 4 -n 5 -w 2 --repeat 3 \
      --algo $algos --label "this machine, np $np" -J "$out/local_np$np.json" --csv "$out/local_np$np.csv" \
      --tuning-out "$out/tuning_local.json" | tee "$out/local_np$np.txt"
  done
fi

if [[ " $parts " == *" cluster "* ]]; then
  take_cluster
  for shape in 2x2 4x1; do
    nodes=${shape%x*} per=${shape#*x}
    "$cluster" up "$nodes" --cpus 2 > /dev/null
    for rate in off 1gbit; do
      "$cluster" shape $rate > /dev/null
      name=cluster_${shape}_${rate/off/unshaped}
      # one tuning file per cluster shape (2x2 keeps the historical name tuning_cluster.json)
      tuning=$out/tuning_cluster.json; [ $shape = 2x2 ] || tuning=$out/tuning_cluster_$shape.json
      # 16 MiB at most: one 64 MiB ring all-reduce takes ~0.8 s at 1 Gbit/s
      emax=16M iters=3
      echo "== emulated cluster $shape, links $rate"
      HPDT_CLUSTER_SLOTS=$per timeout 1200 "$cluster" mpirun -np $((nodes * per)) --bind-to none "$perf" \
        -b 8 -e $emax -f 4 -n $iters -w 1 --repeat 3 --algo $algos --label "emulated $shape, links $rate" \
        -J "$out/$name.json" --csv "$out/$name.csv" --tuning-out "$tuning" | tee "$out/$name.txt"
      if [ $shape = 2x2 ] && [ $rate = 1gbit ]; then
        # auto again, now reading the tuning file this configuration just wrote
        echo "== emulated cluster $shape, links $rate: auto with the measured tuning file"
        HPDT_CLUSTER_SLOTS=$per timeout 1200 "$cluster" mpirun -np $((nodes * per)) --bind-to none "$perf" \
          -b 8 -e $emax -f 4 -n $iters -w 1 --repeat 3 --algo ring,hier,auto --tuning "$tuning" \
          --label "emulated $shape, links $rate, auto tuned" -J "$out/${name}_tuned.json" | tee "$out/${name}_tuned.txt"
      fi
    done
    "$cluster" down > /dev/null
  done
fi

if [[ " $parts " == *" auto-check "* ]]; then
  take_cluster
  "$cluster" up 2 --cpus 2 --rate 1gbit > /dev/null
  tuning=$out/tuning_cluster_2x2_1gbit_auto.json
  for pass in measure check; do
    name=cluster_2x2_1gbit_auto_$pass
    if [ $pass = measure ]; then args=(--tuning-out "$tuning"); else args=(--tuning "$tuning"); fi
    echo "== emulated cluster 2x2, links 1gbit, auto $pass"
    HPDT_CLUSTER_SLOTS=2 timeout 1800 "$cluster" mpirun -np 4 --bind-to none "$perf" -b 8 -e 8M -f 4 -n 10 -w 3 \
      --repeat 7 --loop-ms 25 --interleave --algo $algos --label "emulated 2x2, links 1gbit, auto $pass" -J "$out/$name.json" "${args[@]}" \
      | tee "$out/$name.txt"
  done
  "$cluster" down > /dev/null
  exit 0
fi

py=/usr/bin/python3
$py "$src/scripts/plot/plot_allreduce.py" "$out"/local_np2.json "$out"/local_np4.json --name local || true
$py "$src/scripts/plot/plot_allreduce.py" "$out"/cluster_2x2_unshaped.json "$out"/cluster_2x2_1gbit.json --name cluster_2x2 || true
$py "$src/scripts/plot/plot_allreduce.py" "$out"/cluster_4x1_unshaped.json "$out"/cluster_4x1_1gbit.json --name cluster_4x1 || true
