#!/bin/bash
# usage: tput.sh <label> <errmode> <size> <count> [env assignments...]
label=$1; mode=$2; size=$3; count=$4; shift 4
d=$(mktemp -d ${UCXT_DIR:-/tmp}/run.XXXX)
env "$@" "$(dirname "$0")"/ucxt recv $d R S $mode $size $count 1 > $d/r.out 2>&1 &
rp=$!
env "$@" timeout 60 "$(dirname "$0")"/ucxt send $d S R $mode $size $count 1 > $d/s.out 2>&1
sc=$?
wait $rp; rc=$?
mb=$(grep -o "MBps=[0-9.]*" $d/r.out | cut -d= -f2); bad=$(grep -o "bad=[0-9]* errors=[0-9]*" $d/r.out)
echo "$label mode=$mode size=$size count=$count MBps=$mb $bad rc=$rc sc=$sc"
if [ -n "$KEEP" ]; then echo "dir=$d"; else rm -rf $d; fi
