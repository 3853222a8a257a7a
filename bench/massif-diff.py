#!/usr/bin/env python3
"""Where the heap of idle connections goes: the difference between two
massif detailed snapshots of one lookout (before and after opening N idle
connections), in bytes per connection, by allocation site.

    valgrind --tool=massif --vgdb=yes --depth=40 --threshold=0.0 lookout -c FILE &
    vgdb --pid=PID detailed_snapshot before        # warm, nothing open
    python3 bench/idle.py IP PORT -n N [--tls] ... # and hold them
    vgdb --pid=PID detailed_snapshot after
    bench/massif-diff.py before after N [FRAMES]

Each site is named by its first FRAMES callers (4) past the allocation
functions (malloc, OpenSSL's and libevent's wrappers, lk_xmalloc); the
first line gives malloc's own overhead (headers, alignment) too.
bench/results/2026-12-03-2155-idle-bytes.md was made with it.
"""
import collections
import re
import sys

WRAPPERS = re.compile(r"(lk_xmalloc|lk_xcalloc|lk_xrealloc|CRYPTO_malloc|CRYPTO_zalloc|CRYPTO_realloc|"
                      r"CRYPTO_clear_realloc|event_mm_malloc_|event_mm_calloc_|event_mm_realloc_|"
                      r"mm_malloc|mm_calloc|mm_realloc|\?\?\?)")


def parse(path):
    """(heap bytes, malloc overhead bytes, {stack: bytes}) of a snapshot."""
    lines = open(path).read().split("\n")
    start = next(i for i, l in enumerate(lines) if l.startswith("heap_tree="))
    heap = int(next(l for l in lines if l.startswith("mem_heap_B=")).split("=")[1])
    extra = int(next(l for l in lines if l.startswith("mem_heap_extra_B=")).split("=")[1])
    leaves, stack = collections.Counter(), []
    for l in lines[start + 1:]:
        m = re.match(r"^( *)n(\d+): (\d+) (.*)$", l)
        if not m:
            continue
        depth = len(m.group(1))
        fn = re.sub(r" \(in [^)]*\)", "", re.sub(r"^0x[0-9A-F]+: ", "", m.group(4)))
        del stack[depth:]
        stack.append(fn.split(" (")[0])
        if int(m.group(2)) == 0:
            leaves[tuple(stack[1:])] += int(m.group(3))
    return heap, extra, leaves


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    n = int(sys.argv[3])
    frames = int(sys.argv[4]) if len(sys.argv) > 4 else 4
    h0, e0, a = parse(sys.argv[1])
    h1, e1, b = parse(sys.argv[2])
    print("heap %d -> %d: %.1f B/conn; malloc overhead %d -> %d: %.1f B/conn"
          % (h0, h1, (h1 - h0) / n, e0, e1, (e1 - e0) / n))
    by = collections.Counter()
    for k in set(a) | set(b):
        if b[k] != a[k]:
            site = [f for f in k if not WRAPPERS.match(f)][:frames]
            by[" < ".join(site)] += b[k] - a[k]
    for site, d in sorted(by.items(), key=lambda x: -abs(x[1])):
        if abs(d) >= n:
            print("%8.1f  %s" % (d / n, site))


if __name__ == "__main__":
    main()
