"""Helpers shared by the Python benchmarks in bench/: the attention shape flags and the CPU name."""
import platform


def add_attention_shape_args(ap, rounds):
    """Adds --seq, --heads, --kv-heads, --head-dim (defaults 2048, 32, 8, 128: a Llama-style GQA
    layer) and --rounds (default `rounds`) to the argparse parser `ap`."""
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=rounds)


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
