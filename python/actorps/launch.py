# SPDX-License-Identifier: BSD-3-Clause
"""actorps-launch: a whole job on this machine for one worker command.

    python3 -m actorps.launch --workers 4 --servers 1 --mode dist_sync -- \\
        python3 train.py --epochs 3

starts a coordinator, the servers and WORKERS copies of the command (as
torchrun, MXNet's tools/launch.py and BytePS's bpslaunch do). Each worker
finds its job in the environment, which `actorps.KVStore.create("dist")`
reads when the call does not name it:

    ACTORPS_COORDINATOR   host:port of the coordinator
    ACTORPS_TOKEN         the job token (a fresh random one unless set)
    ACTORPS_MODE          dist_sync, dist_async or dist_ssp
    ACTORPS_NUM_WORKERS   the number of workers
    ACTORPS_LOCAL_RANK    0..WORKERS-1, the launch order (the coordinator
                          gives ranks in join order: KVStore.rank is the one
                          that counts)

Every line a process prints comes out prefixed with its role. The launcher
stops every process it started when a worker fails, when a server or the
coordinator dies, or on Ctrl-C, and exits with the first failure's code (0
when every worker and the coordinator finished cleanly).

The apps (actorps-coordinator, actorps-server) are taken from --bin-dir,
else $ACTORPS_BIN_DIR, else the build tree next to this package, else PATH.

Several machines under Slurm: run one launcher per node with --slurm,

    export ACTORPS_TOKEN=$(openssl rand -hex 16)     # the same for all
    srun --ntasks-per-node=1 actorps-launch --slurm --port 29500 \
        --workers 8 --servers 2 -- python3 train.py

Task 0 (SLURM_PROCID) runs the coordinator on the first host of
SLURM_JOB_NODELIST at --port; every task runs its share of the servers and
workers (server or worker i on task i mod SLURM_NTASKS), which reach the
coordinator there and tell each other this node's name (SLURMD_NODENAME;
--advertise sets another). The token must come from the environment
(ACTORPS_TOKEN), the same for every task.

Several machines through ssh: --hosts a,b,c runs the coordinator here (on
--host, an address the others reach) and server or worker i on host
i mod 3 with `ssh HOST` (--ssh sets the command), in this folder, the apps
and the command at the same paths as here (a shared file system); the
token goes over ssh's input, never on a command line.
"""

import argparse
import os
import queue
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading


def _find_app(name, bin_dir):
    candidates = []
    if bin_dir:
        candidates.append(os.path.join(bin_dir, name))
    if os.environ.get("ACTORPS_BIN_DIR"):
        candidates.append(os.path.join(os.environ["ACTORPS_BIN_DIR"], name))
    # The build tree: build/python/actorps/launch.py and build/apps/NAME.
    here = os.path.dirname(os.path.abspath(__file__))
    candidates.append(os.path.join(here, "..", "..", "apps", name))
    for c in candidates:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return os.path.abspath(c)
    found = shutil.which(name)
    if found:
        return found
    raise SystemExit(f"actorps-launch: cannot find {name} (give --bin-dir, "
                     "set ACTORPS_BIN_DIR, or put it on PATH)")


class _Process:
    """A started process whose output lines go to `lines` with a prefix."""

    def __init__(self, role, args, env, lines, stdin_text=None):
        self.role = role
        self.proc = subprocess.Popen(
            args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL if stdin_text is None else subprocess.PIPE,
            text=True, start_new_session=True)
        if stdin_text is not None:
            # A secret for the remote side: never on a command line.
            self.proc.stdin.write(stdin_text)
            self.proc.stdin.close()
        self._lines = lines
        self.reader = threading.Thread(target=self._forward, daemon=True)
        self.reader.start()

    def _forward(self):
        for line in self.proc.stdout:
            self._lines.put((self, line))
        self._lines.put((self, None))

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass


def _expand_nodelist(text):
    """Slurm's compressed host list ("n[01-03,07],gpu5") as names."""
    if shutil.which("scontrol"):
        out = subprocess.run(["scontrol", "show", "hostnames", text],
                             capture_output=True, text=True)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.split()
    hosts = []
    for m in re.finditer(r"([^,\[]+)(?:\[([^\]]+)\])?", text):
        prefix, ranges = m.group(1), m.group(2)
        if not ranges:
            hosts.append(prefix)
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            for i in range(int(lo), int(hi or lo) + 1):
                hosts.append(f"{prefix}{i:0{len(lo)}d}")
    return hosts


class _Slurm:
    """This task's place in a Slurm job."""

    def __init__(self, args):
        env = os.environ
        try:
            self.task = int(env["SLURM_PROCID"])
            self.tasks = int(env["SLURM_NTASKS"])
            hosts = _expand_nodelist(env["SLURM_JOB_NODELIST"])
        except (KeyError, ValueError) as e:
            raise SystemExit("actorps-launch: --slurm needs SLURM_PROCID, "
                             "SLURM_NTASKS and SLURM_JOB_NODELIST (run it "
                             f"under srun): {e}")
        if not hosts or not 0 <= self.task < self.tasks:
            raise SystemExit("actorps-launch: --slurm: no host list or a "
                             "task number out of range")
        if not env.get("ACTORPS_TOKEN"):
            raise SystemExit("actorps-launch: --slurm needs ACTORPS_TOKEN "
                             "set, the same for every task")
        self.coordinator = f"{hosts[0]}:{args.port}"
        self.advertise = (args.advertise or env.get("SLURMD_NODENAME")
                          or hosts[min(self.task, len(hosts) - 1)])

    def mine(self, count):
        """The indices of the servers or workers this task runs."""
        return [i for i in range(count) if i % self.tasks == self.task]


class _Ssh:
    """Starts servers and workers on other hosts through ssh."""

    def __init__(self, args):
        import shlex
        self.hosts = [h for h in args.hosts.split(",") if h]
        if not self.hosts:
            raise SystemExit("actorps-launch: --hosts names no host")
        self.ssh = shlex.split(args.ssh)
        self.cwd = os.getcwd()
        self._quote = shlex.quote

    def host(self, i):
        return self.hosts[i % len(self.hosts)]

    def command(self, host, argv, env):
        """ssh's argv running `argv` on `host` in this folder with `env`;
        the token comes on stdin (read into ACTORPS_TOKEN there)."""
        q = self._quote
        exports = " ".join(f"{k}={q(v)}" for k, v in env.items())
        remote = ("read -r ACTORPS_TOKEN && export ACTORPS_TOKEN && "
                  f"cd {q(self.cwd)} && exec env {exports} "
                  + " ".join(q(a) for a in argv))
        return self.ssh + [host, remote]


def _parse(argv):
    p = argparse.ArgumentParser(
        prog="actorps-launch",
        description="Runs a distributed actorps job on this machine: a "
        "coordinator, SERVERS servers and WORKERS copies of COMMAND.",
        epilog="Example: actorps-launch -n 4 -- python3 train.py")
    p.add_argument("-n", "--workers", type=int, default=1,
                   help="worker processes (copies of COMMAND), >= 1")
    p.add_argument("-s", "--servers", type=int, default=1,
                   help="server processes, >= 1")
    p.add_argument("--shards", type=int, default=0,
                   help="shard actors per server (0: the server's default)")
    p.add_argument("--mode", default="dist_sync",
                   choices=["dist_sync", "dist_async", "dist_ssp"])
    p.add_argument("--staleness", type=int, default=2,
                   help="dist_ssp: the staleness bound (README)")
    p.add_argument("--transport", default="auto", choices=["auto", "caf", "ucx"],
                   help="what carries tensor bytes (auto: ucx unless TLS)")
    p.add_argument("--host", default=None,
                   help="address the coordinator and servers listen on "
                   "(default 127.0.0.1; with --slurm every interface)")
    p.add_argument("--bin-dir", default="",
                   help="folder of actorps-coordinator and actorps-server")
    p.add_argument("--slurm", action="store_true",
                   help="one launcher per Slurm task: task 0 runs the "
                   "coordinator on the first host of SLURM_JOB_NODELIST, "
                   "each task its share of servers and workers")
    p.add_argument("--hosts", default="",
                   help="servers and workers on these hosts (comma-"
                   "separated; number i on host i mod count) through ssh; "
                   "the coordinator runs here, on --host, which they must "
                   "reach")
    p.add_argument("--ssh", default="ssh -o BatchMode=yes",
                   help="--hosts: the command that runs a command on a host")
    p.add_argument("--port", type=int, default=29500,
                   help="--slurm: the coordinator's port")
    p.add_argument("--advertise", default="",
                   help="--slurm: the address other nodes reach this one at "
                   "(default: SLURMD_NODENAME)")
    p.add_argument("command", nargs=argparse.REMAINDER,
                   help="the worker command, after --")
    args = p.parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not args.command:
        p.error("no worker command (give it after --)")
    if args.workers < 1 or args.servers < 1 or args.shards < 0:
        p.error("--workers and --servers must be >= 1, --shards >= 0")
    if not 0 < args.port < 65536:
        p.error("--port must be 1..65535")
    if args.slurm and args.hosts:
        p.error("--slurm and --hosts do not go together")
    if args.host is None:
        args.host = "" if args.slurm else "127.0.0.1"
    return args


class _Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP to the launcher: stop the job as Ctrl-C does."""

    def __init__(self, signum):
        super().__init__()
        self.signum = signum


def _terminate(signum, frame):
    raise _Terminated(signum)


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def main(argv=None):
    args = _parse(sys.argv[1:] if argv is None else argv)
    # Its processes run in their own sessions: a kill of the launcher alone
    # must not leave them running.
    on_main_thread = threading.current_thread() is threading.main_thread()
    saved = {}
    if on_main_thread:
        for sig in (signal.SIGTERM, signal.SIGHUP):
            saved[sig] = signal.signal(sig, _terminate)
    coordinator_bin = _find_app("actorps-coordinator", args.bin_dir)
    server_bin = _find_app("actorps-server", args.bin_dir)
    token = os.environ.get("ACTORPS_TOKEN") or secrets.token_hex(16)
    # The token travels in the environment, never on a command line.
    env = dict(os.environ, ACTORPS_TOKEN=token)
    lines = queue.Queue()
    procs = []
    out = sys.stdout

    def say(role, text):
        out.write(f"[{role}] {text}")
        if not text.endswith("\n"):
            out.write("\n")
        out.flush()

    def stop_all():
        # A second Ctrl-C or SIGTERM must not cut this short: the processes
        # run in their own sessions and would outlive the launcher.
        if on_main_thread:
            for sig in _STOP_SIGNALS:
                signal.signal(sig, signal.SIG_IGN)
        for p in procs:
            p.stop()
        for p in procs:
            try:
                p.proc.wait(10)
            except subprocess.TimeoutExpired:
                p.stop(signal.SIGKILL)
                p.proc.wait()

    slurm = _Slurm(args) if args.slurm else None
    interrupted = False
    coordinator = None
    try:
        if slurm is None or slurm.task == 0:
            port = str(args.port) if slurm is not None else "0"
            coordinator = _Process(
                "coordinator",
                [coordinator_bin, "--host", args.host, "--port", port,
                 "--mode", args.mode, "--staleness", str(args.staleness),
                 "--workers", str(args.workers), "--servers",
                 str(args.servers), "--transport", args.transport], env,
                lines)
            procs.append(coordinator)
        address = slurm.coordinator if slurm is not None else None
        while address is None:
            try:
                p, line = lines.get(timeout=60)
            except queue.Empty:
                say("launch", "the coordinator said nothing for 60 s: "
                    "stopping")
                return 1
            if line is None:
                stop_all()
                return p.proc.wait() or 1
            say(p.role, line)
            m = re.search(r"listening on (\S+:\d+)", line)
            if m:
                address = m.group(1)
        servers = slurm.mine(args.servers) if slurm else range(args.servers)
        workers = slurm.mine(args.workers) if slurm else range(args.workers)
        advertise = slurm.advertise if slurm is not None else args.host
        ssh = _Ssh(args) if args.hosts else None
        for i in servers:
            host = ssh.host(i) if ssh else advertise
            server_args = [server_bin, "--coordinator", address, "--host",
                           host, "--connect-timeout-ms", "60000"]
            if ssh is None and advertise != args.host:
                # Listens where asked, tells workers the node's name.
                server_args += ["--bind", args.host]
            if args.shards:
                server_args += ["--shards", str(args.shards)]
            if ssh is None:
                procs.append(_Process(f"server {i}", server_args, env, lines))
            else:
                procs.append(_Process(
                    f"server {i}@{host}", ssh.command(host, server_args, {}),
                    os.environ, lines, stdin_text=token + "\n"))
        for i in workers:
            job_env = dict(ACTORPS_COORDINATOR=address, ACTORPS_MODE=args.mode,
                           ACTORPS_NUM_WORKERS=str(args.workers),
                           ACTORPS_LOCAL_RANK=str(i))
            if ssh is None:
                procs.append(_Process(f"worker {i}", args.command,
                                      dict(env, **job_env), lines))
            else:
                host = ssh.host(i)
                procs.append(_Process(
                    f"worker {i}@{host}",
                    ssh.command(host, args.command, job_env), os.environ,
                    lines, stdin_text=token + "\n"))
        # Until every process ended: the first failure stops the others (a
        # worker that failed, a server or coordinator that died: the
        # workers would fail with dead_node anyway).
        open_streams = len(procs)
        failure = 0
        while open_streams > 0:
            p, line = lines.get()
            if line is not None:
                say(p.role, line)
                continue
            open_streams -= 1
            code = p.proc.wait()
            if code != 0 and failure == 0:
                failure = code
                say("launch", f"{p.role} exited with code {code}: stopping "
                    "the job")
                for other in procs:
                    other.stop()
        return failure
    except KeyboardInterrupt as e:
        interrupted = True
        signum = e.signum if isinstance(e, _Terminated) else signal.SIGINT
        say("launch", ("interrupted" if signum == signal.SIGINT
                       else "terminated") + ": stopping the job")
        stop_all()
        # The shell's convention: 128 + the signal's number.
        return 128 + int(signum)
    finally:
        if not interrupted:
            stop_all()
        if on_main_thread:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            for sig, handler in saved.items():
                signal.signal(sig, handler)


if __name__ == "__main__":
    sys.exit(main())
