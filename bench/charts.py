"""bench/charts.py: draws a bench/run report's tables as SVG charts with gnuplot.

bench/run calls draw() on the report it has just written; `bench/run
--charts-from FILE.md` (or `python3 bench/charts.py FILE.md`) redraws them from
a results file.  Both read the markdown tables, so a chart shows exactly what
the table beside it says.  Writes FILE-cpu.svg, FILE-latency.svg, FILE-cpu-rate.svg,
FILE-idle.svg, FILE-kafka.svg, FILE-pulsar.svg beside FILE.md, each only when
the run measured it.  See bench/README.md.
"""
import os
import shutil
import subprocess
import sys
import tempfile

# One colour per proxy, the same on every chart; others take the spares in turn.
COLOURS = {"direct": "#9e9e9e", "nginx": "#2e7d32", "haproxy": "#1565c0",
           "lookout": "#ef6c00", "lookout-shipped": "#ffb74d", "lookout-2w": "#8d4b00",
           "floor": "#000000"}
SPARE = ["#6a1b9a", "#00838f", "#c62828", "#558b2f"]
SIZE = "900,460"


def parse(text):
    """The report's tables: [(section, header, rows)], each row a list of cells."""
    tables, section, cur = [], "", None
    for line in text.splitlines():
        if line.startswith("## "):
            section = line[3:].strip().lower()
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cur is None:
                cur = (section, cells, [])
                tables.append(cur)
            elif not all(set(c) <= set("-:") for c in cells):
                cur[2].append(cells)
        else:
            cur = None
    return tables


def number(cell):
    try:
        return float(cell.replace(",", "").replace("+", ""))
    except ValueError:
        return None


def find(tables, section, *columns, without=None):
    """The first table of section with all these columns (and not the column without)."""
    for sec, header, rows in tables:
        if sec == section and all(c in header for c in columns) and without not in header:
            return header, rows
    return None, None


def ordered(values):
    seen = []
    for v in values:
        if v not in seen:
            seen.append(v)
    return seen


def grid(rows, key, series, value):
    """{(cluster, series): value} as tab-separated lines: one line per cluster, one column per series."""
    clusters, names = ordered(r[0] for r in rows), ordered(r[1] for r in rows)
    got = {(r[0], r[1]): r[2] for r in rows}
    lines = ["\t".join([key] + names)]
    for c in clusters:
        vals = [got.get((c, n)) for n in names]
        lines.append("\t".join([c] + ["?" if v is None else "%g" % v for v in vals]))
    return "\n".join(lines) + "\n", names


def colour(name, i):
    return COLOURS.get(name, SPARE[i % len(SPARE)])


def histogram(dat, names, title, ylabel, log=False, extra=""):
    """gnuplot lines for one clustered bar chart of dat (a file name)."""
    g = ["set title %s" % q(title), "set ylabel %s" % q(ylabel),
         "set style data histograms", "set style histogram clustered gap 1",
         "set style fill solid 0.9 border rgb '#333333'", "set boxwidth 0.9",
         "set key outside right top vertical Left reverse noenhanced",
         "set grid ytics lc rgb '#dddddd'", "set xtics nomirror noenhanced", "set ytics nomirror",
         "set border 3", "set key autotitle columnheader"]
    g.append("set logscale y; set yrange [*:*]" if log else "unset logscale y; set yrange [0:*]")
    g.append(extra)
    plots = ["%s using %d:xtic(1) title %s lc rgb %s" % (q(dat), i + 2, q(n), q(colour(n, i)))
             for i, n in enumerate(names)]
    g.append("plot " + ", \\\n     ".join(plots))
    return g


def q(s):
    return '"%s"' % s.replace("\\", "\\\\").replace('"', '\\"')


def charts(tables):
    """[(suffix, {file: data}, gnuplot lines)] for every chart the tables allow."""
    out = []
    header, rows = find(tables, "", "scenario", "target", "CPU-s/100k", without="offered req/s")
    if rows:
        i_s, i_t = header.index("scenario"), header.index("target")
        cpu = [(r[i_s], r[i_t], number(r[header.index("CPU-s/100k")])) for r in rows]
        dat, names = grid(cpu, "scenario", "target", 2)
        g = ["set terminal svg size %s font 'Helvetica,13' background rgb 'white'" % SIZE]
        g += histogram("cpu.dat", names, "CPU per request by scenario (lower is cheaper; log scale)",
                       "CPU-s per 100,000 requests", log=True,
                       extra="set xtics rotate by -25 offset -1,0")
        out.append(("cpu", {"cpu.dat": dat}, g))
        files, g = {}, ["set terminal svg size 900,760 font 'Helvetica,13' background rgb 'white'",
                        "set multiplot layout 2,1"]
        for p in ("p50", "p99"):
            lat = [(r[i_s], r[i_t], number(r[header.index(p + " ms")])) for r in rows]
            files[p + ".dat"], names = grid(lat, "scenario", "target", 2)
            g += histogram(p + ".dat", names, "Latency %s by scenario (lower is better; log scale)" % p,
                           "%s latency, ms" % p, log=True,
                           extra="set xtics rotate by -25 offset -1,0")
        g.append("unset multiplot")
        out.append(("latency", files, g))
    header, rows = find(tables, "", "scenario", "target", "CPU-s/100k", "offered req/s")
    if rows:
        cpu = [(r[header.index("scenario")], r[header.index("target")], number(r[header.index("CPU-s/100k")]))
               for r in rows]
        dat, names = grid(cpu, "scenario", "target", 2)
        g = ["set terminal svg size %s font 'Helvetica,13' background rgb 'white'" % SIZE]
        g += histogram("rate.dat", names, "CPU per request at one offered rate, %s req/s (lower is cheaper)"
                       % rows[0][header.index("offered req/s")], "CPU-s per 100,000 requests")
        out.append(("cpu-rate", {"rate.dat": dat}, g))
    header, rows = find(tables, "", "target", "tls", "KiB/conn")
    if rows:
        kib = [("TLS" if r[header.index("tls")] == "yes" else "plain", r[header.index("target")],
                number(r[header.index("KiB/conn")])) for r in rows]
        dat, names = grid(kib, "connection", "target", 2)
        g = ["set terminal svg size 900,420 font 'Helvetica,13' background rgb 'white'"]
        g += histogram("idle.dat", names, "Memory per idle keep-alive connection (RSS growth / connections)",
                       "KiB per connection")
        out.append(("idle", {"idle.dat": dat}, g))
    for proto, window in (("kafka", "delivery"), ("pulsar", "receipt")):
        th, trows = find(tables, proto, "target", "produce msg/s", "consume msg/s")
        lh, lrows = find(tables, proto, "target", "layout", "p99 µs")
        if not trows and not lrows:
            continue
        files, g = {}, ["set terminal svg size 900,760 font 'Helvetica,13' background rgb 'white'",
                        "set multiplot layout 2,1"]
        if trows:
            tp = []
            for r in trows:
                for col, label in (("produce msg/s", "produce"), ("consume msg/s", "consume")):
                    v = number(r[th.index(col)])
                    tp.append((label, r[th.index("target")], None if v is None else v / 1000))
            files["tput.dat"], names = grid(tp, "direction", "target", 2)
            g += histogram("tput.dat", names, "%s throughput, 1 KiB messages (higher is better)"
                           % proto.capitalize(), "thousand messages/s")
        if lrows:
            lat = []
            for r in lrows:
                lat.append(("%s\\n%s" % (r[lh.index("target")], r[lh.index("layout")]), "p50",
                            number(r[lh.index("p50 µs")])))
                lat.append(("%s\\n%s" % (r[lh.index("target")], r[lh.index("layout")]), "p99",
                            number(r[lh.index("p99 µs")])))
            files["lat.dat"], _ = grid(lat, "run", "percentile", 2)
            COLOURS.setdefault("p50", "#90caf9")
            COLOURS.setdefault("p99", "#0d47a1")
            g += histogram("lat.dat", ["p50", "p99"], "%s one-at-a-time request latency (lower is better)"
                           % proto.capitalize(), "µs", extra="set xtics font ',10'")
        g.append("unset multiplot")
        out.append((proto, files, g))
    return out


def draw(text, prefix, say=print):
    """Writes PREFIX-NAME.svg for every chart the report allows; returns their paths."""
    if shutil.which("gnuplot") is None:
        say("bench: gnuplot is missing (bench/deps.sh installs gnuplot-nox): no charts")
        return []
    written, todo = [], charts(parse(text))
    if not todo:
        say("bench: no table to draw a chart from")
        return []
    with tempfile.TemporaryDirectory(prefix="lookout-charts.") as d:
        for suffix, files, g in todo:
            for name, data in files.items():
                with open(os.path.join(d, name), "w") as f:
                    f.write(data)
            svg = os.path.abspath("%s-%s.svg" % (prefix, suffix))
            script = os.path.join(d, suffix + ".gp")
            with open(script, "w") as f:
                f.write("set datafile separator '\\t'\nset datafile missing '?'\n")
                f.write("set output %s\n" % q(svg))
                f.write("\n".join(g) + "\n")
            r = subprocess.run(["gnuplot", script], cwd=d, capture_output=True, text=True)
            if r.returncode != 0:
                say("bench: gnuplot failed on %s: %s" % (suffix, r.stderr.strip()[-400:]))
                continue
            written.append(svg)
    return written


def from_file(path, say=print):
    with open(path) as f:
        text = f.read()
    prefix = path[:-3] if path.endswith(".md") else path
    return draw(text, prefix, say)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: bench/charts.py RESULTS.md...")
    for p in sys.argv[1:]:
        for svg in from_file(p, lambda m: print(m, file=sys.stderr)):
            print(svg)
