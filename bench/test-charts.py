#!/usr/bin/env python3
"""bench/test-charts.py: checks bench/charts.py on committed results files.

Run by hand (needs gnuplot, bench/deps.sh): `python3 bench/test-charts.py`.
Redraws into a temp dir from a quick run with every section, from a full run
with the floor and the table at one offered rate, and from a run without
Kafka/Pulsar and idle tables, and checks that each chart exists (and
only those the run measured) and names the scenarios and proxies it should.
"""
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import charts  # noqa: E402

fails = 0


def check(ok, what):
    global fails
    print(("ok - " if ok else "not ok - ") + what)
    fails += not ok


def run(name, want):
    with tempfile.TemporaryDirectory(prefix="lookout-charts-test.") as d:
        md = os.path.join(d, name)
        shutil.copy(os.path.join(HERE, "results", name), md)
        got = charts.from_file(md, lambda m: check(False, m))
        names = sorted(os.path.basename(p)[len(name) - 3:] for p in got)
        check(names == sorted("-%s.svg" % s for s in want), "%s: charts %s" % (name, " ".join(names)))
        for suffix, words in want.items():
            path = md[:-3] + "-%s.svg" % suffix
            if not os.path.exists(path):
                continue
            with open(path) as f:
                svg = f.read()
            check(svg.lstrip().startswith("<?xml") and "</svg>" in svg, "%s-%s.svg is a whole SVG" % (name, suffix))
            missing = [w for w in words if ">%s<" % w not in svg]
            check(not missing, "%s-%s.svg names %s%s" % (name, suffix, ", ".join(words),
                                                        " (missing: %s)" % missing if missing else ""))


proxies = ["direct", "nginx", "haproxy", "lookout", "lookout-shipped", "lookout-2w"]
scen = ["small", "64k", "redirect", "lookup", "new", "pp-new", "tls-ka", "tls-new", "tls-new-cert"]
run("2026-12-03-1903.md", {
    "cpu": scen + proxies + ["CPU-s per 100,000 requests"],
    "latency": scen + proxies + ["p50 latency, ms", "p99 latency, ms"],
    "idle": ["plain", "TLS", "nginx", "haproxy", "lookout", "KiB per connection"],
    "kafka": ["produce", "consume", "direct", "nginx", "haproxy", "lookout", "proxy on core 1"],
    "pulsar": ["produce", "consume", "direct", "nginx", "haproxy", "lookout", "proxy on core 1"],
})
# A full run with the floor and the table at one offered rate (cpu-rate).
rated = ["small", "redirect", "lookup", "tls-ka"]
full = {
    "cpu": scen + proxies + ["floor", "CPU-s per 100,000 requests"],
    "cpu-rate": rated + ["nginx", "haproxy", "lookout", "lookout-shipped", "floor"],
    "latency": scen + proxies + ["floor"],
    "idle": ["plain", "TLS", "nginx", "haproxy", "lookout"],
    "kafka": ["produce", "consume", "direct", "nginx", "haproxy", "lookout"],
    "pulsar": ["produce", "consume", "direct", "nginx", "haproxy", "lookout"],
}
for f in ("2026-12-05-0848.md", "2026-12-05-1233.md", "2026-12-05-1528.md", "2026-12-06-0057.md"):
    run(f, full)
# An HTTP-only run without the memory test: cpu and latency only.
run("2026-12-03-1837.md", {"cpu": ["new", "pp-new", "nginx", "lookout"], "latency": ["new", "pp-new", "nginx", "lookout"]})
print("1..%s" % ("failed %d" % fails if fails else "all passed"))
sys.exit(1 if fails else 0)
