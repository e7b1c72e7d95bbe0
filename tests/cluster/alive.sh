# pid_alive PID: PID runs. A process that exited but was not reaped yet (a zombie: kill -0
# still finds it, its exe link is empty) does not: "up" must start it again. Sourced by the
# scripts that start the local cluster's processes.
pid_alive() {
  [[ -n "$1" ]] && kill -0 "$1" 2>/dev/null || return 1
  [[ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)" != Z ]]
}
