"""Helpers shared by the Python benchmarks in bench/: the attention shape flags, the A/B scripts'
command line and the CPU name."""
import platform


def add_attention_shape_args(ap, rounds):
    """Adds --seq, --heads, --kv-heads, --head-dim (defaults 2048, 32, 8, 128: a Llama-style GQA
    layer) and --rounds (default `rounds`) to the argparse parser `ap`."""
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=rounds)


def parse_ab(ap, argv):
    """Parses an A/B script's command line with the argparse parser `ap`, to which it adds the
    binaries to compare and --rounds (default 6). Everything before `--` is the script's; returns
    (options, the arguments after `--`, or None without `--`). Exits through ap.error unless there
    are at least two binaries, each given once, and at least one round."""
    ap.add_argument("binaries", nargs="+", help="attnkit executables to compare (at least two)")
    ap.add_argument("--rounds", type=int, default=6, help="alternating rounds (default 6)")
    own, rest = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, None)
    opts = ap.parse_args(own)
    if len(opts.binaries) < 2:
        ap.error("give at least two binaries")
    if opts.rounds < 1:
        ap.error("--rounds must be at least 1")
    if len(set(opts.binaries)) != len(opts.binaries):
        ap.error("each binary may be given once (a symlink gives the same one a second path)")
    return opts, rest


def cpu_model():
    """The CPU's model name from /proc/cpuinfo, else platform.processor(), else "unknown"."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"
