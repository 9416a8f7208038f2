"""SVG charts drawn with gnuplot. Without gnuplot the charts are skipped and
the tables (which hold the same numbers) still say everything."""

import os
import shutil
import subprocess
import tempfile


def available():
    return shutil.which("gnuplot") is not None


def _quote(s):
    return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _num(v):
    return "NaN" if v is None else repr(float(v))


def _run(script, data_lines):
    with tempfile.TemporaryDirectory() as d:
        data = os.path.join(d, "data.txt")
        with open(data, "w") as f:
            f.write("\n".join(data_lines) + "\n")
        script = script.replace("@DATA@", _quote(data))
        r = subprocess.run(["gnuplot"], input=script, text=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE)
        if r.returncode != 0:
            raise RuntimeError("gnuplot: " + r.stderr.strip()[-300:])


_HEADER = """set terminal svg size {w},{h} dynamic enhanced font "sans,11" background rgb "white"
set output {out}
set title {title} noenhanced
set key outside right top noenhanced
set grid ytics lc rgb "#dddddd"
set border 3
set tics nomirror
set datafile missing "NaN"
"""


def bar_chart(path, title, ylabel, categories, series, logy=False):
    """Clustered bars: one group per category, one bar per series (name -> values)."""
    names = list(series)
    lines = []
    for i, cat in enumerate(categories):
        vals = [series[n][i] for n in names]
        # A zero or missing bar cannot be drawn on a log axis.
        lines.append(_quote(cat) + " " + " ".join(
            _num(v if (v is not None and (v > 0 or not logy)) else None) for v in vals))
    script = _HEADER.format(w=max(640, 90 * len(categories) * max(1, len(names)) // 2 + 200),
                            h=420, out=_quote(path), title=_quote(title))
    script += "set ylabel %s\n" % _quote(ylabel)
    script += "set style data histograms\nset style histogram clustered gap 1\n"
    script += "set style fill solid 0.85 border -1\nset boxwidth 0.9\n"
    script += "set xtics rotate by -30 noenhanced\nset yrange [%s:*]\n" % ("*" if logy else "0")
    script += "set xrange [-0.6:%f]\n" % (len(categories) - 0.4)
    if logy:
        script += "set logscale y\n"
    plots = ["@DATA@ using %d:xtic(1) title %s" % (i + 2, _quote(n)) for i, n in enumerate(names)]
    script += "plot " + ", \\\n     ".join(plots) + "\n"
    _run(script, lines)


def line_chart(path, title, xlabel, ylabel, series, logx=False, logy=False):
    """Lines with points: series maps a name to [(x, y), ...]."""
    lines, plots, index = [], [], 0
    for name, points in series.items():
        pts = [(x, y) for x, y in points if y is not None and (y > 0 or not logy)]
        if not pts:
            continue
        lines += ["%s %s" % (_num(x), _num(y)) for x, y in pts]
        lines += ["", ""]  # two blank lines: the next data block
        plots.append("@DATA@ index %d using 1:2 with linespoints lw 2 pt 7 title %s"
                     % (index, _quote(name)))
        index += 1
    if not plots:
        return
    script = _HEADER.format(w=760, h=440, out=_quote(path), title=_quote(title))
    script += "set xlabel %s\nset ylabel %s\n" % (_quote(xlabel), _quote(ylabel))
    if logx:
        script += "set logscale x 2\n"
    if logy:
        script += "set logscale y\n"
    script += "plot " + ", \\\n     ".join(plots) + "\n"
    _run(script, lines)
