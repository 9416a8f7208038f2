"""Results: statistics helpers, the per-suite result object, and writing
bench/results/<suite>.md and <suite>.json."""

import datetime
import json
import math
import os

SCHEMA = "cairn-bench/1"


def mean(xs):
    xs = list(xs)
    return sum(xs) / len(xs) if xs else None


def median(xs):
    return percentile(xs, 50)


def percentile(xs, p):
    """Linear interpolation between closest ranks (numpy's default)."""
    xs = sorted(xs)
    if not xs:
        return None
    k = (len(xs) - 1) * p / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def ratio(a, b):
    """a / b, None when either is unknown or b is zero."""
    if a is None or b is None or b == 0:
        return None
    return a / b


def fmt(x, digits=2):
    if x is None:
        return "n/a"
    if isinstance(x, str):
        return x
    if isinstance(x, int):
        return "{:,}".format(x)
    if abs(x) >= 1000:
        return "{:,.0f}".format(x)
    if abs(x) >= 100:
        return "{:.1f}".format(x)
    return "{:.{}f}".format(x, digits if abs(x) >= 0.01 or x == 0 else 4)


def fmt_ratio(x):
    return "n/a" if x is None else "{:.2f}x".format(x)


def fmt_bytes(n):
    if n is None:
        return "n/a"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return "{:.1f} {}".format(n / size, unit)
    return "{} B".format(n)


def cell(text):
    """A markdown table cell: a literal | would end it."""
    return str(text).replace("|", "\\|")


class Table:
    def __init__(self, title, columns, note=None):
        self.title = title
        self.columns = columns
        self.rows = []
        self.note = note

    def add(self, *cells):
        self.rows.append([fmt(c) if not isinstance(c, str) else c for c in cells])

    def to_dict(self):
        return {"title": self.title, "columns": self.columns, "rows": self.rows,
                "note": self.note}

    def markdown(self):
        out = ["### " + self.title, ""]
        if self.note:
            out += [self.note, ""]
        out.append("| " + " | ".join(self.columns) + " |")
        out.append("|" + "|".join("---" for _ in self.columns) + "|")
        for row in self.rows:
            out.append("| " + " | ".join(cell(c) for c in row) + " |")
        out.append("")
        return "\n".join(out)


class SuiteResult:
    def __init__(self, suite, ctx):
        self.suite = suite
        self.tier = ctx.tier
        self.status = "ok"  # ok, skipped, failed, crashed
        self.error = None
        self.tables = []
        self.targets = []
        self.notes = []
        self.charts = []
        self.data = {}
        self.started = datetime.datetime.now(datetime.timezone.utc)
        self.seconds = None
        # Other work on the machine shows here; peers of the same run share it.
        self.loadavg = {"start": loadavg(), "end": None}

    def table(self, title, columns, note=None):
        t = Table(title, columns, note)
        self.tables.append(t)
        return t

    def note(self, text):
        if text not in self.notes:
            self.notes.append(text)

    def target(self, name, measured, met, detail=None):
        """A target of the issue: met is True, False, or None (not measured, with why)."""
        self.targets.append({"target": name, "measured": measured, "met": met,
                             "detail": detail})

    @property
    def failed(self):
        return self.status in ("failed", "crashed")

    def to_dict(self, machine, versions):
        return {
            "schema": SCHEMA,
            "suite": self.suite,
            "tier": self.tier,
            "status": self.status,
            "error": self.error,
            "started": self.started.isoformat(timespec="seconds"),
            "seconds": self.seconds,
            "loadavg_1min": self.loadavg,
            "machine": machine,
            "tools": versions,
            "targets": self.targets,
            "tables": [t.to_dict() for t in self.tables],
            "notes": self.notes,
            "charts": self.charts,
            "data": self.data,
        }


def loadavg():
    """The 1-minute load average, or None."""
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def met_text(met):
    return {True: "yes", False: "**NO**", None: "not measured"}[met]


def write_suite(result, out_dir, machine, versions):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, result.suite + ".json"), "w") as f:
        json.dump(result.to_dict(machine, versions), f, indent=2, sort_keys=True)
        f.write("\n")
    lines = ["# Benchmark: %s" % result.suite, ""]
    lines.append("Tier `%s`, run %s, %.0f s. Status: **%s**%s." % (
        result.tier, result.started.strftime("%Y-%m-%d %H:%M UTC"), result.seconds or 0,
        result.status, (" - " + result.error) if result.error else ""))
    lines.append("")
    lines.append("Machine: %s. Load average (1 min) at start / end: %s / %s."
                 % (machine_line(machine), fmt(result.loadavg["start"]),
                    fmt(result.loadavg["end"])))
    lines.append("")
    if result.targets:
        lines += ["## Targets", "", "| target | measured | met |", "|---|---|---|"]
        for t in result.targets:
            measured = t["measured"] + ((" (" + t["detail"] + ")") if t.get("detail") else "")
            lines.append("| %s | %s | %s |" % (cell(t["target"]), cell(measured),
                                                met_text(t["met"])))
        lines.append("")
    if result.tables:
        lines += ["## Results", ""]
        for t in result.tables:
            lines.append(t.markdown())
    for chart in result.charts:
        lines += ["![%s](%s)" % (chart, chart), ""]
    if result.notes:
        lines += ["## Notes", ""]
        lines += ["- " + n for n in result.notes]
        lines.append("")
    with open(os.path.join(out_dir, result.suite + ".md"), "w") as f:
        f.write("\n".join(lines))


def machine_line(m):
    parts = ["%s CPUs (%s)" % (m.get("nproc"), m.get("cpu", "unknown CPU")),
             "memory %s" % m.get("memory", "?"),
             "%s" % m.get("filesystem", "unknown file system")]
    if m.get("disk"):
        parts.append(m["disk"] + " disk")
    parts.append("Linux " + m.get("kernel", "?"))
    return ", ".join(parts)


def write_summary(results, out_dir, machine, versions, tier):
    lines = ["# Benchmark summary", "",
             "Tier `%s`. Machine: %s." % (tier, machine_line(machine)), "",
             "| suite | status | targets met |", "|---|---|---|"]
    for r in results:
        met = sum(1 for t in r.targets if t["met"] is True)
        known = sum(1 for t in r.targets if t["met"] is not None)
        lines.append("| [%s](%s.md) | %s | %d of %d measured (%d listed) |"
                     % (r.suite, r.suite, r.status, met, known, len(r.targets)))
    lines.append("")
    lines += ["## Every target", "", "| suite | target | measured | met |", "|---|---|---|---|"]
    for r in results:
        for t in r.targets:
            lines.append("| %s | %s | %s | %s |" % (r.suite, cell(t["target"]),
                                                    cell(t["measured"]), met_text(t["met"])))
    lines += ["", "Load average (1 min) at the start and end of each suite, on %s CPUs: %s."
              % (machine.get("nproc"), ", ".join(
                  "%s %s/%s" % (r.suite, fmt(r.loadavg["start"]), fmt(r.loadavg["end"]))
                  for r in results))]
    lines += ["", "## Tools", ""]
    for name, v in sorted(versions.items()):
        lines.append("- %s: %s" % (name, v))
    lines += ["", "## Machine", "", "```", machine.get("free_h", ""), "```", ""]
    with open(os.path.join(out_dir, "summary.md"), "w") as f:
        f.write("\n".join(lines))
