#!/bin/bash
# usage: kill.sh <victim: recv|send> <stop: 0|1> <errmode> [env...]
[ -n "$RECREATE" ] && export UCXT_RECREATE_WORKER=1
victim=$1; stop=$2; mode=$3; shift 3
SZ=4194304
d=$(mktemp -d ${UCXT_DIR:-/tmp}/kill.XXXX)
if [ $victim = recv ]; then
  env "$@" "$(dirname "$0")"/ucxt recv $d R S $mode $SZ 0 1 > $d/victim.out 2>&1 & vp=$!
  env "$@" "$(dirname "$0")"/ucxt send $d S R $mode $SZ 0 1 R2 > $d/surv.out 2>&1 & sp=$!
else
  env "$@" "$(dirname "$0")"/ucxt recv $d R S $mode $SZ 0 1 S2 > $d/surv.out 2>&1 & sp=$!
  env "$@" "$(dirname "$0")"/ucxt send $d S R $mode $SZ 0 1 > $d/victim.out 2>&1 & vp=$!
fi
for i in $(seq 200); do [ -f $d/R.addr ] && [ -f $d/S.addr ] && break; sleep 0.1; done
sleep 1.5
if [ $stop = 1 ]; then kill -STOP $vp; sleep 1; fi
kill -KILL $vp; wait $vp 2>/dev/null
sleep 0.05
kill -USR1 $sp
# fresh peer
if [ $victim = recv ]; then
  env "$@" UCXT_VERIFY=1 "$(dirname "$0")"/ucxt recv $d R2 S${RECREATE:+b} $mode $SZ 10 2 > $d/fresh.out 2>&1 & fp=$!
else
  env "$@" "$(dirname "$0")"/ucxt send $d S2 R${RECREATE:+b} $mode $SZ 10 2 > $d/fresh.out 2>&1 & fp=$!
fi
wait $sp; src=$?
# if survivor died, fresh peer would wait; give it a bound
( sleep 25; kill -KILL $fp 2>/dev/null ) & wd=$!
wait $fp; frc=$?
kill $wd 2>/dev/null
echo "### recreate=${RECREATE:-0} victim=$victim stop=$stop mode=$mode env=[$*] survivor_rc=$src fresh_rc=$frc dir=$d"
grep -vE "^#|mpool.c:53" $d/surv.out | sed 's/^/   surv: /' | grep -vE "^   surv: \[.{1,3}[0-9.]+\] (reconnecting|sender done)" 
grep -E "RESULT|FATAL|fatal|WATCHDOG|rror" $d/fresh.out | sed 's/^/   fresh: /'
echo "   surv: mpool leak warnings at exit: $(grep -c mpool.c:53 $d/surv.out)"
