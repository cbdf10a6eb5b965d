#!/usr/bin/env bash
# Runs ON the GPU machine: a long job that outlives the device call that started it. The device tool kills what a
# call leaves running, except a process that started a new session (setsid), which runs on until the machine goes
# back (.library/device/README.md). So a recording or a study role can run through a session's back-to-back calls
# instead of stopping at each call's 600 s and resuming in the next: on 2026-12-02 every call of a recording spent
# 70-125 s starting the model server, 70 s stopping, and lost the evaluations it had in flight.
#   scripts/device/detached.sh start NAME COMMAND...  start COMMAND (bash -c) in a session of its own; returns at once
#   scripts/device/detached.sh wait NAME SECONDS      until it ends or SECONDS pass, printing its console's new lines;
#                                                     exit 0 when it has ended (its status: DIR/exit), 3 while it runs
#   scripts/device/detached.sh stop NAME [GRACE]      SIGTERM, then SIGKILL to what is left after GRACE s (default 90)
#   scripts/device/detached.sh status NAME            "running", "exited N" or "not started"; exit 0, 3 or 2
# DIR is $DETACHED_DIR/NAME (default /tmp/detached/NAME): console.log, pid (the session's leader), exit.
# stop sends SIGTERM to the job's `timeout` processes when it has any (scripts/device/pipeline.sh runs `cudanalyst`
# under one): timeout passes it on to `cudanalyst`, which stops as on Ctrl-C, and the script goes on to pack the
# folder. A job with no `timeout` gets SIGTERM itself, to its whole process group.
set -uo pipefail
root="${DETACHED_DIR:-/tmp/detached}"
usage() { echo "usage: scripts/device/detached.sh start NAME COMMAND... | wait NAME SECONDS | stop NAME [GRACE] | status NAME" >&2; exit 2; }
[ $# -ge 2 ] || usage
action=$1 name=$2
case "$name" in ''|*/*|.*) echo "detached.sh: bad job name '$name'" >&2; exit 2 ;; esac
dir="$root/$name"
shift 2

alive() { [ -s "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null && [ ! -e "$dir/exit" ]; }
session() {  # the job's processes, from /proc (the GPU machine's image may have no ps)
  local leader p stat rest sid
  leader=$(cat "$dir/pid")
  for p in /proc/[0-9]*; do
    stat=$(cat "$p/stat" 2>/dev/null) || continue
    rest=${stat##*) }  # past "pid (comm) ", whatever the command's name holds
    read -r _ _ _ sid _ <<< "$rest"
    [ "$sid" = "$leader" ] && echo "${p#/proc/}"
  done
}
new_lines() {  # the console's lines since the last call printed them
  local seen=0 total
  [ -s "$dir/printed" ] && seen=$(cat "$dir/printed")
  total=$(wc -l < "$dir/console.log" 2>/dev/null || echo 0)
  [ "$total" -gt "$seen" ] && tail -n "+$((seen + 1))" "$dir/console.log" | head -n "$((total - seen))"
  echo "$total" > "$dir/printed"
}

case "$action" in
  start)
    [ $# -ge 1 ] || usage
    if alive; then echo "detached.sh: $name is already running (pid $(cat "$dir/pid"))" >&2; exit 2; fi
    rm -rf "$dir" && mkdir -p "$dir"
    # A new session (and process group) whose leader is the inner bash, which names itself in DIR/pid and leaves the
    # job's exit status in DIR/exit (written whole: another call may read it at any moment). setsid(1), or Python's
    # os.setsid where the machine has no setsid (DETACHED_LAUNCHER=python chooses it).
    if command -v setsid >/dev/null && [ "${DETACHED_LAUNCHER:-}" != python ]; then launcher=(setsid --fork)
    else launcher=(python3 -c 'import os, sys; os.setsid(); os.execvp(sys.argv[1], sys.argv[1:])'); fi
    # shellcheck disable=SC2016
    "${launcher[@]}" bash -c 'echo $$ > "$1/pid"; bash -c "$2"; echo $? > "$1/exit.partial"; mv "$1/exit.partial" "$1/exit"' \
      detached "$dir" "$*" > "$dir/console.log" 2>&1 < /dev/null &
    for _ in $(seq 50); do [ -s "$dir/pid" ] && break; sleep 0.1; done
    [ -s "$dir/pid" ] || { echo "detached.sh: $name did not start" >&2; exit 1; }
    echo "detached.sh: $name started (pid $(cat "$dir/pid")), console $dir/console.log"
    ;;
  wait)
    [ $# -eq 1 ] && [[ "$1" =~ ^[0-9]+$ ]] || usage
    [ -d "$dir" ] || { echo "detached.sh: $name was never started" >&2; exit 2; }
    end=$((SECONDS + $1))
    while alive && [ $SECONDS -lt $end ]; do sleep 2; done
    new_lines
    if [ -e "$dir/exit" ]; then echo "detached.sh: $name exited $(cat "$dir/exit")"; exit 0; fi
    if alive; then echo "detached.sh: $name still running"; exit 3; fi
    echo "detached.sh: $name ended without an exit status (killed)"; exit 0
    ;;
  stop)
    grace=${1:-90}
    [[ "$grace" =~ ^[0-9]+$ ]] || usage
    alive || { echo "detached.sh: $name is not running"; exit 0; }
    timers=$(for pid in $(session); do [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = timeout ] && echo "$pid"; done)
    if [ -n "$timers" ]; then kill -TERM $timers 2>/dev/null
    else kill -TERM -- "-$(cat "$dir/pid")" 2>/dev/null; fi
    end=$((SECONDS + grace))
    while alive && [ $SECONDS -lt $end ]; do sleep 1; done
    if alive; then
      echo "detached.sh: $name still running after ${grace} s: SIGKILL"
      kill -KILL $(session) 2>/dev/null
    fi
    new_lines
    echo "detached.sh: $name stopped ($( [ -e "$dir/exit" ] && echo "exit $(cat "$dir/exit")" || echo killed))"
    ;;
  status)
    if alive; then echo running; exit 3; fi
    if [ -e "$dir/exit" ]; then echo "exited $(cat "$dir/exit")"; exit 0; fi
    echo "not started"; exit 2
    ;;
  *) usage ;;
esac
