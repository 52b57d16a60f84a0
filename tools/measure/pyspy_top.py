"""Summarise a py-spy raw profile (`py-spy record -f raw`): samples by thread entry, functions by share.

    python tools/measure/pyspy_top.py PROFILE.txt [--top 60]

Line numbers are dropped so a function counts once per stack; a sample's last frame is its own (self) time.
"""
from __future__ import annotations

import argparse
import collections
import re


def summarise(path: str, top: int) -> str:
    inclusive, own, threads = collections.Counter(), collections.Counter(), collections.Counter()
    total = 0
    for line in open(path):
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack:
            continue
        samples = int(count)
        total += samples
        frames = [re.sub(r":\d+\)", ")", frame) for frame in stack.split(";")]
        entry = [f for f in frames if "(threading.py)" not in f and "thread (" not in f]
        threads[entry[0] if entry else frames[0]] += samples
        own[frames[-1]] += samples
        for frame in set(frames):
            inclusive[frame] += samples
    if not total:
        return f"{path}: no samples\n"
    lines = [f"{path}: {total} samples"]
    lines += ["-- thread entry points (first frame outside threading.py)"]
    lines += [f"{100 * n / total:5.1f}% {k[:140]}" for k, n in threads.most_common(10)]
    lines += ["-- inclusive"] + [f"{100 * n / total:5.1f}% {k[:140]}" for k, n in inclusive.most_common(top)]
    lines += ["-- self"] + [f"{100 * n / total:5.1f}% {k[:140]}" for k, n in own.most_common(top // 2)]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile")
    parser.add_argument("--top", type=int, default=60)
    args = parser.parse_args()
    print(summarise(args.profile, args.top), end="")


if __name__ == "__main__":
    main()
